"""Cross-entropies computed in logit space, with masks and ignored labels.

Also the one reading of `from_logits=False` shared by every cross-entropy
(`softmax_scores`, `sigmoid_log_probabilities`): the logits behind a
softmax/sigmoid output where the backend exposes them, else the
probabilities read in log space, exact down to the smallest normal number.
"""

import warnings

from keras import ops

from keras_stable.common.checks import check_axis
from keras_stable.common.checks import check_ignore_class
from keras_stable.common.checks import check_label_smoothing
from keras_stable.common.checks import check_same_shape
from keras_stable.common.checks import prepare_mask
from keras_stable.common.dtypes import compute_dtype_of
from keras_stable.common.dtypes import dtype_of
from keras_stable.common.dtypes import static_shape
from keras_stable.common.dtypes import to_compute
from keras_stable.ops import _kernels
from keras_stable.ops.softmax import _safe_log
from keras_stable.ops.softmax import shifted_logits

_INF = float("inf")
# float32 holds every integer up to 2**24 exactly; an int32 index must fit.
_INT32_LIMIT = 2.0**31


def warn_if_probabilities(logits, from_logits, name):
    """Warns, as Keras does, when `from_logits=True` meets probabilities.

    Keras marks the output of a softmax or sigmoid activation (the tensor
    keeps its logits as `_keras_logits` on TF and torch; on TF graphs the
    producing op is `Softmax`/`Sigmoid`). keras_stable's losses default to
    `from_logits=True` where Keras defaults to False, so a literal swap of a
    model with a softmax head would silently compute the cross-entropy of
    probabilities read as logits.
    """
    if not from_logits:
        return
    if exposed_logits(logits) is not None:
        warnings.warn(
            f"`{name}` received `from_logits=True`, but its input was "
            "produced by a softmax or sigmoid activation and does not hold "
            "logits. Pass `from_logits=False` (keras_stable defaults to "
            "`from_logits=True`; Keras defaults to `False`), or remove the "
            "activation.",
            stacklevel=3,
        )


# The smallest normal number of each compute dtype: a probability below it
# is read as this number (a loss term of at most 87.34 in float32).
_SMALLEST_NORMAL = {
    "float32": 1.1754943508222875e-38,
    "float64": 2.2250738585072014e-308,
}
# How far an activation output may lie from the activation recomputed from
# its exposed logits (rtol, atol): a few hundred units in the last place,
# and the smallest normal number (denormals may be flushed to 0).
_RECOVERY_TOLERANCE = {
    "float32": (1e-4, 1.2e-38),
    "float64": (1e-8, 2.3e-308),
}


def exposed_logits(y_pred):
    """The logits behind a softmax or sigmoid output, or None.

    Keras's activations keep their input on their output as `_keras_logits`
    (TensorFlow and torch tensors; JAX arrays take no attributes); on a
    TensorFlow graph the producing op is `Softmax` or `Sigmoid` and its
    input is the logits. Which activation produced the output is not
    recorded on the tensor: `softmax_scores` and `sigmoid_log_probabilities`
    check that the activation reproduces `y_pred` before using the logits.
    """
    logits = getattr(y_pred, "_keras_logits", None)
    if logits is not None:
        return logits
    try:
        if y_pred.op.type in ("Softmax", "Sigmoid"):
            return y_pred.op.inputs[0]
    except Exception:  # eager tensors and other backends have no op
        pass
    return None


def saturated_log(p):
    """`log(p)` for probabilities, exact down to the smallest normal number.

    Below it (a denormal, or 0) `p` is read as the smallest normal number
    `tiny` (1.1754944e-38 in float32): `log(p)` saturates at `log(tiny)`
    (-87.34 in float32) with a zero gradient, so the gradient `1/p` is at
    most `1/tiny` and never `inf`. Backends disagree on denormals (XLA
    flushes them to 0, torch keeps them); both are read alike. A negative
    or NaN probability gives NaN.
    """
    # A tensor, not a Python float: a float32 scalar would round the
    # float64 threshold to 0.
    tiny = ops.full_like(p, _SMALLEST_NORMAL[dtype_of(p)])
    normal = ops.greater_equal(p, tiny)
    # The argument of `log` is never below `tiny`: one where suffices.
    log_p = ops.log(ops.where(normal, p, tiny))
    return ops.where(ops.greater_equal(p, 0), log_p, ops.full_like(p, float("nan")))


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


