"""Focal cross-entropies computed in log space.

The focal factor `(1 - p_t) ** gamma` is computed as
`exp(gamma * log(1 - p_t))`, with `log(1 - p_t)` taken from log-sigmoid and
log-softmax identities rather than from a rounded probability: the loss is
exact however saturated the logits, and its gradient is finite for every
`gamma >= 0` (`d/dp (1 - p) ** gamma` is infinite at `p = 1` for
`gamma < 1`; in log space the whole term tends to 0 with its gradient).
"""

from keras import ops

from keras_stable.common.checks import check_alpha
from keras_stable.common.checks import check_gamma
from keras_stable.common.checks import check_label_smoothing
from keras_stable.common.checks import warn_if_probabilities
from keras_stable.common.dtypes import dtype_of
from keras_stable.common.dtypes import inf_where
from keras_stable.common.dtypes import maximum
from keras_stable.common.dtypes import nan_where
from keras_stable.common.dtypes import static_shape
from keras_stable.common.dtypes import to_compute
from keras_stable.ops.logarithms import SMALLEST_NORMAL
from keras_stable.ops.logarithms import safe_log
from keras_stable.ops.probabilities import sigmoid_log_probabilities
from keras_stable.ops.probabilities import softmax_scores
from keras_stable.ops.probabilities import softmax_with_labels
from keras_stable.ops.probabilities import with_labels
from keras_stable.ops.softmax import shifted_logits

_LOG_HALF = -0.6931471805599453


def _log_mix(w, log_a, log_b):
    """`log(w * a + (1 - w) * b)` from `log_a` and `log_b`, for `w` in [0, 1].

    A log-sum-exp shifted by the (gradient-free) larger log, with the
    weights kept linear, so the gradient with respect to `w` is the true
    one, at `w = 0` and `w = 1` included. Where the weighted sum underflows
    (a hard label on the far side of a saturated logit: `w = 1` and
    `a / b < 1e-38`) the result is the log of the weighted term itself,
    exact in value and in its gradient with respect to the logits.
    """
    m = maximum(log_a, log_b)
    m = ops.stop_gradient(ops.where(ops.isfinite(m), m, ops.zeros_like(m)))
    inner = w * ops.exp(log_a - m) + (1.0 - w) * ops.exp(log_b - m)
    normal = ops.greater_equal(inner, ops.full_like(inner, SMALLEST_NORMAL[dtype_of(inner)]))
    mixed = m + ops.log(ops.where(normal, inner, ops.ones_like(inner)))
    direct = ops.where(ops.greater_equal(w, 0.5), log_a, log_b)
    return ops.where(normal, mixed, direct)


def _focal_factor(log1m_p, gamma):
    """`(1 - p) ** gamma` as `exp(gamma * log(1 - p))`; exactly 1 for
    `gamma = 0` (also where `p = 1`: `0 ** 0 = 1`, as `keras.ops.power`)."""
    if gamma == 0.0:
        return None
    return ops.exp(gamma * log1m_p)


def _power(u, gamma, dtype):
    """`u ** gamma` for `u` in [0, 1] and `gamma > 0`, with a finite gradient.

    A small integer power is a product: exact, and smooth at `u = 0`. Any
    other is `exp(gamma log(u))`, with `u` clamped at the smallest normal
    number: `d/du u**gamma` is infinite at `u = 0` for `gamma < 1`. The
    focal losses multiply the power by a cross-entropy that is itself
    below the smallest normal number where `u` is (for any label that is
    not a denormal number itself), so the clamp changes no normal value.
    """
    if gamma == int(gamma) and gamma <= 4:
        out = u
        for _ in range(int(gamma) - 1):
            out = out * u
        return out
    return ops.exp(gamma * ops.log(maximum(u, SMALLEST_NORMAL[dtype])))


