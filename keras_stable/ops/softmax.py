"""Masked, overflow-free logsumexp, softmax and log-softmax."""

from keras import ops

from keras_stable.common.checks import check_axis
from keras_stable.common.checks import prepare_mask
from keras_stable.common.dtypes import inf_where
from keras_stable.common.dtypes import is_neg_inf
from keras_stable.common.dtypes import is_pos_inf
from keras_stable.common.dtypes import lowest_like
from keras_stable.common.dtypes import static_shape
from keras_stable.common.dtypes import to_compute
from keras_stable.ops import _kernels
from keras_stable.ops.logarithms import safe_log


def shifted_logits(x, axis, mask):
    """The shared core of the softmax family.

    Returns `(valid, z, total, row_max)` for a float tensor `x`: `valid`
    marks the entries that take part (unmasked, not `-inf`), `z = x - max`
    on valid entries and a finite sentinel elsewhere (the dtype's lowest
    value, whose `exp` is 0; `-inf` where `x` is `-inf` and there is no
    mask), `total = sum(exp(z))` (keepdims), which is 0 exactly for a row
    with nothing left, and the (finite, gradient-free) shift `row_max`.
    `axis` is a non-negative int or a tuple of them (all reduced together);
    it must not be empty.

    Only `where` (linear in its selected branch) touches masked entries, so a
    NaN or huge value under the mask never reaches `exp` or `log` and cannot
    leak a NaN into the gradient. The max carries no gradient: logsumexp is
    shift-invariant, so holding it constant is exact. No infinite constant:
    on finite inputs nothing here is infinite (the NaN tools stay silent).
    """
    # The entries that take part: unmasked and not -inf.
    valid = ops.logical_not(is_neg_inf(x))
    if mask is not None:
        valid = ops.logical_and(valid, mask)
    if mask is None:
        # Without a mask, `where(valid, x, lowest)` only differs from `x`
        # at `-inf` entries, where `x - m` is already `-inf` (`m` is made
        # finite), so both selects are dropped: less work under XLA. The
        # gradient reaching a `-inf` entry through `exp(z) = 0` is 0, and
        # every caller selects its output with `valid`.
        row_max = ops.max(x, axis=axis, keepdims=True)
    else:
        lowest = lowest_like(x)
        row_max = ops.max(ops.where(valid, x, lowest), axis=axis, keepdims=True)
    row_max = ops.where(ops.isfinite(row_max), row_max, ops.zeros_like(row_max))
    row_max = ops.stop_gradient(row_max)
    if mask is None:
        z = x - row_max
    else:
        z = ops.where(valid, x - row_max, lowest)
    total = ops.sum(ops.exp(z), axis=axis, keepdims=True)
    return valid, z, total, row_max


def _prepare(x, axis, mask):
    """Returns `(x, out_dtype, axis, mask, added)`.

    `axis` comes back as an int (one axis, as before) or a sorted tuple of
    ints. Reducing over no axis at all (a 0-d input, or `axis=()`) puts
    each entry in a group of its own: a size-1 axis is appended to stand
    for it (`added=True`; the caller drops it again), because an empty
    tuple means "every axis" to some backends' reductions (torch).
    """
    x, out_dtype = to_compute(x)
    axes = check_axis(axis, len(static_shape(x)), multiple=True)
    mask = prepare_mask(mask, x)
    added = not axes
    if added:
        x = ops.expand_dims(x, -1)
        if mask is not None:
            mask = ops.expand_dims(mask, -1)
        axes = (len(static_shape(x)) - 1,)
    return x, out_dtype, axes[0] if len(axes) == 1 else axes, mask, added


