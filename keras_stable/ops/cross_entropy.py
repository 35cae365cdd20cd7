"""Cross-entropies computed in logit space, with masks and ignored labels."""

import warnings

from keras import ops

from keras_stable.common.checks import check_axis
from keras_stable.common.checks import check_ignore_class
from keras_stable.common.checks import check_label_smoothing
from keras_stable.common.checks import check_same_shape
from keras_stable.common.dtypes import compute_dtype_of
from keras_stable.common.dtypes import dtype_of
from keras_stable.common.checks import prepare_mask
from keras_stable.common.dtypes import static_shape
from keras_stable.common.dtypes import to_compute
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
    marked = getattr(logits, "_keras_logits", None) is not None
    if not marked:
        try:
            marked = logits.op.type in ("Softmax", "Sigmoid")
        except Exception:  # eager tensors and other backends have no op
            marked = False
    if marked:
        warnings.warn(
            f"`{name}` received `from_logits=True`, but its input was "
            "produced by a softmax or sigmoid activation and does not hold "
            "logits. Pass `from_logits=False` (keras_stable defaults to "
            "`from_logits=True`; Keras defaults to `False`), or remove the "
            "activation.",
            stacklevel=3,
        )


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
            probabilities; probabilities are read as `log(p)` (`-inf` at
            `p = 0`, no epsilon clip), renormalised over `axis`.

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
    logits, out_dtype = to_compute(logits)
    if not from_logits:
        logits = safe_log(logits)
    labels = ops.convert_to_tensor(labels)
    check_same_shape(labels, logits, "labels", "logits")
    axis = check_axis(axis, len(static_shape(logits)))
    compute = compute_dtype_of(dtype_of(logits), dtype_of(labels))
    logits = ops.cast(logits, compute)
    labels = ops.cast(labels, compute)
    mask = prepare_mask(mask, logits)

    valid, z, total, _ = shifted_logits(logits, axis, mask)
    nonempty, log_total = _safe_log(total)
    if label_smoothing:
        n_valid = ops.sum(ops.cast(valid, compute), axis=axis, keepdims=True)
        spread = label_smoothing / ops.maximum(n_valid, 1.0)
        labels = labels * (1.0 - label_smoothing) + ops.where(
            valid, spread, ops.zeros_like(labels)
        )
    zeros = ops.zeros_like(logits)
    log_probs = ops.where(valid, z - log_total, zeros)
    # Invalid classes: 0 with a zero label, -inf (loss +inf) otherwise.
    impossible = ops.where(
        ops.equal(labels, 0), zeros, ops.full_like(zeros, -_INF)
    )
    terms = ops.where(valid, labels * log_probs, impossible)
    loss = -ops.sum(terms, axis=axis)
    loss = ops.where(
        ops.squeeze(nonempty, axis=axis), loss, ops.zeros_like(loss)
    )
    return ops.cast(loss, out_dtype)


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
            probabilities; probabilities are read as `log(p)` (`-inf` at
            `p = 0`, no epsilon clip), renormalised over `axis`.

    Returns:
        The loss per example, the shape of `labels`, in the float dtype of
        `logits`.

    Numerical stability:
        `logsumexp` is shifted by the largest valid logit and computed in
        float32 for half precision; the picked logit is gathered, never
        taken as `log` of a probability. Integer labels are used as indices
        and never cast to float (float16 cannot hold 2049 exactly). Ignored
        examples and examples with no class left (fully masked) give 0 and a
        zero gradient. A label on a masked or `-inf` class gives `+inf`. A
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
    logits, out_dtype = to_compute(logits)
    if not from_logits:
        logits = safe_log(logits)
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
    num_classes = static_shape(logits)[axis]

    valid, z, total, _ = shifted_logits(logits, axis, mask)
    nonempty, log_total = _safe_log(total)
    nonempty = ops.squeeze(nonempty, axis=axis)
    log_total = ops.squeeze(log_total, axis=axis)

    labels = ops.cast(labels, "int32")
    in_range = ops.logical_and(
        ops.greater_equal(labels, 0), ops.less(labels, num_classes)
    )
    index = ops.expand_dims(
        ops.where(in_range, labels, ops.zeros_like(labels)), axis
    )
    picked_valid = ops.squeeze(ops.take_along_axis(valid, index, axis), axis)
    zeros = ops.zeros_like(log_total)
    z_safe = ops.where(valid, z, ops.zeros_like(z))
    picked = ops.squeeze(ops.take_along_axis(z_safe, index, axis), axis)
    loss = ops.where(
        picked_valid, log_total - picked, ops.full_like(zeros, _INF)
    )
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
            clip, a zero label on `p = 0` (or `p = 1`) contributing exactly
            0 with a zero gradient.

    Returns:
        The elementwise loss, in the float dtype of `logits`.

    Numerical stability:
        Uses `max(x, 0) - x * labels + log1p(exp(-|x|))`: `exp` never sees a
        positive argument, so the value is finite for every finite logit
        (1e4 gives 1e4, not `inf`) and the gradient is
        `sigmoid(x) - labels` (0.5 - labels at x = 0). No probability is formed or clipped. Half
        precision is computed in float32. An infinite logit gives `inf` or
        NaN (`inf - inf`), as the built-ins do.

    Example:

    >>> import numpy as np
    >>> from keras_stable import ops
    >>> np.asarray(ops.sigmoid_cross_entropy(np.array([0.0, 1.0], "float32"), np.array([100.0, 1e4], "float32")))
    array([100.,   0.], dtype=float32)
    """
    warn_if_probabilities(logits, from_logits, "sigmoid_cross_entropy")
    logits, out_dtype = to_compute(logits)
    labels = ops.convert_to_tensor(labels)
    check_same_shape(labels, logits, "labels", "logits")
    compute = compute_dtype_of(dtype_of(logits), dtype_of(labels))
    logits = ops.cast(logits, compute)
    labels = ops.cast(labels, compute)
    if not from_logits:
        # Two-class log scores [log(1 - p), log(p)]: the logit-space
        # cross-entropy then gives 0 for a zero label on p = 0 (or 1).
        scores = ops.stack([safe_log(1.0 - logits), safe_log(logits)], -1)
        two_class = ops.stack([1.0 - labels, labels], axis=-1)
        loss = softmax_cross_entropy(two_class, scores)
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
    probability is 0 (a zero label there then contributes exactly 0 through
    the logit-space cross-entropies). A negative or NaN probability gives
    NaN. Used by the losses and metrics for `from_logits=False`.
    """
    positive = ops.greater(p, 0)
    log_p = ops.log(ops.where(positive, p, ops.ones_like(p)))
    invalid = ops.full_like(p, float("nan"))
    zero = ops.full_like(p, float("-inf"))
    return ops.where(
        positive, log_p, ops.where(ops.equal(p, 0), zero, invalid)
    )


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
    if (
        len(static_shape(y_true)) == rank
        and static_shape(y_true)[class_axis] == 1
    ):
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
    labels = ops.cast(
        ops.where(integral, y_true, ops.zeros_like(y_true)), "int32"
    )
    return labels, integral
