"""Mean absolute error over the observed labels, as a metric."""

from keras_stable import losses
from keras_stable.common.serialization import register
from keras_stable.metrics._base import LossMeanMetric


@register(name="MaskedMeanAbsoluteErrorMetric")
class MaskedMeanAbsoluteError(LossMeanMetric):
    """The mean absolute error over all batches seen, NaN labels skipped.

    `result = sum_i w_i MAE_i / sum_i w_i`, where `MAE_i` is the per-example
    loss of `keras_stable.losses.MaskedMeanAbsoluteError` (the mean of
    `|y_true - y_pred|` over the observed entries of the last axis) and
    `w_i` the sample weight (1 by default). NaN in `y_true` marks a missing
    label, exactly as in the loss: it is left out of its example's mean,
    and an example without any label is left out of the metric; entries
    masked by the Keras mask of `y_pred` are excluded too. The result after
    several batches is the result over their concatenation. Without NaN
    labels this is `keras.metrics.MeanAbsoluteError`.

    Args:
        name: optional name of the metric (registered as
            `keras_stable>MaskedMeanAbsoluteErrorMetric`, distinct from the
            loss).
        dtype: dtype of the state and result, float32 by default.

    Numerical stability:
        As the loss: a NaN label never reaches the arithmetic (double
        where), and an example with weight 0 contributes exactly 0. Keras's
        `MeanAbsoluteError` metric is NaN from the first batch holding a
        NaN label on. Computed in float32. Before any update, or with no
        label seen, the result is 0.

    Examples:
        >>> import numpy as np
        >>> import keras_stable
        >>> m = keras_stable.metrics.MaskedMeanAbsoluteError()
        >>> m.update_state(np.array([[1.0, np.nan]], "float32"), np.zeros((1, 2), "float32"))
        >>> m.update_state(np.array([[np.nan, np.nan], [2.0, -4.0]], "float32"), np.zeros((2, 2), "float32"))
        >>> print(float(m.result()))  # (1 + 3) / 2 examples with a label
        2.0
    """

    loss_class = losses.MaskedMeanAbsoluteError
    loss_args = ()
