"""Mean squared error over the observed labels (NaN marks a missing one)."""

from keras_stable import ops as stable_ops
from keras_stable.common.serialization import register
from keras_stable.losses._base import StableLoss
from keras_stable.losses._elementwise import mean_over_observed


@register
class MaskedMeanSquaredError(StableLoss):
    """Mean squared error where NaN in `y_true` marks a missing label.

    Per example, `mean((y_true - y_pred)**2)` over the observed entries of
    the last axis, then the Keras `reduction`. A missing label counts for
    nothing, exactly: not in the value, not in the mean's denominator, not
    in the gradient. An example with no observed label is left out of the
    reduction (it is not averaged in as a 0). Without NaN labels this is
    `keras.losses.MeanSquaredError`, with the same reductions,
    `sample_weight` and Keras mask.

    This is the thin class over `keras_stable.ops.masked_squared_error`.

    Args:
        reduction: a Keras reduction: `"sum_over_batch_size"` (default),
            `"sum"`, `"mean"`, `"mean_with_sample_weight"` or `"none"`.
        name: optional name of the loss.
        dtype: dtype of the result, float32 by default (also under a
            `mixed_float16` / `mixed_bfloat16` policy).

    Call arguments:
        y_true: targets, NaN where missing. A rank-1 `y_true` holds one
            label per example (`(batch,)` labels against `(batch, 1)`
            predictions are accepted, as in Keras).
        y_pred: predictions, the shape of `y_true`.
        sample_weight: optional weights broadcast onto the per-example
            losses from their leading axes, e.g. `(batch,)`.

    Numerical stability:
        The NaN label is replaced by the double-where pattern before the
        subtraction, so its gradient is exactly 0; Keras's
        `MeanSquaredError` returns NaN for such a batch even when the
        entry's `sample_weight` is 0 (`0 * NaN = NaN`). An example whose
        labels are all missing gives 0 with a zero gradient (no `0 / 0`); a
        batch with no observed label gives 0. Computed in float32, also
        for float16 predictions.

    Examples:
        >>> import numpy as np
        >>> import keras_stable
        >>> loss = keras_stable.losses.MaskedMeanSquaredError()
        >>> y_true = np.array([[1.0, np.nan], [np.nan, np.nan], [2.0, 4.0]], "float32")
        >>> y_pred = np.zeros((3, 2), "float32")
        >>> print(float(loss(y_true, y_pred)))  # (1 + 10) / 2 examples with a label
        5.5
    """

    def losses_and_valid(self, y_true, y_pred):
        return mean_over_observed(stable_ops.masked_squared_error, y_true, y_pred)
