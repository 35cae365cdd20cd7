"""Closed-form backward passes of the Euclidean norms: `safe_norm`,
`l2_normalize` and `cosine_similarity` (float32/float64 inputs; float16 is
computed in float32 and skips the rescue).

Each kernel computes the value of its public op exactly as the portable
formulation does (the `_reference_*` functions of `keras_stable/ops/norms.py`,
the fallback and the reference of the tests), and its gradient from the
derivative's closed form, keeping only the input and a few scalars per
slice. The backward passes are written with `keras.ops` and the
double-where pattern, so they can be differentiated again (gradient
penalties). On PyTorch, `dispatch.fused` runs the native pass of
`torch/passes.py` of the same name where it applies.
"""

from keras import ops

from keras_stable.common.dtypes import dtype_of
from keras_stable.common.dtypes import is_pos_inf
from keras_stable.ops._kernels.dispatch import fused
from keras_stable.ops._kernels.dispatch import native_pass
from keras_stable.ops._kernels.shared import RESCUE


def _sum(x, axes):
    return ops.sum(x, axis=axes, keepdims=True)


def _square_sum(x, axes, rescue):
    """`(c, s)`: per slice (keepdims), a power of two `c` (`None` for 1) and
    `s = sum((c x)**2)`, in range wherever the norm `sqrt(s) / c` is
    representable. An infinite entry gives `s = inf`, NaN gives NaN (also
    next to an infinite entry).

    Two reductions at most: the plain sum, then the rescued sum with its
    scale per slice (1 where the plain sum was in range: the same sum).
    """
    s = _sum(ops.square(x), axes)
    if not rescue:
        return None, s
    hi, lo, low = RESCUE[dtype_of(x)]
    low = 2.0**low
    in_range = ops.logical_and(ops.greater_equal(s, low), ops.logical_not(is_pos_inf(s)))
    # Overflow, an infinite entry or NaN: scale down (exactly 0 more
    # overflows, and `inf` stays `inf`); underflow: scale up.
    c = ops.where(
        in_range,
        ops.ones_like(s),
        ops.where(ops.less(s, low), ops.full_like(s, 2.0**lo), ops.full_like(s, 2.0**-hi)),
    )
    # The select keeps `x` itself where the plain sum was in range and is
    # not an extra pass (it fuses into the reduction). It also stops XLA's
    # algebraic simplifier from rewriting `(x * c)**2` as `x**2 * c**2`
    # (which overflows: inf * 0) when `x` is a compile-time constant.
    return c, _sum(ops.square(ops.where(in_range, x, x * c)), axes)


def _times(x, c, factor, k):
    """`(x * c) * factor`, for a per-slice power of two `c` (`None`: 1) and
    a per-slice `factor`, as `(x * (c / 2**k)) * (factor * 2**k)`.

    `x * c` is exact and in range, so the product is accurate wherever it
    is representable (`factor = 1 / ||c x||` gives the unit vector even
    where `1 / ||x||` overflows). The power `k` differs at each call site
    so that no per-slice tensor is broadcast in two loops: XLA shares such a
    broadcast and writes it to memory, a full pass over `x` on the CPU.
    """
    scale = 2.0**-k if c is None else c * 2.0**-k
    return (x * scale) * (factor * 2.0**k)


def _inverse_norm(c, inv):
    """`1 / ||x|| = c / ||c x||` per slice (0 where `inv` is). It overflows
    where ||x|| < 2**-128, but only where the derivative it scales does."""
    return inv if c is None else inv * c


def _norm_parts(x, axes, rescue):
    """`(c, s, nonzero, ok, root, inv)` per slice: `ok` marks the slices
    with a derivative (not the zero vector, no infinite entry; NaN
    included, so that it propagates), `root = sqrt(s)` (1 where `s == 0`)
    and `inv = 1 / root` where `ok`, else 0."""
    c, s = _square_sum(x, axes, rescue)
    nonzero = ops.not_equal(s, 0)
    ok = ops.logical_and(nonzero, ops.logical_not(is_pos_inf(s)))
    root = ops.sqrt(ops.where(nonzero, s, ops.ones_like(s)))
    inv = ops.where(ok, 1.0 / ops.where(ok, root, ops.ones_like(root)), ops.zeros_like(s))
    return c, s, nonzero, ok, root, inv