def sigmoid_focal_cross_entropy(labels, logits, gamma=2.0, alpha=None, from_logits=True):
    """Elementwise focal binary cross-entropy, `alpha_t (1 - p_t)**gamma CE`.

    With `p = sigmoid(logits)` and labels `y` in [0, 1]:
    `CE = -y log(p) - (1 - y) log(1 - p)`,
    `p_t = y p + (1 - y) (1 - p)` and, when `alpha` is given,
    `alpha_t = y alpha + (1 - y) (1 - alpha)` (1 without `alpha`): the
    definitions of `keras.losses.binary_focal_crossentropy` (Lin et al.,
    2017), where `alpha=None` is Keras's `apply_class_balancing=False` and
    a float is `apply_class_balancing=True, alpha=alpha`.

    Args:
        labels: targets in [0, 1], same shape as `logits`.
        logits: unnormalised log-odds (or probabilities, see `from_logits`).
        gamma: focusing parameter, a float >= 0, or None (TF Addons: no
            modulating factor, as 0; 0 gives the plain
            cross-entropy).
        alpha: None (no class balancing, the default) or a float in [0, 1],
            the weight of the positive class (`1 - alpha` for the negative).
        from_logits: whether `logits` holds log-odds (default) or
            probabilities, read as in `sigmoid_cross_entropy`.

    Returns:
        The elementwise loss, in the float dtype of `logits`.

    Numerical stability:
        `log(p)` and `log(1 - p)` are `-softplus(-x)` and `-softplus(x)`,
        and `log(1 - p_t)` their log-sum-exp: nothing is rounded to a
        probability first. A hard example with logit -30 and label 1 gives
        30.0 exactly (a clip at `1e-7` gives 16.1 on probabilities), and an
        easy one with logit +100 gives a finite value and a finite gradient
        for every `gamma >= 0`: `(1 - p)**0.5` has an infinite derivative
        where `1 - p` rounds to 0 (NaN gradients in
        `keras.losses.BinaryFocalCrossentropy(gamma=0.5)`), while
        `exp(gamma * log(1 - p))` tends to 0 with its gradient. Half
        precision is computed in float32. Labels outside [0, 1] give NaN; an
        infinite logit gives `inf` or NaN.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> labels = np.array([1.0, 1.0, 0.0], "float32")
        >>> logits = np.array([-30.0, 100.0, 0.0], "float32")
        >>> np.round(np.asarray(ops.sigmoid_focal_cross_entropy(labels, logits)), 6)
        array([30.      ,  0.      ,  0.173287], dtype=float32)
    """
    gamma = check_gamma(gamma)
    alpha = check_alpha(alpha)
    warn_if_probabilities(logits, from_logits, "sigmoid_focal_cross_entropy")
    labels = ops.convert_to_tensor(labels)
    if from_logits:
        x, out_dtype = to_compute(logits)
        labels, x = with_labels(labels, x)
        loss = _sigmoid_focal_from_logits(labels, x, gamma)
    else:
        log_p, log_q, out_dtype = sigmoid_log_probabilities(logits, from_logits)
        labels, log_p, log_q = with_labels(labels, log_p, log_q)
        loss = -(labels * log_p + (1.0 - labels) * log_q)
        # 1 - p_t = y (1 - p) + (1 - y) p.
        factor = _focal_factor(_log_mix(labels, log_q, log_p), gamma)
        if factor is not None:
            loss = factor * loss
    if alpha is not None:
        loss = (labels * alpha + (1.0 - labels) * (1.0 - alpha)) * loss
    # p_t is a probability only for labels in [0, 1]: NaN outside (and NaN).
    in_range = ops.logical_and(ops.greater_equal(labels, 0), ops.less_equal(labels, 1))
    out_of_range = ops.logical_not(in_range)
    loss = ops.where(in_range, loss, nan_where(out_of_range, loss))
    return ops.cast(loss, out_dtype)


