"""Closed-form backward passes of the softmax family: `softmax`,
`log_softmax` and `logsumexp` (float32/float64; `axis` an int or a tuple).

Each kernel computes the value of its public op exactly as the portable
formulation of `keras_stable/ops/softmax.py` does (the `_reference_*`
functions), and its gradient from the closed form, from the output (or
`exp(x - max)` and its sum) alone: no mask or intermediate of autodiff's
`where`s is kept. On PyTorch, `dispatch.fused` runs the native pass of
`torch/passes.py` where it applies.
"""

from keras import ops

from keras_stable.common.dtypes import is_neg_inf
from keras_stable.common.dtypes import lowest_like
from keras_stable.ops._kernels.dispatch import fused
from keras_stable.ops._kernels.dispatch import native_pass


def keepdims_sum(x, axes):
    """`sum(x, axes)` keeping the reduced axes (the kernels' reduction)."""
    return ops.sum(x, axis=axes, keepdims=True)


def valid_entries(x, mask):
    valid = ops.logical_not(is_neg_inf(x))
    return valid if mask is None else ops.logical_and(valid, mask)


def shift(x, axis, mask):
    """The softmax family's shared forward, as `softmax.shifted_logits`:
    `(valid, z, e, total, nonempty, row_max)`.

    `valid`: unmasked and not `-inf`; `z = x - m` (0 where not valid under
    a mask) with `m = row_max` the largest valid entry (0 when it is not
    finite or the row has none; no gradient: the family is
    shift-invariant); `e = exp(z)`, 0 where not valid; `total = sum(e)`
    (keepdims), 0 exactly for a row with nothing left; `nonempty = total
    != 0` (NaN included). Under a mask no intermediate is infinite (a
    finite sentinel, not `-inf`, for the masked maximum): the NaN tools
    stay silent on valid inputs.
    """
    valid = valid_entries(x, mask)
    if mask is None:
        row_max = ops.max(x, axis=axis, keepdims=True)
        keep = ops.isfinite(row_max)
    else:
        row_max = ops.max(ops.where(valid, x, lowest_like(x)), axis=axis, keepdims=True)
        keep = ops.logical_and(ops.isfinite(row_max), ops.any(valid, axis=axis, keepdims=True))
    row_max = ops.stop_gradient(ops.where(keep, row_max, ops.zeros_like(row_max)))
    z = x - row_max
    if mask is None:
        e = ops.exp(z)
    else:
        # A masked entry (NaN or huge included) never reaches exp.
        z = ops.where(valid, z, ops.zeros_like(z))
        e = ops.where(valid, ops.exp(z), ops.zeros_like(z))
    total = keepdims_sum(e, axis)
    return valid, z, e, total, ops.not_equal(total, 0), row_max


def softmax_kernel(x, axis, mask=None):
    """`softmax(x, axis, mask)` of a float32/float64 `x` (`axis` an int or
    a tuple; `mask` boolean, broadcast to `x`, or None); gradient
    `p * (g - sum(g * p))`, 0 where `p == 0` (masked, `-inf`, fully masked
    rows) whatever the upstream gradient there."""

    def forward(x):
        _, _, e, total, nonempty, _ = shift(x, axis, mask)
        safe_total = ops.where(nonempty, total, ops.ones_like(total))
        # `exp(z) == 0`: masked, `-inf`, underflowed, or a row with nothing
        # left (x itself is not read again; a NaN total still gives NaN).
        return ops.where(ops.not_equal(e, 0), e / safe_total, ops.zeros_like(e)), ()

    def backward(inputs, saved, probs, upstream):
        live = ops.not_equal(probs, 0)  # NaN is live: it propagates
        zeros = ops.zeros_like(probs)
        g = ops.cast(upstream, probs.dtype)
        # The select keeps an infinite upstream gradient at p == 0 (after a
        # log, say) out of the sum and out of the product (0 * inf); a row
        # whose sum is NaN (a NaN logit) is NaN throughout.
        g = ops.where(live, g, zeros)
        return [probs * (g - keepdims_sum(g * probs, axis))]

    return fused(forward, backward, x, native=native_pass("softmax", axis, mask))


def log_softmax_kernel(x, axis, mask=None):
    """`log_softmax(x, axis, mask)`; gradient `g - softmax * sum(g)` over
    the valid entries, 0 on the `-inf` (masked, `-inf`, fully masked)
    ones."""

    def forward(x):
        valid, z, _, total, nonempty, _ = shift(x, axis, mask)
        log_total = ops.log(ops.where(nonempty, total, ops.ones_like(total)))
        # -inf on the invalid entries as log(0): no infinite constant (TF's
        # check_numerics), nothing infinite where every entry is valid.
        return ops.where(valid, z - log_total, ops.log(ops.cast(valid, z.dtype))), ()

    def backward(inputs, saved, out, upstream):
        live = ops.logical_not(is_neg_inf(out))  # NaN is live: it propagates
        zeros = ops.zeros_like(out)
        g = ops.where(live, ops.cast(upstream, out.dtype), zeros)
        # The dead entries get 0 - 0 * sum(g).
        probs = ops.where(live, ops.exp(ops.where(live, out, zeros)), zeros)
        return [g - probs * keepdims_sum(g, axis)]

    return fused(forward, backward, x, native=native_pass("log_softmax", axis, mask))


def logsumexp_kernel(x, axis, mask=None):
    """`logsumexp(x, axis, keepdims=True, mask)`; gradient `g * softmax`,
    0 for masked and `-inf` entries and for rows whose value is `-inf`
    (nothing left) or `+inf` (a `+inf` entry)."""

    def forward(x):
        _, _, e, total, nonempty, row_max = shift(x, axis, mask)
        log_total = ops.log(ops.where(nonempty, total, ops.ones_like(total)))
        # A +inf entry: the shift is 0 and the total inf, so the value is
        # +inf already (NaN next to it gives NaN).
        lse = ops.where(nonempty, log_total + row_max, ops.log(total))  # log(0): -inf
        # exp(z) is kept for the backward pass (0 on masked and -inf
        # entries): recomputing it there costs more than it saves on the
        # CPU, and exp(x - lse) would be off by the rounding of lse (the ulp
        # of the shift: 6e-5 at 1000 in float32).
        return lse, (e, total)

    def backward(inputs, saved, lse, upstream):
        e, total = saved
        row_ok = ops.logical_not(ops.isinf(lse))
        g = ops.cast(upstream, e.dtype)
        factor = ops.where(
            row_ok, g / ops.where(row_ok, total, ops.ones_like(total)), ops.zeros_like(lse)
        )
        # Rows without a derivative (-inf: nothing left; +inf: e is inf
        # there) are selected out whole.
        return [ops.where(row_ok, e * factor, ops.zeros_like(e))]

    return fused(forward, backward, x, native=native_pass("logsumexp", axis, mask))
