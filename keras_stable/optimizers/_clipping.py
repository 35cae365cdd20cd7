"""Gradient clipping that Keras's formulas give wherever they are finite,
and the float64 result (rounded once more) where they overflow.

Keras 3.15.1 computes `sum(g**2)` in the gradient's dtype: a finite entry
above ~1.8e19 in float32 (or 256 in float16) makes it `inf`, and then
`global_clipnorm` multiplies every gradient by `inf - inf = NaN` and
`clipnorm` divides by `inf` (a zero step). Here the plain sum is kept
wherever it is finite (so a finite Keras step is reproduced bit for bit),
and a sum that overflowed is taken again on the gradients times an exact
power of two, `||g|| = ||c g|| / c`: every finite float32 entry times
`2**-90` squares to at most `2**76`, so up to `2**40` entries cannot
overflow, and the largest entry of a sum that did overflow is above
`2**44`, so its rescued square is a normal number. The clipped gradient is
then `(g * c) * (clip / ||c g||)`: `g * c` is exact and the factor is a
normal number, so the result is within an ulp of the float64 one.

Half-precision gradients are computed in float32 (`float16` squares cannot
leave the float32 range; `bfloat16` ones can, and take the rescue).
"""

from keras import ops

from keras_stable.common.dtypes import dtype_of

# `c = 2**-_HI` for a rescued sum; `2**_HI` undoes it where no clip applies.
_HI = 90
_INF = float("inf")


def to_float32(g):
    """`g` in float32 when it is a half-precision gradient, else itself."""
    return ops.cast(g, "float32") if dtype_of(g) in ("float16", "bfloat16") else g


def _square_sum(g):
    return ops.sum(ops.square(g))


def _rescued_square_sum(g, c):
    return ops.sum(ops.square(g * c))


def clip_by_value(grads, clipvalue):
    """Keras's `clipvalue`: each entry into `[-clipvalue, clipvalue]`."""
    return [None if g is None else ops.clip(g, -clipvalue, clipvalue) for g in grads]


def clip_by_norm(grads, clipnorm):
    """Keras's `clipnorm`: each gradient scaled to a norm of at most
    `clipnorm`, with the rescue of a sum of squares that overflowed."""
    return [None if g is None else _clip_one(g, clipnorm) for g in grads]


def _clip_one(g, clipnorm):
    # Keras's `_clip_by_norm`, `(g * clipnorm) / max(||g||, clipnorm)`,
    # wherever the sum of squares is finite. Where it overflowed (finite
    # entries: the norm is above 2**64, far above any clip threshold) the
    # same expression takes `(g * 2**-90) / (||g * 2**-90|| / clipnorm)`:
    # the numerator is exact and the denominator a normal number, so no
    # factor underflows (XLA flushes subnormals to zero on the CPU).
    s = ops.sum(ops.square(g), keepdims=True)
    positive = s > 0
    root = ops.where(positive, ops.sqrt(ops.where(positive, s, ops.ones_like(s))), s)
    overflow = ops.equal(s, _INF)
    rescued_s = ops.sum(ops.square(g * 2.0**-_HI), keepdims=True)
    rescued_root = ops.sqrt(ops.where(overflow, rescued_s, ops.ones_like(rescued_s)))
    numerator = ops.where(overflow, 2.0**-_HI, clipnorm)
    denominator = ops.where(overflow, rescued_root / clipnorm, ops.maximum(root, clipnorm))
    return (g * ops.cast(numerator, dtype_of(g))) / denominator


def clip_by_global_norm(grads, global_clipnorm):
    """Keras's `global_clipnorm`: every gradient scaled by one factor so
    that their joint norm is at most `global_clipnorm`; a joint sum of
    squares that overflowed is taken again on the gradients times `2**-90`."""
    present = [g for g in grads if g is not None]
    # Keras's `global_norm` and scale where the sum is finite.
    s = ops.sum(ops.stack([ops.sum(ops.square(g)) for g in present]))
    norm = ops.sqrt(s)
    keras_factor = global_clipnorm * ops.minimum(1.0 / norm, 1.0 / global_clipnorm)
    overflow = ops.equal(s, _INF)
    rescued_s = ops.sum(ops.stack([ops.sum(ops.square(g * 2.0**-_HI)) for g in present]))
    rescued_root = ops.sqrt(ops.where(overflow, rescued_s, ops.ones_like(rescued_s)))
    # `(g * 2**-90) / (||g * 2**-90|| / clip)`: the numerator is exact and
    # the denominator a normal number (`clip / ||g||` itself can be
    # subnormal, which XLA flushes to zero on the CPU), and one division
    # rounds once where a reciprocal and a product would round twice.
    # (A norm below `clip` divides by `2**-90`: the gradient unchanged.)
    denominator = ops.maximum(rescued_root / global_clipnorm, 2.0**-_HI)
    return [
        None if g is None else ops.where(overflow, (g * 2.0**-_HI) / denominator, g * keras_factor)
        for g in grads
    ]
