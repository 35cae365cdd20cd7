"""Mean softmax cross-entropy of integer labels, as a metric."""

from keras_stable.common.serialization import register
from keras_stable.losses.stable_sparse_softmax_cross_entropy import StableSparseSoftmaxCrossEntropy
from keras_stable.metrics._base import LossMeanMetric


@register
class StableSparseCrossEntropy(LossMeanMetric):
    """The mean sparse softmax cross-entropy over all batches seen, NaN-free.

    `result = sum_i w_i CE_i / sum_i w_i` over the examples whose label is
    not `ignore_class`, where `CE_i = logsumexp(y_pred_i) - y_pred_i[y_true_i]`
    is the per-example loss of
    `keras_stable.losses.StableSparseSoftmaxCrossEntropy` and `w_i` the sample
    weight (1 by default). Ignored examples count neither in the sum nor in
    the weights, so the result over several batches equals the result over
    their concatenation, and batches with only ignored labels change nothing.

    Args:
        from_logits: whether `y_pred` holds logits (default) or
            probabilities.
        ignore_class: optional int label to ignore.
        axis: int, the class axis of `y_pred`.
        name: optional name of the metric.
        dtype: dtype of the state and result, float32 by default.

    Numerical stability:
        As `StableSparseSoftmaxCrossEntropy`: integer labels are never cast
        to a float dtype, float labels are read exactly where integral (NaN
        otherwise), the loss is a shifted `logsumexp` in float32, a label on
        a `-inf` logit gives `+inf`, an out-of-range label NaN. Before any
        update, or when every label so far was ignored, the result is 0.

    Examples:
        >>> import numpy as np
        >>> import keras_stable
        >>> m = keras_stable.metrics.StableSparseCrossEntropy(ignore_class=-1)
        >>> logits = np.array([[0.0, 0.0], [5.0, 1.0]], "float32")
        >>> m.update_state(np.array([1, -1]), logits)
        >>> m.update_state(np.array([-1, -1]), logits)
        >>> print(f"{float(m.result()):.6f}")  # log 2, over the one counted label
        0.693147
    """

    loss_class = StableSparseSoftmaxCrossEntropy
    loss_args = ("from_logits", "ignore_class", "axis")
