"""The one reading of `from_logits=False` shared by every cross-entropy.

`softmax_scores` and `sigmoid_log_probabilities`: the logits behind a
softmax/sigmoid output where the backend exposes them (and the activation
reproduces the output), else the probabilities read in log space, exact
down to the smallest normal number (`logarithms.saturated_log`).

Internal shared API of `keras_stable.ops` (not in `ops.__all__`): the
cross-entropy, focal and divergence ops read their probabilities here.
"""

import warnings

from keras import ops

from keras_stable.common.checks import check_axis
from keras_stable.common.checks import check_same_shape
from keras_stable.common.checks import exposed_logits
from keras_stable.common.checks import graph_activation
from keras_stable.common.checks import prepare_mask
from keras_stable.common.dtypes import HALF
from keras_stable.common.dtypes import compute_dtype_of
from keras_stable.common.dtypes import dtype_of
from keras_stable.common.dtypes import static_shape
from keras_stable.common.dtypes import to_compute
from keras_stable.common.keras_internals import set_keras_logits
from keras_stable.ops.logarithms import saturated_log

# How far an activation output may lie from the activation recomputed from
# its exposed logits (rtol, atol): a few hundred units in the last place,
# and the smallest normal number (denormals may be flushed to 0). A
# half-precision output is compared with the float32 recomputation rounded
# to its dtype: a few units in its last place, and its smallest positive
# value.
_RECOVERY_TOLERANCE = {
    "float32": (1e-4, 1.2e-38),
    "float64": (1e-8, 2.3e-308),
    "float16": (4 * 2.0**-10, 2 * 2.0**-24),
    "bfloat16": (4 * 2.0**-7, 1.2e-38),
}

# The smallest positive probability a half-precision output holds: float16's
# smallest subnormal, 2**-24 (a float16 0 is a probability below 2**-25:
# reading it as 2**-24 is a loss of 16.64, within log(2) of -log of the
# largest probability that rounds to 0); bfloat16 has float32's exponent
# range, and float32's smallest normal number.
HALF_FLOOR = {"float16": 2.0**-24, "bfloat16": 1.1754943508222875e-38}


def _floored(p, dtype):
    """`p` (float32) read as at least `HALF_FLOOR[dtype]`, with a zero
    gradient below it; negative and NaN probabilities are left to the log."""
    floor = ops.full_like(p, HALF_FLOOR[dtype])
    below = ops.logical_and(ops.less(p, floor), ops.greater_equal(p, 0))
    return ops.where(below, floor, p)


def _warn_half(name, dtype):
    warnings.warn(
        f"`{name}` reads {dtype} probabilities without their logits "
        f"(`from_logits=False`): a probability below {HALF_FLOOR[dtype]:.3g} "
        f"counts as {HALF_FLOOR[dtype]:.3g}, and the gradient -1/p of a "
        f"probability below 1.5e-5 overflows {dtype} in the backward pass of "
        "the softmax/sigmoid that made it (a non-finite step, skipped under "
        "a loss scale). For the exact loss, compute the output layer in "
        'float32 (`dtype="float32"` on the final softmax/sigmoid, or on the '
        "Dense layer holding it), or output logits and pass "
        "`from_logits=True`.",
        stacklevel=4,
    )


