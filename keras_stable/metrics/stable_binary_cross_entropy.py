"""Mean binary (sigmoid) cross-entropy, as a metric."""

from keras_stable.common.serialization import register
from keras_stable.losses.stable_sigmoid_cross_entropy import StableSigmoidCrossEntropy
from keras_stable.metrics._base import LossMeanMetric


@register
class StableBinaryCrossEntropy(LossMeanMetric):
    """The mean binary cross-entropy over all batches seen, NaN-free.

    `result = sum_i w_i BCE_i / sum_i w_i`, where `BCE_i` is the per-example
    loss of `keras_stable.losses.StableSigmoidCrossEntropy` (the elementwise
    cross-entropy averaged over `axis`) and `w_i` the sample weight (1 by
    default), entries masked by the Keras mask of `y_pred` excluded. NaN in
    `y_true` marks a missing label, as in the loss: it is left out of its
    example's mean, and an example without any label is left out of the
    metric. The counterpart of `keras.metrics.BinaryCrossentropy`, with
    `from_logits=True` by default.

    Args:
        from_logits: whether `y_pred` holds logits (default) or
            probabilities.
        label_smoothing: float in [0, 1): labels become
            `y (1 - s) + s / 2`.
        axis: int, the axis the elementwise losses are averaged over.
        name: optional name of the metric.
        dtype: dtype of the state and result, float32 by default.

    Numerical stability:
        As `StableSigmoidCrossEntropy`: from logits,
        `max(x, 0) - x y + log1p(exp(-|x|))` in float32 (a logit of 1e4
        gives 1e4, not `inf`); from probabilities no epsilon clip. An
        example with weight 0 contributes exactly 0, even when its loss is
        `inf`. A missing (NaN) label never reaches the arithmetic (double
        where); Keras's metric is NaN from the first such batch on. Before
        any update the result is 0.

    Examples:
        >>> import numpy as np
        >>> import keras_stable
        >>> m = keras_stable.metrics.StableBinaryCrossEntropy()
        >>> m.update_state(np.array([[0.0, 1.0]], "float32"), np.array([[100.0, 1e4]], "float32"))
        >>> print(float(m.result()))
        50.0
    """

    loss_class = StableSigmoidCrossEntropy
    loss_args = ("from_logits", "label_smoothing", "axis")