def norm_kernel(x, axes, rescue=True):
    """Euclidean norm of a float32/float64 `x` over the non-empty tuple
    `axes`, keepdims: `safe_norm`'s value; gradient `g * x / ||x||`, 0 at
    the zero vector and for a slice with an infinite entry.

    `rescue=False` (float16 inputs) skips the overflow/underflow rescue.
    """

    def forward(x):
        c, s, nonzero, ok, root, inv = _norm_parts(x, axes, rescue)
        norm = ops.where(nonzero, root if c is None else root / c, ops.zeros_like(s))
        return norm, (c, ok, inv)

    def backward(inputs, saved, output, upstream):
        (x,) = inputs
        c, ok, inv = saved
        g = ops.where(ok, ops.cast(upstream, x.dtype), ops.zeros_like(inv))
        return [ops.where(ok, _times(x, c, g * inv, 1), ops.zeros_like(x))]

    return fused(forward, backward, x, native=native_pass("norm", axes, rescue))


def l2_normalize_kernel(x, axes, rescue=True):
    """`x / ||x||` over the non-empty tuple `axes` (float32/float64):
    `l2_normalize`'s value (exact also where ||x|| itself overflows);
    gradient `(g - u * sum(g * u)) / ||x||`, 0 at the zero vector and for a
    slice with an infinite entry (whose value is NaN at that entry, 0
    elsewhere, as `x / inf`)."""

    def forward(x):
        c, _, _, ok, _, inv = _norm_parts(x, axes, rescue)
        return _times(x, c, inv, 1), (c, ok, inv)

    def backward(inputs, saved, output, upstream):
        (x,) = inputs
        c, ok, inv = saved
        g = ops.cast(upstream, x.dtype)
        # dx = (g - u * (g . u)) / ||x||, with u recomputed from x (|u| <= 1)
        # rather than kept: the backward then needs nothing but x. A slice
        # without a derivative (zero vector, infinite entry) is selected
        # out whole, NaN or infinite upstream gradients there included.
        u = _times(x, c, inv, 2)
        dot = _sum(g * u, axes)
        return [ops.where(ok, (g - u * dot) * _inverse_norm(c, inv), ops.zeros_like(x))]

    return fused(forward, backward, x, native=native_pass("l2_normalize", axes, rescue))


def cosine_kernel(x1, x2, axis, rescue=True):
    """`sum(u1 * u2, axis)` clipped to [-1, 1] (keepdims), `u = x / ||x||`
    (0 for the zero vector), for float32/float64 `x1`, `x2` of one shape:
    `cosine_similarity`'s value. Gradient `g * (u2 - cos * u1) / ||x1||`
    for `x1` (and symmetrically), 0 for a zero vector, a vector with an
    infinite entry, and where round-off put the cosine outside [-1, 1] and
    the clip held it."""
    axes = (axis,)

    def forward(x1, x2):
        c1, _, _, ok1, _, inv1 = _norm_parts(x1, axes, rescue)
        c2, _, _, ok2, _, inv2 = _norm_parts(x2, axes, rescue)
        # The dot product of the unit vectors: nothing overflows or
        # underflows where the cosine is defined. An infinite entry gives
        # NaN (inf * 0), as in the portable formulation.
        raw = _sum(_times(x1, c1, inv1, 1) * _times(x2, c2, inv2, 1), axes)
        cos = ops.clip(raw, -1.0, 1.0)
        # NaN passes (as the clip's gradient does).
        unclipped = ops.logical_not(ops.logical_or(ops.greater(raw, 1.0), ops.less(raw, -1.0)))
        return cos, (c1, ok1, inv1, c2, ok2, inv2, unclipped)

    def backward(inputs, saved, cos, upstream):
        x1, x2 = inputs
        c1, ok1, inv1, c2, ok2, inv2, unclipped = saved
        g = ops.where(unclipped, ops.cast(upstream, x1.dtype), ops.zeros_like(cos))
        # d cos / d x1 = (u2 - cos * u1) / ||x1||. An infinite entry in x2
        # makes u2 NaN there (inf * 0) and the gradient of x1 NaN, as cos.
        g1 = ops.where(ok1, g * _inverse_norm(c1, inv1), ops.zeros_like(g))
        g2 = ops.where(ok2, g * _inverse_norm(c2, inv2), ops.zeros_like(g))
        d1 = _times(x2, c2, inv2 * g1, 2) - _times(x1, c1, inv1 * (g1 * cos), 2)
        d2 = _times(x1, c1, inv1 * g2, 3) - _times(x2, c2, inv2 * (g2 * cos), 3)
        return [
            ops.where(ok1, d1, ops.zeros_like(x1)),
            ops.where(ok2, d2, ops.zeros_like(x2)),
        ]

    return fused(forward, backward, x1, x2, native=native_pass("cosine", axis, rescue))
