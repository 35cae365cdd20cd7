"""The Kullback-Leibler divergence to a softmax, in logit space."""

from keras import ops

from keras_stable.common.checks import warn_if_probabilities
from keras_stable.common.dtypes import inf_where
from keras_stable.common.dtypes import nan_where
from keras_stable.ops.logarithms import safe_log
from keras_stable.ops.probabilities import softmax_scores
from keras_stable.ops.probabilities import softmax_with_labels
from keras_stable.ops.softmax import shifted_logits


def kl_divergence(labels, logits, axis=-1, mask=None, from_logits=True):
    """Per-example `KL(labels || softmax(logits))` over `axis`.

    `sum(labels * (log(labels) - log_softmax(logits)), axis)`, a zero label
    contributing 0 (`0 log 0 = 0`).

    Args:
        labels: the target distribution (probabilities), same shape as
            `logits`.
        logits: unnormalised log-probabilities of the model's distribution.
        axis: int, the class axis.
        mask: optional boolean tensor broadcastable to `logits`; `False`
            classes are removed from the softmax.
        from_logits: whether `logits` holds logits (default) or
            probabilities, renormalised over `axis` and read as in
            `softmax_cross_entropy` (no epsilon clip; `keras.losses.KLDivergence`
            takes probabilities and clips both sides to `[1e-7, 1]`).

    Returns:
        The divergence per example (`axis` reduced), in the float dtype of
        `logits`.

    Numerical stability:
        The model's log-probabilities are the log-softmax (shifted by the
        largest valid logit), never the `log` of a rounded probability: the
        logits `[0, 30, -30]` against the target `[1, 0, 0]` give 30.0, where
        clipping the softmax output at `1e-7` gives 16.1. A zero label
        contributes exactly 0 with a zero gradient (a double where keeps
        `log(0)` and its infinite derivative out), also on a masked or
        `-inf` class; a nonzero label there gives `+inf`, the true
        divergence. An example with no class left gives 0. A negative or NaN
        label gives NaN. Half precision is computed in float32.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> labels = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]], "float32")
        >>> logits = np.array([[0.0, 30.0, -30.0], [0.0, 0.0, -np.inf]], "float32")
        >>> np.round(np.asarray(ops.kl_divergence(labels, logits)), 6)
        array([30.,  0.], dtype=float32)
    """
    warn_if_probabilities(logits, from_logits, "kl_divergence")
    logits, out_dtype = softmax_scores(logits, from_logits, axis)
    labels, logits, axis, mask = softmax_with_labels(labels, logits, axis, mask)

    valid, z, total, _ = shifted_logits(logits, axis, mask)
    nonempty, log_total = ops.not_equal(total, 0), safe_log(total)
    zeros = ops.zeros_like(logits)
    log_q = ops.where(valid, z - log_total, zeros)
    positive = ops.greater(labels, 0)
    log_labels = ops.log(ops.where(positive, labels, ops.ones_like(labels)))
    terms = ops.where(positive, labels * (log_labels - log_q), zeros)
    # A nonzero label on a class the model cannot produce: +inf.
    terms = ops.where(
        valid, terms, inf_where(ops.logical_and(positive, ops.logical_not(valid)), zeros)
    )
    invalid = ops.logical_not(ops.greater_equal(labels, 0))  # negative or NaN: NaN
    terms = ops.where(invalid, nan_where(invalid, zeros), terms)
    loss = ops.sum(terms, axis=axis)
    loss = ops.where(ops.squeeze(nonempty, axis=axis), loss, ops.zeros_like(loss))
    return ops.cast(loss, out_dtype)