def softmax_cross_entropy(
    labels, logits, axis=-1, mask=None, label_smoothing=0.0, from_logits=True
):
    """Per-example `-sum(labels * log_softmax(logits), axis)`.

    Args:
        labels: class probabilities (one-hot or soft), same shape as
            `logits`.
        logits: unnormalised log-probabilities.
        axis: int, the class axis.
        mask: optional boolean tensor broadcastable to `logits`; `False`
            classes are removed from the softmax.
        label_smoothing: float in [0, 1): labels become
            `labels * (1 - label_smoothing) + label_smoothing / n`, where `n`
            counts only the unmasked, finite classes of the example; masked
            and `-inf` classes receive no smoothing mass.
        from_logits: whether `logits` holds logits (default) or
            probabilities, renormalised over `axis` (see Numerical
            stability).

    Returns:
        The loss per example (`axis` reduced), in the float dtype of `logits`.

    Numerical stability:
        Works on `log_softmax` (shifted by the largest valid logit; half
        precision computed in float32): no overflow, no `log(0)` of an
        underflowed probability, no epsilon clip. A class that is masked or
        has logit `-inf` and a zero label contributes exactly 0 (the
        built-ins compute `0 * -inf = NaN`), with a zero gradient. A nonzero
        label on such a class gives `+inf`, the true cross-entropy (the data
        puts mass on an impossible class), with a finite gradient. An example
        with no class left (fully masked) gives 0 and a zero gradient.
        Probabilities (`from_logits=False`) are read by `softmax_scores`: the
        logits behind a softmax output where the backend exposes them
        (TensorFlow, torch), else `log(p)`, exact down to the smallest normal
        probability (1.18e-38 in float32) and saturated below it: `p = 0` on
        a labelled class gives `-log(1.18e-38) = 87.34` per unit of label
        (not `+inf`) with a zero gradient with respect to that probability,
        and never a NaN or inf gradient. No epsilon clip.

    Example:

    >>> import numpy as np
    >>> from keras_stable import ops
    >>> labels = np.array([[1.0, 0.0, 0.0]], "float32")
    >>> logits = np.array([[2.0, -np.inf, 0.0]], "float32")
    >>> np.round(np.asarray(ops.softmax_cross_entropy(labels, logits)), 6)
    array([0.126928], dtype=float32)
    """
    label_smoothing = check_label_smoothing(label_smoothing)
    warn_if_probabilities(logits, from_logits, "softmax_cross_entropy")
    logits, out_dtype = softmax_scores(logits, from_logits, axis)
    labels = ops.convert_to_tensor(labels)
    check_same_shape(labels, logits, "labels", "logits")
    axis = check_axis(axis, len(static_shape(logits)))
    compute = compute_dtype_of(dtype_of(logits), dtype_of(labels))
    logits = ops.cast(logits, compute)
    labels = ops.cast(labels, compute)
    mask = prepare_mask(mask, logits)
    if label_smoothing:
        valid = ops.not_equal(logits, -_INF)
        if mask is not None:
            valid = ops.logical_and(valid, mask)
        n_valid = ops.sum(ops.cast(valid, compute), axis=axis, keepdims=True)
        spread = label_smoothing / ops.maximum(n_valid, 1.0)
        labels = labels * (1.0 - label_smoothing) + ops.where(valid, spread, ops.zeros_like(labels))
    if _kernels.kernels_enabled():
        loss = _kernels.softmax_cross_entropy_kernel(labels, logits, axis, mask)
    else:
        loss = _reference_softmax_cross_entropy(labels, logits, axis, mask)
    return ops.cast(loss, out_dtype)