def logsumexp(x, axis=None, keepdims=False, mask=None):
    """`log(sum(exp(x), axis))` over the unmasked entries, without overflow.

    The signature of `keras.ops.logsumexp`, plus `mask`.

    Args:
        x: tensor of logits.
        axis: `None` (the default: all axes, as `keras.ops.logsumexp`), an
            int, or a tuple/list of ints reduced together.
        keepdims: keep the reduced axes with size 1.
        mask: optional boolean tensor broadcastable to `x`; `False` entries are
            ignored (as if they were `-inf`).

    Returns:
        The reduced tensor, in the (float) dtype of `x`.

    Numerical stability:
        Uses `logsumexp(x) = m + log(sum(exp(x - m)))` with `m` the largest
        valid entry, so nothing overflows for any finite input (float16
        logits above 11 included: half precision is computed in float32).
        The gradient is the softmax over the valid entries; masked and `-inf`
        entries get exactly 0, even when a masked entry holds NaN. A row with
        nothing left (all masked or all `-inf`) gives `-inf` and a zero
        gradient, where `keras.ops.logsumexp` gives a NaN gradient. A `+inf`
        entry gives `+inf` with a zero gradient; NaN in a valid entry gives
        NaN (also next to a `+inf` entry). The gradient is a fused kernel
        (`g * softmax`, kept from the forward pass's shift and sum).

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> x = np.array([[1000.0, 1000.0], [-np.inf, -np.inf]], "float32")
        >>> np.asarray(ops.logsumexp(x, axis=-1))
        array([1000.6932,      -inf], dtype=float32)
        >>> float(ops.logsumexp(x))  # axis=None: over all entries
        1000.693
        >>> np.asarray(ops.logsumexp(np.zeros((2, 3, 4), "float32"), axis=(0, 2)))
        array([2.0794415, 2.0794415, 2.0794415], dtype=float32)
    """
    x, out_dtype, axis, mask, added = _prepare(x, axis, mask)
    if _kernels.kernels_enabled():
        out = _kernels.logsumexp_kernel(x, axis, mask)
    else:
        out = _reference_logsumexp(x, axis, mask)
    if added or not keepdims:
        out = ops.squeeze(out, axis=axis)
    return ops.cast(out, out_dtype)


def _reference_logsumexp(x, axis, mask):
    """The portable `logsumexp` (keepdims), plain autodiff: the fallback
    and the reference of `_kernels.logsumexp_kernel`."""
    valid, _, total, row_max = shifted_logits(x, axis, mask)
    nonempty, log_total = ops.not_equal(total, 0), safe_log(total)
    out = ops.where(
        nonempty, log_total + row_max, inf_where(ops.logical_not(nonempty), total, negative=True)
    )
    # A +inf logit: the value is +inf (and the gradient 0), unless NaN is
    # there too (NaN next to +inf gives NaN, as in the kernel).
    top = ops.logical_and(
        ops.any(ops.logical_and(valid, is_pos_inf(x)), axis=axis, keepdims=True),
        ops.logical_not(ops.isnan(out)),
    )
    out = ops.where(top, inf_where(top, out), out)
    return out