def half_probabilities(y_pred, activation, axis=-1, name="keras_stable"):
    """A float16/bfloat16 probability output in float32, for a loss class
    that hands its twin op float32 (`from_logits=False`).

    Where the backend exposes the logits behind a softmax/sigmoid output
    (TensorFlow, torch) and the activation reproduces it in its dtype, the
    activation of the float32 logits, carrying them (`_keras_logits`): the
    op then reads the logits, the loss is exact however saturated the
    output, and the gradient reaches the logits without passing through
    `-1/p`, which overflows float16. Elsewhere (JAX, or no activation) the
    probabilities as held, exactly, floored at the dtype's smallest
    positive value (`HALF_FLOOR`: a float16 0 gives at most 16.64 per unit
    of label, Keras's clip 16.12), with a warning that names the fix.
    """
    dtype = dtype_of(y_pred)
    x = ops.cast(y_pred, "float32")
    logits, consistent = _recovered_logits(y_pred, x, activation, axis)
    if logits is None:
        _warn_half(name, dtype)
        return _floored(x, dtype)
    if activation == "sigmoid":
        exact = ops.sigmoid(logits)
    elif static_shape(logits)[axis] == 1:
        exact = ops.ones_like(logits)  # as `_recovered_logits` reads it
    else:
        exact = ops.softmax(logits, axis=axis)
    given = exact if consistent is None else ops.where(consistent, exact, _floored(x, dtype))
    # A tensor that takes no attribute (a JAX tracer) is read as held.
    set_keras_logits(given, logits)
    return given


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

    `probs` is `y_pred` in its compute dtype; the logits are returned in
    it. `consistent` marks where the activation of the logits reproduces
    `y_pred` (whole rows along `axis` for a softmax; for a half-precision
    output, after rounding to its dtype): a softmax output fed to a sigmoid
    loss, or a softmax over another axis, falls back to the probabilities
    instead of using the wrong logits. Where the graph (TensorFlow's, or
    torch's autograd graph) shows the activation (`graph_activation`),
    nothing is read from the values: a softmax is consistent everywhere
    (`consistent` is None), a sigmoid wherever its logit is finite.
    """
    logits = exposed_logits(y_pred)
    dtype = dtype_of(y_pred)
    if logits is None or dtype not in _RECOVERY_TOLERANCE:
        return None, None
    rank = len(static_shape(probs))
    shown = graph_activation(y_pred, logits, rank)
    logits = ops.cast(ops.convert_to_tensor(logits), dtype_of(probs))
    if shown == activation == "sigmoid":
        return logits, ops.isfinite(logits)
    if shown == activation == "softmax" and axis is not None and axis % rank == rank - 1:
        return logits, None
    rtol, atol = _RECOVERY_TOLERANCE[dtype]
    # The activation as Keras computes it (the check carries no gradient).
    if activation == "sigmoid":
        expected = ops.sigmoid(logits)
    elif static_shape(logits)[axis] == 1:
        expected = ops.ones_like(logits)  # keras.ops.softmax warns there
    else:
        expected = ops.softmax(logits, axis=axis)
    expected = ops.stop_gradient(expected)
    if dtype in HALF:
        expected = ops.cast(ops.cast(expected, dtype), dtype_of(probs))
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
    Half-precision outputs are recovered the same way (compared in their
    dtype); without logits, their probabilities are read exactly in
    float32, floored at the dtype's smallest positive value (`HALF_FLOOR`),
    with a warning that names the fix.
    """
    x, out_dtype = to_compute(y_pred)
    if from_logits:
        return x, out_dtype
    axis = check_axis(axis, len(static_shape(x)))
    logits, consistent = _recovered_logits(y_pred, x, "softmax", axis)
    if logits is not None and consistent is None:
        return logits, out_dtype
    probs = _floored(x, out_dtype) if out_dtype in HALF else x
    scores = saturated_log(probs)
    if logits is not None:
        scores = ops.where(consistent, logits, scores)
    elif out_dtype in HALF:
        _warn_half("softmax_scores", out_dtype)
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
    probs = _floored(x, out_dtype) if out_dtype in HALF else x
    log_p, log_q = saturated_log(probs), _saturated_log1m(probs)
    logits, consistent = _recovered_logits(y_pred, x, "sigmoid")
    if logits is None and out_dtype in HALF:
        _warn_half("sigmoid_log_probabilities", out_dtype)
    if logits is not None:
        from_logits_p, from_logits_q = _log_sigmoids(logits)
        log_p = ops.where(consistent, from_logits_p, log_p)
        log_q = ops.where(consistent, from_logits_q, log_q)
    return log_p, log_q, out_dtype


def with_labels(labels, *scores):
    """`(labels, *scores)`: the labels checked against the shape of the
    first score (named `logits` in the error) and all of them cast to their
    common compute dtype; the preamble every cross-entropy with dense
    labels runs after reading `from_logits` (`softmax_scores`,
    `sigmoid_log_probabilities`)."""
    labels = ops.convert_to_tensor(labels)
    check_same_shape(labels, scores[0], "labels", "logits")
    compute = compute_dtype_of(dtype_of(scores[0]), dtype_of(labels))
    return (ops.cast(labels, compute), *(ops.cast(s, compute) for s in scores))


def softmax_with_labels(labels, logits, axis, mask):
    """`(labels, logits, axis, mask)`: `with_labels`, the class axis made
    canonical and the mask broadcast to the logits (`prepare_mask`); the
    preamble of the softmax cross-entropies with dense labels."""
    labels, logits = with_labels(labels, logits)
    axis = check_axis(axis, len(static_shape(logits)))
    return labels, logits, axis, prepare_mask(mask, logits)