def _reference_softmax_cross_entropy(labels, logits, axis, mask):
    """The portable formulation of `softmax_cross_entropy` (smoothed
    labels, compute dtype, plain autodiff): the fallback and the reference
    of `_kernels.softmax_cross_entropy_kernel`."""
    valid, z, total, _ = shifted_logits(logits, axis, mask)
    nonempty, log_total = _safe_log(total)
    zeros = ops.zeros_like(logits)
    log_probs = ops.where(valid, z - log_total, zeros)
    # Invalid classes: 0 with a zero label, -inf (loss +inf) otherwise.
    impossible = ops.where(ops.equal(labels, 0), zeros, ops.full_like(zeros, -_INF))
    terms = ops.where(valid, labels * log_probs, impossible)
    loss = -ops.sum(terms, axis=axis)
    return ops.where(ops.squeeze(nonempty, axis=axis), loss, ops.zeros_like(loss))


def sparse_softmax_cross_entropy(
    labels, logits, axis=-1, mask=None, ignore_class=None, from_logits=True
):
    """Per-example `logsumexp(logits) - logits[label]` for integer labels.

    Args:
        labels: integer class indices, the shape of `logits` without `axis`.
        logits: unnormalised log-probabilities.
        axis: int, the class axis of `logits`.
        mask: optional boolean tensor broadcastable to `logits`; `False`
            classes are removed from the softmax.
        ignore_class: optional int; examples with this label give loss 0 and
            a zero gradient (it may lie outside `[0, num_classes)`, e.g. -1).
        from_logits: whether `logits` holds logits (default) or
            probabilities, renormalised over `axis` and read as in
            `softmax_cross_entropy`.

    Returns:
        The loss per example, the shape of `labels`, in the float dtype of
        `logits`.

    Numerical stability:
        `logsumexp` is shifted by the largest valid logit and computed in
        float32 for half precision; the picked logit is gathered, never
        taken as `log` of a probability. Integer labels are used as indices
        and never cast to float (float16 cannot hold 2049 exactly). Ignored
        examples and examples with no class left (fully masked) give 0 and a
        zero gradient. A label on a masked or `-inf` class gives `+inf`
        (probability 0 with `from_logits=False`: the saturated 87.34). A
        label outside `[0, num_classes)` that is not `ignore_class` gives NaN:
        never the silent finite value of a clamped or wrapped index (a
        compiled gather cannot raise).

    Example:

    >>> import numpy as np
    >>> from keras_stable import ops
    >>> logits = np.array([[2.0, -np.inf, 0.0], [1.0, 2.0, 3.0]], "float32")
    >>> np.round(np.asarray(ops.sparse_softmax_cross_entropy(np.array([0, -1]), logits, ignore_class=-1)), 6)
    array([0.126928, 0.      ], dtype=float32)
    """
    labels = ops.convert_to_tensor(labels)
    if not dtype_of(labels).startswith(("int", "uint")):
        raise ValueError(
            "`labels` must be integer class indices for a sparse "
            f"cross-entropy, got dtype {dtype_of(labels)} with shape "
            f"{static_shape(labels)}. Cast them to int32, or use "
            "`softmax_cross_entropy` for one-hot or soft labels."
        )
    warn_if_probabilities(logits, from_logits, "sparse_softmax_cross_entropy")
    logits, out_dtype = softmax_scores(logits, from_logits, axis)
    rank = len(static_shape(logits))
    axis = check_axis(axis, rank)
    expected = static_shape(logits)[:axis] + static_shape(logits)[axis + 1 :]
    if static_shape(labels) != expected:
        raise ValueError(
            f"`labels` of shape {static_shape(labels)} do not match `logits` "
            f"of shape {static_shape(logits)} with class axis={axis}: "
            f"expected labels of shape {expected}."
        )
    ignore_class = check_ignore_class(ignore_class)
    mask = prepare_mask(mask, logits)
    if mask is None and _kernels.kernels_enabled():
        # PyTorch: torch's fused cross-entropy where it gives these values.
        loss = _kernels.native_sparse_cross_entropy(labels, logits, axis, ignore_class)
        if loss is not None:
            return ops.cast(loss, out_dtype)
    num_classes = static_shape(logits)[axis]

    valid, z, total, _ = shifted_logits(logits, axis, mask)
    nonempty, log_total = _safe_log(total)
    nonempty = ops.squeeze(nonempty, axis=axis)
    log_total = ops.squeeze(log_total, axis=axis)

    labels = ops.cast(labels, "int32")
    in_range = ops.logical_and(ops.greater_equal(labels, 0), ops.less(labels, num_classes))
    index = ops.expand_dims(ops.where(in_range, labels, ops.zeros_like(labels)), axis)
    picked_valid = ops.squeeze(ops.take_along_axis(valid, index, axis), axis)
    zeros = ops.zeros_like(log_total)
    z_safe = ops.where(valid, z, ops.zeros_like(z))
    picked = ops.squeeze(ops.take_along_axis(z_safe, index, axis), axis)
    loss = ops.where(picked_valid, log_total - picked, ops.full_like(zeros, _INF))
    loss = ops.where(in_range, loss, ops.full_like(zeros, float("nan")))
    skip = ops.logical_not(nonempty)
    if ignore_class is not None:
        skip = ops.logical_or(skip, ops.equal(labels, ignore_class))
    loss = ops.where(skip, zeros, loss)
    return ops.cast(loss, out_dtype)