def _sigmoid_focal_from_logits(labels, x, gamma):
    """`(1 - p_t)**gamma CE` from logits, with one sigmoid and one `log1p`.

    With `t = |x|`, `q = sigmoid(-t)` (the smaller of `p` and `1 - p`, exact
    down to underflow) and `a` the label weight of the larger one (`1 - y`
    for `x >= 0`, `y` below): `CE = a t - log1p(-q)` and
    `1 - p_t = a (1 - q) + (1 - a) q`, a sum of non-negative terms (no
    cancellation). Both are identities in `x` on either side of 0 (only
    which one is exact changes), so the gradient at `x = 0` is the true
    one. One transcendental pair (`sigmoid`, `log1p`) instead of two
    log-sigmoids and a log-sum-exp: under XLA the loss and its gradient
    take a few fused passes.
    """
    nonnegative = ops.cast(ops.greater_equal(x, 0), dtype_of(x))
    t = x * (2.0 * nonnegative - 1.0)
    a = labels + nonnegative * (1.0 - 2.0 * labels)
    q = ops.sigmoid(-t)
    loss = a * t - ops.log1p(-q)
    if gamma == 0.0:
        return loss
    one_minus_pt = a * (1.0 - q) + (1.0 - a) * q
    return _power(one_minus_pt, gamma, dtype_of(x)) * loss


def _class_weights(alpha, rank, axis, num_classes, dtype):
    """`alpha` as a tensor broadcasting along the class axis (or None)."""
    if alpha is None:
        return None
    if not isinstance(alpha, list):
        return alpha
    if num_classes is not None and len(alpha) != num_classes:
        raise ValueError(
            f"`alpha` has {len(alpha)} entries but the class axis {axis} "
            f"holds {num_classes} classes: give one weight per class."
        )
    shape = [1] * rank
    shape[axis] = len(alpha)
    return ops.reshape(ops.convert_to_tensor(alpha, dtype), shape)


