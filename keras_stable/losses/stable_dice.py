"""Dice loss of segmentation masks: an empty mask predicted empty is perfect."""

from keras_stable import ops as stable_ops
from keras_stable.common.checks import check_axis
from keras_stable.common.dtypes import to_float32
from keras_stable.common.serialization import register
from keras_stable.losses._base import StableLoss


@register
class StableDice(StableLoss):
    """`1 - 2 sum(y_true y_pred) / (sum(y_true) + sum(y_pred))` over `axis`.

    The counterpart of `keras.losses.Dice`, with its signature and
    formula (without its `1e-7`); then the Keras `reduction`.

    This is the thin class over `keras_stable.ops.dice_loss`.

    Args:
        reduction: a Keras reduction: `"sum_over_batch_size"` (default),
            `"sum"`, `"mean"`, `"mean_with_sample_weight"` or `"none"`.
        name: optional name of the loss.
        axis: the axes summed over: None (default, every axis: one number
            for the batch, as in Keras), an int or a tuple of ints (`(1, 2,
            3)`: one loss per image of a `(batch, height, width, channels)`
            batch).
        dtype: dtype of the result, float32 by default.

    Call arguments:
        y_true: target masks in `[0, 1]`.
        y_pred: predicted probabilities in `[0, 1]`, the shape of `y_true`.
        sample_weight: optional weights of the per-image losses.

    Numerical stability:
        An empty target predicted empty is a perfect match: loss 0 with a
        zero gradient, where Keras returns 1, the worst score (medical
        images without a lesion). Finite gradients on all of `[0, 1]`;
        half precision is computed in float32.

    Examples:
        >>> import numpy as np
        >>> import keras_stable
        >>> empty = np.zeros((2, 4), "float32")
        >>> float(keras_stable.losses.StableDice(axis=1)(empty, empty))  # Keras: 1.0
        0.0
    """

    def __init__(self, reduction="sum_over_batch_size", name="stable_dice", axis=None, dtype=None):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.axis = check_axis(axis, multiple=True)

    def losses_and_valid(self, y_true, y_pred):
        return stable_ops.dice_loss(to_float32(y_true), to_float32(y_pred), axis=self.axis), None

    def get_config(self):
        config = super().get_config()
        config["axis"] = self.axis
        return config
