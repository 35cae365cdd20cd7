"""Cross-entropies computed in logit space, with masks and ignored labels.

Probabilities (`from_logits=False`) are read by `probabilities.py`
(`softmax_scores`, `sigmoid_log_probabilities`).
"""

from keras import ops

from keras_stable.common.checks import check_axis
from keras_stable.common.checks import check_ignore_class
from keras_stable.common.checks import check_label_smoothing
from keras_stable.common.checks import prepare_mask
from keras_stable.common.checks import warn_if_probabilities
from keras_stable.common.dtypes import dtype_of
from keras_stable.common.dtypes import inf_where
from keras_stable.common.dtypes import is_neg_inf
from keras_stable.common.dtypes import maximum
from keras_stable.common.dtypes import nan_where
from keras_stable.common.dtypes import static_shape
from keras_stable.common.dtypes import to_compute
from keras_stable.ops import _kernels
from keras_stable.ops.logarithms import safe_log
from keras_stable.ops.probabilities import sigmoid_log_probabilities
from keras_stable.ops.probabilities import softmax_scores
from keras_stable.ops.probabilities import softmax_with_labels
from keras_stable.ops.probabilities import with_labels
from keras_stable.ops.softmax import shifted_logits


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

    Examples:
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
    labels, logits, axis, mask = softmax_with_labels(labels, logits, axis, mask)
    compute = dtype_of(logits)
    if label_smoothing:
        valid = ops.logical_not(is_neg_inf(logits))
        if mask is not None:
            valid = ops.logical_and(valid, mask)
        n_valid = ops.sum(ops.cast(valid, compute), axis=axis, keepdims=True)
        spread = label_smoothing / maximum(n_valid, 1.0)
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
    nonempty, log_total = ops.not_equal(total, 0), safe_log(total)
    zeros = ops.zeros_like(logits)
    log_probs = ops.where(valid, z - log_total, zeros)
    # Invalid classes: 0 with a zero label, -inf (loss +inf) otherwise.
    impossible = inf_where(
        ops.logical_and(ops.not_equal(labels, 0), ops.logical_not(valid)), zeros, negative=True
    )
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

    Examples:
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
        loss = _kernels.native_op("sparse_cross_entropy", labels, logits, axis, ignore_class)
        if loss is not None:
            return ops.cast(loss, out_dtype)
    num_classes = static_shape(logits)[axis]

    valid, z, total, _ = shifted_logits(logits, axis, mask)
    nonempty, log_total = ops.not_equal(total, 0), safe_log(total)
    nonempty = ops.squeeze(nonempty, axis=axis)
    log_total = ops.squeeze(log_total, axis=axis)

    labels = ops.cast(labels, "int32")
    in_range = ops.logical_and(ops.greater_equal(labels, 0), ops.less(labels, num_classes))
    index = ops.expand_dims(ops.where(in_range, labels, ops.zeros_like(labels)), axis)
    picked_valid = ops.squeeze(ops.take_along_axis(valid, index, axis), axis)
    zeros = ops.zeros_like(log_total)
    z_safe = ops.where(valid, z, ops.zeros_like(z))
    picked = ops.squeeze(ops.take_along_axis(z_safe, index, axis), axis)
    loss = ops.where(
        picked_valid, log_total - picked, inf_where(ops.logical_not(picked_valid), zeros)
    )
    out_of_range = ops.logical_not(in_range)
    loss = ops.where(in_range, loss, nan_where(out_of_range, zeros))
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

    Examples:
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
        labels, log_p, log_q = with_labels(labels, log_p, log_q)
        loss = -(labels * log_p + (1.0 - labels) * log_q)
        return ops.cast(loss, out_dtype)
    logits, out_dtype = to_compute(logits)
    labels, logits = with_labels(labels, logits)
    if _kernels.kernels_enabled():
        # PyTorch: torch's fused form where it gives these values.
        loss = _kernels.native_op("sigmoid_cross_entropy", labels, logits)
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