def sigmoid_cross_entropy(labels, logits, from_logits=True):
    """Elementwise binary cross-entropy from logits.

    `-labels * log(sigmoid(x)) - (1 - labels) * log(1 - sigmoid(x))`.

    Args:
        labels: targets in [0, 1], same shape as `logits`.
        logits: unnormalised log-odds (or probabilities, see below).
        from_logits: whether `logits` holds log-odds (default) or
            probabilities `p`; probabilities give
            `-labels * log(p) - (1 - labels) * log(1 - p)` with no epsilon
            clip (see Numerical stability): at `p = 0` (or `p = 1`) the
            term of a zero label is exactly 0 (no `0 * log(0)`), and the
            gradient is the true `1 / (1 - p)` (or `-1 / p`).

    Returns:
        The elementwise loss, in the float dtype of `logits`.

    Numerical stability:
        Uses `max(x, 0) - x * labels + log1p(exp(-|x|))`: `exp` never sees a
        positive argument, so the value is finite for every finite logit
        (1e4 gives 1e4, not `inf`) and the gradient is
        `sigmoid(x) - labels` (0.5 - labels at x = 0). No probability is formed or clipped. Half
        precision is computed in float32. An infinite logit gives `inf` or
        NaN (`inf - inf`), as the built-ins do. Probabilities are read by
        `sigmoid_log_probabilities`: the logits behind a sigmoid output where
        the backend exposes them (TensorFlow, torch), else `log(p)` and
        `log(1 - p)`, exact down to the smallest normal number (1.18e-38 in
        float32) and saturated below it: `p = 0` with label 1 gives 87.34
        (not `+inf`) with a zero gradient, never a NaN or inf gradient.

    Example:

    >>> import numpy as np
    >>> from keras_stable import ops
    >>> np.asarray(ops.sigmoid_cross_entropy(np.array([0.0, 1.0], "float32"), np.array([100.0, 1e4], "float32")))
    array([100.,   0.], dtype=float32)
    """
    warn_if_probabilities(logits, from_logits, "sigmoid_cross_entropy")
    labels = ops.convert_to_tensor(labels)
    if not from_logits:
        # log(p) and log(1 - p) are finite (saturated): the term of a zero
        # label on p = 0 (or 1) is 0 * -87.34 = 0, never 0 * -inf.
        log_p, log_q, out_dtype = sigmoid_log_probabilities(logits, False)
        check_same_shape(labels, log_p, "labels", "logits")
        compute = compute_dtype_of(dtype_of(log_p), dtype_of(labels))
        labels = ops.cast(labels, compute)
        log_p, log_q = ops.cast(log_p, compute), ops.cast(log_q, compute)
        loss = -(labels * log_p + (1.0 - labels) * log_q)
        return ops.cast(loss, out_dtype)
    logits, out_dtype = to_compute(logits)
    check_same_shape(labels, logits, "labels", "logits")
    compute = compute_dtype_of(dtype_of(logits), dtype_of(labels))
    logits = ops.cast(logits, compute)
    labels = ops.cast(labels, compute)
    if _kernels.kernels_enabled():
        # PyTorch: torch's fused form where it gives these values.
        loss = _kernels.native_sigmoid_cross_entropy(labels, logits)
        if loss is not None:
            return ops.cast(loss, out_dtype)
    # relu(x) and -|x| through one shared select: at x == 0 autodiff would
    # otherwise pick relu'(0) and abs'(0) independently (0 and 0 on JAX),
    # giving -labels instead of sigmoid(0) - labels; zero-initialised heads
    # start exactly there.
    nonnegative = ops.greater_equal(logits, 0)
    relu_x = ops.where(nonnegative, logits, ops.zeros_like(logits))
    neg_abs = ops.where(nonnegative, -logits, logits)
    loss = relu_x - logits * labels + ops.log1p(ops.exp(neg_abs))
    return ops.cast(loss, out_dtype)