def softmax_focal_cross_entropy(
    labels,
    logits,
    gamma=2.0,
    alpha=None,
    axis=-1,
    mask=None,
    from_logits=True,
    label_smoothing=0.0,
):
    """Per-example `-sum(alpha * (1 - p)**gamma * labels * log(p), axis)`.

    With `p = softmax(logits)` over `axis`, each class `c` contributes
    `alpha_c (1 - p_c)**gamma labels_c (-log p_c)`: the definition of
    `keras.losses.categorical_focal_crossentropy` (Lin et al., 2017), which
    reduces to `alpha (1 - p_t)**gamma (-log p_t)` for one-hot labels.

    Args:
        labels: class probabilities (one-hot or soft), same shape as
            `logits`.
        logits: unnormalised log-probabilities.
        gamma: focusing parameter, a float >= 0, or None (TF Addons: no
            modulating factor, as 0; 0 gives the plain
            cross-entropy).
        alpha: None (no weighting, the default), a float in [0, 1] weighting
            every class, or a list of floats in [0, 1], one per class.
            Keras's `CategoricalFocalCrossentropy` always weights, with
            `alpha=0.25` by default.
        axis: int, the class axis.
        mask: optional boolean tensor broadcastable to `logits`; `False`
            classes are removed from the softmax.
        from_logits: whether `logits` holds logits (default) or
            probabilities, renormalised over `axis` and read as in
            `softmax_cross_entropy`.
        label_smoothing: float in [0, 1): labels become
            `labels * (1 - label_smoothing) + label_smoothing / n`, `n`
            counting the unmasked, finite classes of the example.

    Returns:
        The loss per example (`axis` reduced), in the float dtype of `logits`.

    Numerical stability:
        `log(p)` is the log-softmax (shifted by the largest logit) and
        `log(1 - p_c)` is `log1p(-p_c)` where `p_c <= 1/2`, and for the one
        class above 1/2 the log-sum-exp of the other classes minus that of
        all, exact however close `p_c` is to 1. So the logits
        `[0, 30, -30]` with label 0 give 30.0 (7.5 with `alpha=0.25`; a clip
        of the probabilities at `1e-7` gives 4.03 with a zero gradient), and
        an easy example has a finite gradient for every `gamma >= 0`. A
        class that is masked or has logit `-inf` and a zero label
        contributes exactly 0 with a zero gradient; a nonzero label there
        gives `+inf`. An example with no class left gives 0. Half precision
        is computed in float32.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> labels = np.array([[1.0, 0.0, 0.0]], "float32")
        >>> logits = np.array([[0.0, 30.0, -30.0]], "float32")
        >>> np.asarray(ops.softmax_focal_cross_entropy(labels, logits, alpha=0.25))
        array([7.5], dtype=float32)
    """
    gamma = check_gamma(gamma)
    alpha = check_alpha(alpha, per_class=True)
    label_smoothing = check_label_smoothing(label_smoothing)
    warn_if_probabilities(logits, from_logits, "softmax_focal_cross_entropy")
    logits, out_dtype = softmax_scores(logits, from_logits, axis)
    labels, logits, axis, mask = softmax_with_labels(labels, logits, axis, mask)
    compute = dtype_of(logits)
    rank = len(static_shape(logits))
    alpha = _class_weights(alpha, rank, axis, static_shape(logits)[axis], compute)

    valid, z, total, _ = shifted_logits(logits, axis, mask)
    nonempty, log_total = ops.not_equal(total, 0), safe_log(total)
    if label_smoothing:
        n_valid = ops.sum(ops.cast(valid, compute), axis=axis, keepdims=True)
        spread = label_smoothing / maximum(n_valid, 1.0)
        labels = labels * (1.0 - label_smoothing) + ops.where(valid, spread, ops.zeros_like(labels))
    zeros = ops.zeros_like(logits)
    # A class above 1/2 is the unique largest (z = 0 there). With `d` the
    # log-sum-exp of the other classes minus its z, log(p) = -log1p(exp(d))
    # and log(1 - p) = d + log(p): exact however close p is to 1 (the
    # rounded total 1 + 1e-26 would give log(p) = 0 and log(1 - p) = -inf),
    # and so are their gradients.
    dominant = ops.logical_and(valid, ops.greater(z - log_total, _LOG_HALF))
    others = ops.logical_and(valid, ops.logical_not(dominant))
    # Their own shift: exact however far below the dominant class they lie.
    _, _, total_others, max_others = shifted_logits(z, axis, others)
    any_others = ops.not_equal(total_others, 0)
    log_total_others = safe_log(total_others)
    log_others = ops.where(
        any_others,
        log_total_others + max_others,
        inf_where(ops.logical_not(any_others), log_total_others, negative=True),
    )
    # z of the dominant class: 0, but it carries that logit's gradient.
    z_top = ops.sum(ops.where(dominant, z, zeros), axis=axis, keepdims=True)
    d = log_others - z_top
    log_p_top = -ops.log1p(ops.exp(d))
    has_top = ops.any(dominant, axis=axis, keepdims=True)
    log_total = ops.where(has_top, z_top - log_p_top, log_total)
    log_p = ops.where(dominant, log_p_top + zeros, ops.where(valid, z - log_total, zeros))
    terms = labels * -log_p
    if gamma:
        # log(1 - p): log1p(-p) for p <= 1/2; -inf for a class alone (p = 1).
        small = ops.where(others, log_p, ops.full_like(log_p, _LOG_HALF))
        log1m_p = ops.where(
            dominant,
            d + log_p_top + zeros,
            ops.where(valid, ops.log1p(-ops.exp(small)), zeros),
        )
        terms = _focal_factor(log1m_p, gamma) * terms
    if alpha is not None:
        terms = alpha * terms
    # Invalid classes: 0 with a zero label (or weight), +inf otherwise.
    weight = labels if alpha is None else labels * alpha
    impossible = inf_where(ops.logical_and(ops.not_equal(weight, 0), ops.logical_not(valid)), zeros)
    loss = ops.sum(ops.where(valid, terms, impossible), axis=axis)
    loss = ops.where(ops.squeeze(nonempty, axis=axis), loss, ops.zeros_like(loss))
    return ops.cast(loss, out_dtype)
