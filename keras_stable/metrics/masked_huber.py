"""Huber loss over the observed labels, as a metric."""

from keras_stable import losses
from keras_stable.common.serialization import register
from keras_stable.metrics._base import LossMeanMetric


@register(name="MaskedHuberMetric")
class MaskedHuber(LossMeanMetric):
    """The mean Huber loss over all batches seen, NaN labels skipped.

    `result = sum_i w_i H_i / sum_i w_i`, where `H_i` is the per-example
    loss of `keras_stable.losses.MaskedHuber(delta)` (the mean over the
    observed entries of the last axis of `0.5 * e**2` where
    `|e| <= delta`, `delta * |e| - 0.5 * delta**2` elsewhere) and `w_i` the
    sample weight (1 by default). NaN in `y_true` marks a missing label,
    exactly as in the loss: it is left out of its example's mean, and an
    example without any label is left out of the metric; entries masked by
    the Keras mask of `y_pred` are excluded too. The result after several
    batches is the result over their concatenation.

    Args:
        delta: a finite float > 0, where the loss turns from quadratic to
            linear (`ValueError` otherwise).
        name: optional name of the metric (registered as
            `keras_stable>MaskedHuberMetric`, distinct from the loss).
        dtype: dtype of the state and result, float32 by default.

    Numerical stability:
        As the loss: a NaN label never reaches the arithmetic (double
        where), and an example with weight 0 contributes exactly 0.
        Computed in float32. Before any update, or with no label seen, the
        result is 0.

    Examples:
        >>> import numpy as np
        >>> import keras_stable
        >>> m = keras_stable.metrics.MaskedHuber(delta=1.0)
        >>> m.update_state(np.array([[0.5, np.nan]], "float32"), np.zeros((1, 2), "float32"))
        >>> m.update_state(np.array([[np.nan, np.nan], [3.0, 0.0]], "float32"), np.zeros((2, 2), "float32"))
        >>> print(float(m.result()))  # (0.125 + 1.25) / 2 examples with a label
        0.6875
    """

    loss_class = losses.MaskedHuber
    loss_args = ("delta",)
