"""Tversky loss: alpha weights false positives, beta false negatives."""

from keras_stable import ops as stable_ops
from keras_stable.common.checks import check_axis
from keras_stable.common.checks import check_non_negative
from keras_stable.common.dtypes import to_float32
from keras_stable.common.serialization import register
from keras_stable.losses._base import StableLoss


@register
class StableTversky(StableLoss):
    """`1 - TP / (TP + alpha FP + beta FN)` over `axis` (Salehi et al., 2017).

    The counterpart of `keras.losses.Tversky`, with its signature; soft
    counts `TP = sum(y_true y_pred)`, `FP = sum((1 - y_true) y_pred)`,
    `FN = sum(y_true (1 - y_pred))`; then the Keras `reduction`.
    `alpha = beta = 0.5` is the Dice loss; `beta > alpha` favours recall.

    This is the thin class over `keras_stable.ops.tversky_loss`.

    Args:
        alpha: weight of the false positives (default 0.5), >= 0.
        beta: weight of the false negatives (default 0.5), >= 0.
        reduction: a Keras reduction: `"sum_over_batch_size"` (default),
            `"sum"`, `"mean"`, `"mean_with_sample_weight"` or `"none"`.
        name: optional name of the loss.
        axis: the axes summed over (None: every axis), as in `StableDice`.
        dtype: dtype of the result, float32 by default.

    Call arguments:
        y_true: target masks in `[0, 1]`.
        y_pred: predicted probabilities in `[0, 1]`, the shape of `y_true`.
        sample_weight: optional weights of the per-image losses.

    Numerical stability:
        An empty target predicted empty is loss 0 with a zero gradient
        (Keras: 1); finite gradients on all of `[0, 1]`; half precision is
        computed in float32. Keras 3.15.1's `Tversky` swaps the weights (its
        `alpha` multiplies the false negatives): `StableTversky(alpha=a,
        beta=b)` is its `Tversky(alpha=b, beta=a)`, as its docstring and
        the paper define them.

    Examples:
        >>> import numpy as np
        >>> import keras_stable
        >>> y_true = np.array([[1.0, 1.0, 0.0, 0.0]], "float32")
        >>> y_pred = np.array([[1.0, 0.0, 1.0, 1.0]], "float32")  # TP 1, FP 2, FN 1
        >>> loss = keras_stable.losses.StableTversky(alpha=0.25, beta=1.0, axis=1)
        >>> round(float(loss(y_true, y_pred)), 5)
        0.6
    """

    def __init__(
        self,
        alpha=0.5,
        beta=0.5,
        reduction="sum_over_batch_size",
        name="stable_tversky",
        axis=None,
        dtype=None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.alpha = check_non_negative(alpha, "alpha")
        self.beta = check_non_negative(beta, "beta")
        self.axis = check_axis(axis, multiple=True)

    def losses_and_valid(self, y_true, y_pred):
        values = stable_ops.tversky_loss(
            to_float32(y_true), to_float32(y_pred), alpha=self.alpha, beta=self.beta, axis=self.axis
        )
        return values, None

    def get_config(self):
        config = super().get_config()
        config.update({"alpha": self.alpha, "beta": self.beta, "axis": self.axis})
        return config
