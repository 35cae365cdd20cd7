"""Categorical focal cross-entropy in log space, for every gamma >= 0."""

from keras_stable import ops as stable_ops
from keras_stable.common.serialization import register
from keras_stable.losses._base import AXIS
from keras_stable.losses._base import CLASS_ALPHA
from keras_stable.losses._base import FROM_LOGITS
from keras_stable.losses._base import GAMMA
from keras_stable.losses._base import LABEL_SMOOTHING
from keras_stable.losses._base import LogitsLoss


@register
class StableSoftmaxFocalCrossEntropy(LogitsLoss):
    """Categorical focal cross-entropy (Lin et al., 2017), exact and NaN-free.

    Per example, `loss = -sum(alpha * (1 - p)**gamma * y_true * log(p), axis)`
    with `p = softmax(y_pred)` over `axis` (for one-hot labels,
    `alpha (1 - p_t)**gamma (-log p_t)`), then the Keras `reduction`. With
    `label_smoothing = s`, labels become `y_true (1 - s) + s / n`, `n`
    counting the classes whose logit is finite. With `from_logits=False`,
    `y_pred` holds probabilities (renormalised over `axis`, as Keras does).

    The counterpart of `keras.losses.CategoricalFocalCrossentropy`, with the
    same number wherever Keras's is right, but two defaults differ: Keras
    takes probabilities (`from_logits=False`) and always weights by `alpha`
    (0.25 by default, a float or one weight per class), while here
    `from_logits=True` and `alpha=None` (no weighting).
    `CategoricalFocalCrossentropy()` is
    `StableSoftmaxFocalCrossEntropy(from_logits=False, alpha=0.25)`.

    This is the thin class over `keras_stable.ops.softmax_focal_cross_entropy`.

    Args:
        from_logits: whether `y_pred` holds logits (default) or
            probabilities.
        gamma: focusing parameter, a float >= 0, or None (TF Addons: no
            modulating factor, as 0; 0 gives the categorical
            cross-entropy).
        alpha: None (no weighting, the default), a float in [0, 1], or a
            list of floats in [0, 1] with one weight per class.
        label_smoothing: float in [0, 1).
        axis: int, the class axis.
        reduction: a Keras reduction: `"sum_over_batch_size"` (default),
            `"sum"`, `"mean"`, `"mean_with_sample_weight"` or `"none"`.
        name: optional name of the loss.
        dtype: dtype of the result, float32 by default (also under a
            `mixed_float16` / `mixed_bfloat16` policy).

    Call arguments:
        y_true: class probabilities (one-hot or soft), the shape of
            `y_pred`.
        y_pred: logits (or probabilities), any float dtype.
        sample_weight: optional weights broadcast onto the per-example
            losses from their leading axes, e.g. `(batch,)`.

    Numerical stability:
        Computed in float32 from the log-softmax; `(1 - p)**gamma` is
        `exp(gamma * log(1 - p))` with `log(1 - p)` from `log1p(-p)` or,
        for the class above 1/2, the log-sum-exp of the other classes, so
        nothing is rounded to 0 or 1 first. A hard example (logits
        `[0, 30, -30]`, label 0, `alpha=0.25`) gives 7.5, where
        `keras.losses.CategoricalFocalCrossentropy(from_logits=True)` clips
        the softmax at `1e-7` and gives 4.03 with a zero gradient; an easy
        example has a finite gradient for every `gamma >= 0`. A class with
        logit `-inf` and label 0 contributes exactly 0 (a nonzero label
        there gives `+inf`). From probabilities no epsilon clip: exact down
        to the smallest normal probability, saturated below it (87.34 per
        unit of label), and the logits of a softmax output are used where
        the backend exposes them (TensorFlow, torch).

    Examples:
        >>> import numpy as np
        >>> import keras_stable
        >>> loss = keras_stable.losses.StableSoftmaxFocalCrossEntropy(alpha=0.25)
        >>> y_true = np.array([[1.0, 0.0, 0.0]], "float32")
        >>> y_pred = np.array([[0.0, 30.0, -30.0]], "float32")
        >>> print(float(loss(y_true, y_pred)))
        7.5
    """

    args = (FROM_LOGITS, GAMMA, CLASS_ALPHA, LABEL_SMOOTHING, AXIS)
    shape_hint = " Labels are one-hot or soft."

    def losses_and_valid(self, y_true, y_pred):
        y_true, y_pred = self.dense_inputs(y_true, y_pred)
        values = stable_ops.softmax_focal_cross_entropy(
            y_true,
            y_pred,
            gamma=self.gamma,
            alpha=self.alpha,
            axis=self.axis,
            from_logits=self.from_logits,
            label_smoothing=self.label_smoothing,
        )
        return values, None
