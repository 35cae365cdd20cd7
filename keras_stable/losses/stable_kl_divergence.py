"""Kullback-Leibler divergence to a softmax, in logit space."""

from keras_stable import ops as stable_ops
from keras_stable.common.serialization import register
from keras_stable.losses._base import AXIS
from keras_stable.losses._base import FROM_LOGITS
from keras_stable.losses._base import LogitsLoss


@register
class StableKLDivergence(LogitsLoss):
    """Kullback-Leibler divergence `KL(y_true || softmax(y_pred))`, NaN-free.

    Per example, `loss = sum(y_true * (log(y_true) - log_softmax(y_pred)),
    axis)`, a zero label contributing 0, then the Keras `reduction`. With
    `from_logits=False`, `y_pred` holds probabilities (renormalised over
    `axis`).

    The counterpart of `keras.losses.KLDivergence`, which takes
    probabilities: `keras.losses.KLDivergence()` is
    `StableKLDivergence(from_logits=False)` (the default here is
    `from_logits=True`, the exact path). Keras clips both sides to
    `[1e-7, 1]`; here nothing is clipped, so a zero label contributes
    exactly 0 rather than `1e-7 log(1e-7 / p)`.

    This is the thin class over `keras_stable.ops.kl_divergence`.

    Args:
        from_logits: whether `y_pred` holds logits (default) or
            probabilities.
        axis: int, the class axis.
        reduction: a Keras reduction: `"sum_over_batch_size"` (default),
            `"sum"`, `"mean"`, `"mean_with_sample_weight"` or `"none"`.
        name: optional name of the loss.
        dtype: dtype of the result, float32 by default (also under a
            `mixed_float16` / `mixed_bfloat16` policy).

    Call arguments:
        y_true: the target distribution, the shape of `y_pred`.
        y_pred: logits (or probabilities), any float dtype.
        sample_weight: optional weights broadcast onto the per-example
            losses from their leading axes, e.g. `(batch,)`.

    Numerical stability:
        Computed in float32 from the log-softmax: the logits `[0, 30, -30]`
        against the target `[1, 0, 0]` give 30.0, where
        `keras.losses.KLDivergence` on the softmax output gives
        `log(1 / 1e-7) = 16.1` (on a float32 softmax; the value Keras's clip
        allows) with a zero gradient. A zero label contributes exactly 0
        with a zero gradient (no `0 * log(0)`), also on a class with logit
        `-inf`; a nonzero label there gives `+inf`, the true divergence.
        From probabilities no epsilon clip: exact down to the smallest
        normal probability, saturated below it, and the logits of a softmax
        output are used where the backend exposes them (TensorFlow, torch).
        A negative label gives NaN.

    Examples:
        >>> import numpy as np
        >>> import keras_stable
        >>> loss = keras_stable.losses.StableKLDivergence()
        >>> y_true = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]], "float32")
        >>> y_pred = np.array([[0.0, 30.0, -30.0], [0.0, 0.0, -np.inf]], "float32")
        >>> print(float(loss(y_true, y_pred)))
        15.0
    """

    args = (FROM_LOGITS, AXIS)

    def losses_and_valid(self, y_true, y_pred):
        y_true, y_pred = self.dense_inputs(y_true, y_pred)
        values = stable_ops.kl_divergence(
            y_true, y_pred, axis=self.axis, from_logits=self.from_logits
        )
        return values, None
