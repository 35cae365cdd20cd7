"""What several kernel families share: a leaf of `ops/_kernels/`.

It imports no other module of the package, so that any of them (the
`keras.ops` kernels, the torch sub-package, the JAX sharded head) may
import it without closing a circle through `dispatch.py`.
"""

from keras_stable.common.dtypes import tanh

# The power-of-two rescues of a sum of squares that left the range of its
# dtype, `(hi, lo, low)`: a slice whose plain `sum(x**2)` overflowed (or is
# NaN) is summed again as `sum((x * 2**-hi)**2)`, one below `2**low` (it
# underflowed, or lost bits to subnormal squares) as `sum((x * 2**lo)**2)`.
# Multiplying by a power of two is exact and ||x|| = ||c x|| / c. float32
# (bfloat16 and integers are computed in float32): every finite entry times
# 2**-90 squares to at most 2**76, so a slice of up to 2**40 entries cannot
# overflow, and a slice that did overflow has an entry above 2**44, whose
# rescued square is a normal number; every nonzero entry of a slice below
# 2**-100, times 2**98, squares to at least 2**-102 (a normal number) and
# the slice to at most 2**96 per entry. float64 likewise. float16 inputs
# (computed in float32) cannot leave the range: their squares lie in
# [2**-48, 2**32], and the rescue is skipped. Read by the norms
# (`norms.py`, the torch passes) and `pairwise.py`.
RESCUE = {"float32": (90, 98, -100), "float64": (600, 600, -900)}


def soft_cap(logits, cap):
    """`cap * tanh(logits / cap)` (attention's logits, the fused head's)."""
    return tanh(logits / cap) * cap