def softmax(x, axis=-1, mask=None):
    """`exp(x) / sum(exp(x), axis)` over the unmasked entries.

    The signature of `keras.ops.softmax`, plus `mask`.

    Args:
        x: tensor of logits.
        axis: int (default -1), a tuple/list of ints normalised over
            together (as `keras.ops.softmax`), or `None` (all axes).
        mask: optional boolean tensor broadcastable to `x`; `False` entries
            get probability 0.

    Returns:
        Probabilities of the shape and (float) dtype of `x`.

    Numerical stability:
        The largest valid logit is subtracted before `exp`, so logits of 1000
        (float32) or 12 (float16, computed in float32) do not overflow, and
        the row sum keeps its axis (no silent broadcast along the wrong
        axis). Masked and `-inf` entries get 0 and a zero gradient, NaN under
        the mask included. A row with nothing left (all masked or all `-inf`)
        gives all zeros and a zero gradient, where `keras.ops.softmax` gives
        NaN. The gradient is a fused kernel, `p * (g - sum(g * p))` from
        the output alone, with 0 wherever `p == 0` whatever the upstream
        gradient there (the infinite one of a `log` after the softmax
        included); a row with a NaN logit has a NaN gradient. Unlike
        `keras.ops.softmax`, a softmax over a size-1 axis does not warn.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> x = np.array([[1000.0, 999.0, 0.0], [-np.inf, -np.inf, -np.inf]], "float32")
        >>> np.round(np.asarray(ops.softmax(x)), 6)
        array([[0.731059, 0.268941, 0.      ],
               [0.      , 0.      , 0.      ]], dtype=float32)
        >>> p = np.array([[1.0, 2.0], [3.0, 4.0]], "float32") / 10
        >>> np.round(np.asarray(ops.softmax(np.log(p), axis=(0, 1))), 6)
        array([[0.1, 0.2],
               [0.3, 0.4]], dtype=float32)
    """
    x, out_dtype, axis, mask, added = _prepare(x, axis, mask)
    if _kernels.kernels_enabled():
        probs = _kernels.softmax_kernel(x, axis, mask)
    else:
        probs = _reference_softmax(x, axis, mask)
    if added:
        probs = ops.squeeze(probs, axis=-1)
    return ops.cast(probs, out_dtype)


def _reference_softmax(x, axis, mask):
    """The portable `softmax`, plain autodiff: the fallback and the
    reference of `_kernels.softmax_kernel`."""
    valid, z, total, _ = shifted_logits(x, axis, mask)
    nonempty = ops.not_equal(total, 0)
    safe_total = ops.where(nonempty, total, ops.ones_like(total))
    return ops.where(
        ops.logical_and(valid, nonempty),
        ops.exp(z) / safe_total,
        ops.zeros_like(z),
    )


def log_softmax(x, axis=-1, mask=None):
    """`x - logsumexp(x, axis)` over the unmasked entries.

    The signature of `keras.ops.log_softmax`, plus `mask`.

    Args:
        x: tensor of logits.
        axis: int (default -1), a tuple/list of ints normalised over
            together (as `keras.ops.log_softmax`), or `None` (all axes).
        mask: optional boolean tensor broadcastable to `x`.

    Returns:
        Log-probabilities of the shape and (float) dtype of `x`; masked and
        `-inf` entries are `-inf`.

    Numerical stability:
        Computed as `(x - m) - log(sum(exp(x - m)))` with `m` the largest valid
        logit: no `log` of an underflowed probability, no overflow (half
        precision is computed in float32). The finite entries get the
        gradient of the log-softmax over the remaining entries; masked and
        `-inf` entries give `-inf` with a zero gradient, NaN under the mask
        included. A row with nothing left gives all `-inf` and a zero
        gradient. The gradient is a fused kernel, `g - softmax * sum(g)`
        over the entries whose value is not `-inf`, from the output alone.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> x = np.array([0.0, 0.0, -np.inf], "float32")
        >>> np.asarray(ops.log_softmax(x))
        array([-0.6931472, -0.6931472,       -inf], dtype=float32)
        >>> np.asarray(ops.log_softmax(np.zeros((2, 2), "float32"), axis=None))
        array([[-1.3862944, -1.3862944],
               [-1.3862944, -1.3862944]], dtype=float32)
    """
    x, out_dtype, axis, mask, added = _prepare(x, axis, mask)
    if _kernels.kernels_enabled():
        out = _kernels.log_softmax_kernel(x, axis, mask)
    else:
        out = _reference_log_softmax(x, axis, mask)
    if added:
        out = ops.squeeze(out, axis=-1)
    return ops.cast(out, out_dtype)


def _reference_log_softmax(x, axis, mask):
    """The portable `log_softmax`, plain autodiff: the fallback and the
    reference of `_kernels.log_softmax_kernel`."""
    valid, z, total, _ = shifted_logits(x, axis, mask)
    log_total = safe_log(total)
    return ops.where(valid, z - log_total, inf_where(ops.logical_not(valid), z, negative=True))