def safe_log(p):
    """`log(p)` for probabilities: `-inf` with a zero gradient at `p == 0`.

    The double where keeps `1/p = inf` out of the gradient of a class whose
    probability is 0. A negative or NaN probability gives NaN. The
    cross-entropies read probabilities with `saturated_log` instead (finite
    at `p = 0`); this exact `log` is for other losses (e.g. the Poisson
    rate).
    """
    positive = ops.greater(p, 0)
    log_p = ops.log(ops.where(positive, p, ops.ones_like(p)))
    invalid = ops.full_like(p, float("nan"))
    zero = ops.full_like(p, float("-inf"))
    return ops.where(positive, log_p, ops.where(ops.equal(p, 0), zero, invalid))


def integer_labels(y_true, y_pred, axis):
    """Returns `(labels, integral)`: int32 labels and where they are exact.

    Integer labels are used as they are. Float labels (Keras's data adapters
    may hand integer targets over as floats) are read exactly where they
    hold an integral value; `integral` is False where they do not (a
    fractional or NaN label), and the loss is NaN there - never the loss of a
    silently truncated class. A size-1 class axis on the labels (`(batch, 1)`
    for `(batch, classes)` logits) is squeezed.
    """
    y_true = ops.convert_to_tensor(y_true)
    rank = len(static_shape(y_pred))
    class_axis = check_axis(axis, rank)
    if len(static_shape(y_true)) == rank and static_shape(y_true)[class_axis] == 1:
        y_true = ops.squeeze(y_true, axis=class_axis)
    dtype = dtype_of(y_true)
    if dtype.startswith(("int", "uint")):
        return y_true, None
    if dtype == "bool" or not dtype.startswith("float"):
        raise ValueError(
            f"`y_true` must hold integer class indices, got dtype {dtype} "
            f"with shape {static_shape(y_true)}."
        )
    y_true = ops.cast(y_true, "float32") if dtype != "float64" else y_true
    integral = ops.logical_and(
        ops.equal(y_true, ops.floor(y_true)),
        ops.less(ops.abs(y_true), _INT32_LIMIT),
    )
    labels = ops.cast(ops.where(integral, y_true, ops.zeros_like(y_true)), "int32")
    return labels, integral
