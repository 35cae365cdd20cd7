"""Binary (sigmoid) cross-entropy, finite for every finite logit."""

from keras import ops

from keras_stable import ops as stable_ops
from keras_stable._serialization import register
from keras_stable.common.checks import check_axis
from keras_stable.common.checks import check_bool
from keras_stable.common.checks import check_label_smoothing
from keras_stable.common.dtypes import static_shape
from keras_stable.common.dtypes import to_float32
from keras_stable.losses._base import StableLoss
from keras_stable.ops.cross_entropy import warn_if_probabilities


def _same_rank(y_true, y_pred):
    """Expands a trailing size-1 axis that only one side has (Keras does)."""
    t, p = static_shape(y_true), static_shape(y_pred)
    if len(p) == len(t) + 1 and p[-1] == 1:
        y_true = ops.expand_dims(y_true, -1)
    elif len(t) == len(p) + 1 and t[-1] == 1:
        y_pred = ops.expand_dims(y_pred, -1)
    if static_shape(y_true) != static_shape(y_pred):
        raise ValueError(
            "`y_true` and `y_pred` must have the same shape, got "
            f"y_true.shape={t} and y_pred.shape={p}."
        )
    return y_true, y_pred


@register
class StableSigmoidCrossEntropy(StableLoss):
    """Binary cross-entropy from logits (or probabilities), NaN-free.

    Elementwise `-y log(sigmoid(x)) - (1 - y) log(1 - sigmoid(x))`, averaged
    over `axis` (the last by default) for inputs of rank 2 or more (as
    `keras.losses.BinaryCrossentropy`; a rank-1 input holds one label per
    example), then the Keras `reduction`. With `label_smoothing = s`, labels
    become `y (1 - s) + s / 2`. With `from_logits=False`, `y_pred` holds
    probabilities and the loss is computed from `log(p)` and `log(1 - p)`.

    This is the thin class over `keras_stable.ops.sigmoid_cross_entropy`.

    Args:
        from_logits: whether `y_pred` holds logits (default) or
            probabilities.
        label_smoothing: float in [0, 1).
        axis: int, the axis the elementwise losses are averaged over
            (inputs of rank 2 or more).
        reduction: a Keras reduction: `"sum_over_batch_size"` (default),
            `"sum"`, `"mean"`, `"mean_with_sample_weight"` or `"none"`.
        name: optional name of the loss.
        dtype: dtype of the result, float32 by default.

    Call arguments:
        y_true: targets in [0, 1].
        y_pred: logits (or probabilities), same shape.
        sample_weight: optional weights, e.g. of shape `(batch,)`.

    Numerical stability:
        From logits, `max(x, 0) - x y + log1p(exp(-|x|))` in float32: a logit
        of 1e4 gives 1e4 (the naive form gives `inf` and NaN gradients) and
        the gradient is `sigmoid(x) - y`. From probabilities, no epsilon
        clip: exact down to the smallest normal float32 (1.18e-38), so
        `p = 0` with `y = 0` contributes exactly 0 (gradient `1 / (1 - p)`),
        and `p = 0` with `y = 1` saturates at 87.34 with a zero gradient -
        where Keras reports `-log(1e-7) = 16.12`; the logits of a float32
        sigmoid output are used where the backend exposes them (TensorFlow,
        torch). An infinite logit gives `inf` or NaN, as in the functional
        twin.

    Example:

    >>> import numpy as np
    >>> import keras_stable
    >>> loss = keras_stable.losses.StableSigmoidCrossEntropy()
    >>> y_true = np.array([[0.0, 1.0]], "float32")
    >>> y_pred = np.array([[100.0, 1e4]], "float32")
    >>> print(float(loss(y_true, y_pred)))
    50.0
    """

    def __init__(
        self,
        from_logits=True,
        label_smoothing=0.0,
        axis=-1,
        reduction="sum_over_batch_size",
        name="stable_sigmoid_cross_entropy",
        dtype=None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.from_logits = check_bool(from_logits, "from_logits")
        self.label_smoothing = check_label_smoothing(label_smoothing)
        self.axis = check_axis(axis)

    def losses_and_valid(self, y_true, y_pred):
        warn_if_probabilities(y_pred, self.from_logits, type(self).__name__)
        y_true = ops.cast(ops.convert_to_tensor(y_true), "float32")
        y_true, y_pred = _same_rank(y_true, to_float32(y_pred))
        if self.label_smoothing:
            s = self.label_smoothing
            y_true = y_true * (1.0 - s) + 0.5 * s
        values = stable_ops.sigmoid_cross_entropy(y_true, y_pred, from_logits=self.from_logits)
        rank = len(static_shape(values))
        if rank >= 2:
            values = ops.mean(values, axis=check_axis(self.axis, rank))
        return values, None

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "from_logits": self.from_logits,
                "label_smoothing": self.label_smoothing,
                "axis": self.axis,
            }
        )
        return config
