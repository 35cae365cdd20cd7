"""Categorical cross-entropy for one-hot or soft labels, in logit space."""

from keras_stable import ops as stable_ops
from keras_stable.common.serialization import register
from keras_stable.losses._base import AXIS
from keras_stable.losses._base import FROM_LOGITS
from keras_stable.losses._base import LABEL_SMOOTHING
from keras_stable.losses._base import LogitsLoss


@register
class StableSoftmaxCrossEntropy(LogitsLoss):
    """Softmax cross-entropy for one-hot or soft labels, NaN-free.

    Per example, `loss = -sum(y_true * log_softmax(y_pred), axis)`, then the
    Keras `reduction` (a mean over the examples by default). With
    `label_smoothing = s`, labels become `y_true * (1 - s) + s / n`, `n`
    counting only the classes whose logit is finite (smoothing mass never goes
    to a class that cannot occur). With `from_logits=False`, `y_pred` holds
    probabilities and the loss is computed from `log(y_pred)` (renormalised
    over the class axis, as Keras does).

    This is the thin class over `keras_stable.ops.softmax_cross_entropy`.

    Args:
        from_logits: whether `y_pred` holds logits (default) or
            probabilities.
        label_smoothing: float in [0, 1).
        axis: int, the class axis.
        reduction: a Keras reduction: `"sum_over_batch_size"` (default),
            `"sum"`, `"mean"`, `"mean_with_sample_weight"` or `"none"`.
        name: optional name of the loss.
        dtype: dtype of the result, float32 by default (also under a
            `mixed_float16` / `mixed_bfloat16` policy).

    Call arguments:
        y_true: class probabilities, the shape of `y_pred` (integer one-hot
            labels are accepted).
        y_pred: logits (or probabilities), any float dtype.
        sample_weight: optional weights broadcast onto the per-example
            losses from their leading axes, e.g. `(batch,)`.

    Numerical stability:
        Computed in float32 from `log_softmax` (the largest logit is
        subtracted first), so float16 logits above 11 or float32 logits
        above 88 do not overflow, and no probability is clipped. A class with
        logit `-inf` (or probability 0) and label 0 contributes exactly 0 and
        gets a zero gradient, where `keras.losses.CategoricalCrossentropy`
        gives NaN. A nonzero label on a `-inf` logit gives `+inf` - the
        honest value. Probabilities are exact down to the smallest normal
        float32 (1.18e-38) and saturate below it: a nonzero label on `p = 0`
        gives 87.34 per unit of label rather than Keras's
        `-log(1e-7) = 16.12`, with a zero gradient with respect to that
        probability and the true, finite gradient for the other classes.
        The logits of a float32 softmax output are used where the backend
        exposes them (TensorFlow, torch), so its saturated tail is exact.
        An example whose weight is 0 contributes exactly 0 even when its
        loss is `inf`.

    Examples:
        >>> import numpy as np
        >>> import keras_stable
        >>> loss = keras_stable.losses.StableSoftmaxCrossEntropy()
        >>> y_true = np.array([[1.0, 0.0, 0.0]], "float32")
        >>> y_pred = np.array([[2.0, -np.inf, 0.0]], "float32")
        >>> print(f"{float(loss(y_true, y_pred)):.6f}")
        0.126928
    """

    args = (FROM_LOGITS, LABEL_SMOOTHING, AXIS)
    shape_hint = (
        " Labels are one-hot or soft; for integer class indices use "
        "`StableSparseSoftmaxCrossEntropy`."
    )

    def losses_and_valid(self, y_true, y_pred):
        y_true, y_pred = self.dense_inputs(y_true, y_pred)
        values = stable_ops.softmax_cross_entropy(
            y_true,
            y_pred,
            axis=self.axis,
            label_smoothing=self.label_smoothing,
            from_logits=self.from_logits,
        )
        return values, None
