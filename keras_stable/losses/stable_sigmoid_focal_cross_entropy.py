"""Binary focal cross-entropy in log space, for every gamma >= 0."""

import functools

from keras_stable import ops as stable_ops
from keras_stable.common.serialization import register
from keras_stable.losses._base import ALPHA
from keras_stable.losses._base import AXIS
from keras_stable.losses._base import FROM_LOGITS
from keras_stable.losses._base import GAMMA
from keras_stable.losses._base import LABEL_SMOOTHING
from keras_stable.losses._base import LogitsLoss
from keras_stable.losses.stable_sigmoid_cross_entropy import _binary_losses_and_valid


@register
class StableSigmoidFocalCrossEntropy(LogitsLoss):
    """Binary focal cross-entropy (Lin et al., 2017), exact and NaN-free.

    Elementwise `alpha_t (1 - p_t)**gamma CE`, with `p = sigmoid(y_pred)`,
    `CE = -y log(p) - (1 - y) log(1 - p)`, `p_t = y p + (1 - y)(1 - p)` and
    `alpha_t = y alpha + (1 - y)(1 - alpha)` (1 when `alpha` is None),
    averaged over `axis` (the last by default) for inputs of rank 2 or more,
    then the Keras `reduction`. With `label_smoothing = s`, labels become
    `y (1 - s) + s / 2` (before `p_t` and `alpha_t`, as in Keras).

    NaN in `y_true` marks a missing label, exactly as in
    `StableSigmoidCrossEntropy`: it counts for nothing in the value, in the
    mean over `axis` and in the gradient, and an example whose labels are
    all missing is left out of the reduction. Without NaN labels the value
    is unchanged.

    The counterpart of `keras.losses.BinaryFocalCrossentropy`, with the same
    number wherever Keras's is right: Keras's
    `apply_class_balancing=False` (its default, which ignores `alpha`) is
    `alpha=None` here, and `apply_class_balancing=True, alpha=a` is
    `alpha=a`. keras_stable defaults to `from_logits=True` (Keras: False).

    This is the thin class over `keras_stable.ops.sigmoid_focal_cross_entropy`.

    Args:
        from_logits: whether `y_pred` holds logits (default) or
            probabilities.
        gamma: focusing parameter, a float >= 0, or None (TF Addons: no
            modulating factor, as 0; 0 gives the binary
            cross-entropy).
        alpha: None (no class balancing, the default) or a float in [0, 1],
            the weight of the positive class.
        label_smoothing: float in [0, 1).
        axis: int, the axis the elementwise losses are averaged over
            (inputs of rank 2 or more).
        reduction: a Keras reduction: `"sum_over_batch_size"` (default),
            `"sum"`, `"mean"`, `"mean_with_sample_weight"` or `"none"`.
        name: optional name of the loss.
        dtype: dtype of the result, float32 by default (also under a
            `mixed_float16` / `mixed_bfloat16` policy).

    Call arguments:
        y_true: targets in [0, 1], NaN where missing.
        y_pred: logits (or probabilities), same shape.
        sample_weight: optional weights, e.g. of shape `(batch,)`.

    Numerical stability:
        `(1 - p_t)**gamma` is `exp(gamma * log(1 - p_t))` with `log(p)` and
        `log(1 - p)` from log-sigmoids, computed in float32: a hard example
        (logit -30, label 1) gives 30.0, and an easy one (logit +40 or +100,
        label 1) a finite value and gradient for every `gamma >= 0`, where
        `keras.losses.BinaryFocalCrossentropy(gamma=0.5)` has a NaN gradient
        (`d/dp (1 - p)**0.5` is infinite once `1 - p` rounds to 0). From
        probabilities no epsilon clip: exact down to the smallest normal
        probability, saturated below it (`p = 0` with label 1 gives 87.34
        per element, with a zero gradient), and the logits of a sigmoid
        output are used where the backend exposes them (TensorFlow, torch),
        as Keras does on TensorFlow. A NaN label is replaced (double where)
        before the loss is computed: its entry is exactly 0 with a zero
        gradient, where Keras's loss is NaN even under a `sample_weight`
        of 0 (on torch it raises).

    Examples:
        >>> import numpy as np
        >>> import keras_stable
        >>> loss = keras_stable.losses.StableSigmoidFocalCrossEntropy(gamma=2.0)
        >>> y_true = np.array([[1.0, 1.0], [0.0, 1.0]], "float32")
        >>> y_pred = np.array([[-30.0, 100.0], [0.0, 2.0]], "float32")
        >>> print(f"{float(loss(y_true, y_pred)):.4f}")
        7.5438
    """

    activation = "sigmoid"
    args = (FROM_LOGITS, GAMMA, ALPHA, LABEL_SMOOTHING, AXIS)

    def losses_and_valid(self, y_true, y_pred):
        elementwise = functools.partial(
            stable_ops.sigmoid_focal_cross_entropy,
            gamma=self.gamma,
            alpha=self.alpha,
            from_logits=self.from_logits,
        )
        return _binary_losses_and_valid(self, elementwise, y_true, y_pred)
