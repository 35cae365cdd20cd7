"""Mean softmax cross-entropy of one-hot or soft labels, as a metric."""

from keras_stable.common.serialization import register
from keras_stable.losses.stable_softmax_cross_entropy import StableSoftmaxCrossEntropy
from keras_stable.metrics._base import LossMeanMetric


@register
class StableCrossEntropy(LossMeanMetric):
    """The mean softmax cross-entropy over all batches seen, NaN-free.

    `result = sum_i w_i CE_i / sum_i w_i`, where
    `CE_i = -sum(y_true_i * log_softmax(y_pred_i), axis)` is the per-example
    loss of `keras_stable.losses.StableSoftmaxCrossEntropy` and `w_i` the
    sample weight (1 by default). The state is that weighted sum and the sum
    of weights, so the result over several batches equals the result over
    their concatenation, and replicas aggregate by summing.

    Args:
        from_logits: whether `y_pred` holds logits (default) or
            probabilities.
        label_smoothing: float in [0, 1), as in the loss.
        axis: int, the class axis.
        name: optional name of the metric.
        dtype: dtype of the state and result, float32 by default.

    Numerical stability:
        As `StableSoftmaxCrossEntropy`: computed in float32 from
        `log_softmax`; a `-inf` logit on a class with label 0 contributes
        0, a nonzero label there gives `+inf` (no epsilon clip; a
        probability of 0 saturates at 87.34 per unit of label). An example
        with weight 0 contributes exactly 0, even when its loss is `inf`.
        Before any update the result is 0.

    Examples:
        >>> import numpy as np
        >>> import keras_stable
        >>> m = keras_stable.metrics.StableCrossEntropy()
        >>> m.update_state(np.array([[1.0, 0.0]], "float32"), np.array([[0.0, -np.inf]], "float32"))
        >>> m.update_state(np.array([[0.0, 1.0]], "float32"), np.array([[0.0, 0.0]], "float32"))
        >>> print(f"{float(m.result()):.6f}")  # (0 + log 2) / 2
        0.346574
    """

    loss_class = StableSoftmaxCrossEntropy
    loss_args = ("from_logits", "label_smoothing", "axis")
