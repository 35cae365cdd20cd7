"""The one reading of `from_logits=False` shared by every cross-entropy.

`softmax_scores` and `sigmoid_log_probabilities`: the logits behind a
softmax/sigmoid output where the backend exposes them (and the activation
reproduces the output), else the probabilities read in log space, exact
down to the smallest normal number (`logarithms.saturated_log`).

Internal shared API of `keras_stable.ops` (not in `ops.__all__`): the
cross-entropy, focal and divergence ops read their probabilities here.
"""

from keras import ops

from keras_stable.common.checks import check_axis
from keras_stable.common.checks import exposed_logits
from keras_stable.common.dtypes import dtype_of
from keras_stable.common.dtypes import static_shape
from keras_stable.common.dtypes import to_compute
from keras_stable.ops.logarithms import saturated_log

# How far an activation output may lie from the activation recomputed from
# its exposed logits (rtol, atol): a few hundred units in the last place,
# and the smallest normal number (denormals may be flushed to 0).
_RECOVERY_TOLERANCE = {
    "float32": (1e-4, 1.2e-38),
    "float64": (1e-8, 2.3e-308),
}


def _saturated_log1m(p):
    """`log(1 - p)`: `log1p(-p)` up to 1/2 (exact for tiny `p`), then
    `saturated_log(1 - p)` (`1 - p` is exact for `p >= 1/2`)."""
    small = ops.less_equal(p, 0.5)
    via_log1p = ops.log1p(-ops.where(small, p, ops.zeros_like(p)))
    return ops.where(small, via_log1p, saturated_log(1.0 - p))


def _log_sigmoids(x):
    """`(log(sigmoid(x)), log(sigmoid(-x)))`, finite for every finite `x`.

    `-softplus(-x)` and `-softplus(x)` with `softplus(x) = max(x, 0) +
    log1p(exp(-|x|))`; one shared select, so the gradient at `x == 0` is
    exact (0.5 and -0.5).
    """
    nonnegative = ops.greater_equal(x, 0)
    zeros = ops.zeros_like(x)
    tail = ops.log1p(ops.exp(ops.where(nonnegative, -x, x)))
    log_p = -(ops.where(nonnegative, zeros, -x) + tail)
    log_q = -(ops.where(nonnegative, x, zeros) + tail)
    return log_p, log_q


def _recovered_logits(y_pred, probs, activation, axis=None):
    """`(logits, consistent)` behind a softmax/sigmoid output, or `(None,
    None)`.

    Only float32/float64 outputs are recovered: a half-precision output is
    read as the probabilities it holds (exactly, in float32), the same
    number on every backend. `consistent` marks where the activation of the
    logits reproduces `probs` (whole rows along `axis` for a softmax): a
    softmax output fed to a sigmoid loss, or a softmax over another axis,
    falls back to the probabilities instead of using the wrong logits.
    """
    logits = exposed_logits(y_pred)
    if logits is None or dtype_of(y_pred) not in _RECOVERY_TOLERANCE:
        return None, None
    rtol, atol = _RECOVERY_TOLERANCE[dtype_of(y_pred)]
    logits = ops.cast(ops.convert_to_tensor(logits), dtype_of(probs))
    # The activation as Keras computes it (the check carries no gradient).
    if activation == "sigmoid":
        expected = ops.sigmoid(logits)
    elif static_shape(logits)[axis] == 1:
        expected = ops.ones_like(logits)  # keras.ops.softmax warns there
    else:
        expected = ops.softmax(logits, axis=axis)
    expected = ops.stop_gradient(expected)
    consistent = ops.less_equal(ops.abs(probs - expected), rtol * expected + atol)
    if activation == "softmax":
        consistent = ops.all(consistent, axis=axis, keepdims=True)
    else:
        # An infinite logit would give 0 * inf in the cross-entropy.
        consistent = ops.logical_and(consistent, ops.isfinite(logits))
    return logits, consistent


def softmax_scores(y_pred, from_logits, axis=-1):
    """`(scores, out_dtype)`: `y_pred` in logit space, in its compute dtype.

    The one reading of `from_logits` by the softmax cross-entropies. With
    `from_logits=True` the scores are the logits. With probabilities,
    `log_softmax(scores, axis)` is `log(p / sum(p))`: the scores are the
    logits behind a softmax output where the backend exposes them (as
    Keras reads them on TensorFlow) and `softmax(logits)` reproduces
    `y_pred` row by row - the loss is then exact however saturated the
    softmax - else `saturated_log(y_pred)`: exact down to the smallest
    normal probability, saturated (with a zero gradient) below it.
    Half-precision probabilities are read as they are, exactly in float32.
    """
    x, out_dtype = to_compute(y_pred)
    if from_logits:
        return x, out_dtype
    axis = check_axis(axis, len(static_shape(x)))
    scores = saturated_log(x)
    logits, consistent = _recovered_logits(y_pred, x, "softmax", axis)
    if logits is not None:
        scores = ops.where(consistent, logits, scores)
    return scores, out_dtype


def sigmoid_log_probabilities(y_pred, from_logits):
    """`(log_p, log_q, out_dtype)`: `log(p)` and `log(1 - p)` elementwise.

    The one reading of `from_logits` by the sigmoid cross-entropies. From
    logits, `log(sigmoid(x))` and `log(sigmoid(-x))` (finite for every
    finite logit). From probabilities, the recovered logits where a sigmoid
    output exposes them and reproduces `y_pred` (see `softmax_scores`), else
    `saturated_log(p)` and `log(1 - p)` read the same way (`log1p(-p)` for
    `p <= 1/2`).
    """
    x, out_dtype = to_compute(y_pred)
    if from_logits:
        log_p, log_q = _log_sigmoids(x)
        return log_p, log_q, out_dtype
    log_p, log_q = saturated_log(x), _saturated_log1m(x)
    logits, consistent = _recovered_logits(y_pred, x, "sigmoid")
    if logits is not None:
        from_logits_p, from_logits_q = _log_sigmoids(logits)
        log_p = ops.where(consistent, from_logits_p, log_p)
        log_q = ops.where(consistent, from_logits_q, log_q)
    return log_p, log_q, out_dtype
