"""The fused pairwise-distance kernel (private to `keras_stable.ops`).

A member of the fused kernels (`dispatch.fused`, the rescue table
`shared.RESCUE`): `pairwise_distance`'s value and its closed-form
gradient, both by explicit differences `a_i - b_j`, `CHUNK` features at a time, so that
neither pass holds an `[n, m, features]` tensor and neither goes through
the expansion `|a|^2 + |b|^2 - 2 a.b`, whose rounding error
`~eps * |a| * |b|` swamps the distance (and its gradient) of
near-coincident rows.
"""

from keras import ops

from keras_stable.common.dtypes import dtype_of
from keras_stable.common.dtypes import is_pos_inf
from keras_stable.common.dtypes import static_shape
from keras_stable.ops._kernels.dispatch import eager_layout
from keras_stable.ops._kernels.dispatch import fused
from keras_stable.ops._kernels.shared import RESCUE

# Features per step of both passes: each step holds one block of `n m
# CHUNK` differences (where the compiler does not fuse it away).
CHUNK = 16


def _blocked(x, blocks):
    """`x` of shape `[rows, features]` as `[blocks, rows, CHUNK]`, the
    features zero-padded (a zero feature adds nothing to a difference)."""
    pad = blocks * CHUNK - static_shape(x)[1]
    if pad:
        x = ops.pad(x, [[0, 0], [0, pad]])
    return ops.transpose(ops.reshape(x, (-1, blocks, CHUNK)), (1, 0, 2))


def _unblocked(x, features):
    """The inverse of `_blocked`: `[blocks, rows, CHUNK] -> [rows, features]`."""
    blocks = static_shape(x)[0]
    x = ops.reshape(ops.transpose(x, (1, 0, 2)), (-1, blocks * CHUNK))
    return x[:, :features]


def _diff(a, b, i):
    """Block `i` of the differences, `[n, m, CHUNK]`."""
    return ops.expand_dims(ops.take(a, i, axis=0), 1) - ops.expand_dims(ops.take(b, i, axis=0), 0)


def _over_blocks(blocks, step, state):
    """`state = step(i, state)` for each block `i` (a compiled loop)."""
    state = step(0, state)
    if blocks == 1:
        return state
    return ops.fori_loop(1, blocks, step, state)


def _sums(a, b, blocks, with_l1):
    """Per pair `(sum(d**2), sum(|d|))`, `d = a_i - b_j` (`sum(|d|)` only
    `with_l1`, else None): one pass over the blocks."""

    def step(i, state):
        d = _diff(a, b, i)
        sq = ops.sum(ops.square(d), axis=-1)
        if not with_l1:
            return (sq,) if state is None else (state[0] + sq,)
        l1 = ops.sum(ops.abs(d), axis=-1)
        return (sq, l1) if state is None else (state[0] + sq, state[1] + l1)

    sums = _over_blocks(blocks, step, None)
    return sums[0], (sums[1] if with_l1 else None)


def _rescued_sum(a, b, blocks, c, rescued):
    """Per pair `sum((c d)**2)` with the per-pair power of two `c`."""
    c = ops.expand_dims(c, -1)
    rescued = ops.expand_dims(rescued, -1)

    def step(i, total):
        d = _diff(a, b, i)
        # The select (not `(d * c)**2` alone) keeps XLA from rewriting the
        # square as `d**2 * c**2`, which overflows (see `_square_sum`).
        term = ops.sum(ops.square(ops.where(rescued, d * c, d)), axis=-1)
        return term if total is None else total + term

    return _over_blocks(blocks, step, None)


def _scales(s, l1, dtype):
    """`(c, r, rescued)` per pair: the power of two `c` that brings the sum
    of squares of `c d` into range, `r = 1 / c` (both exact), and where
    `c != 1`. A sum that overflowed (or an infinite entry: it stays inf)
    takes `2**-hi`; one below `2**low` (underflowed, or lost bits to
    subnormal squares) takes `2**lo`, unless the rows coincide
    (`sum(|d|) == 0`, exact: `|d|` never underflows)."""
    hi, lo, low = RESCUE[dtype]
    over = is_pos_inf(s)
    under = ops.logical_and(ops.less(s, 2.0**low), ops.greater(l1, 0))
    ones = ops.ones_like(s)
    c = ops.where(over, ones * 2.0**-hi, ops.where(under, ones * 2.0**lo, ones))
    r = ops.where(over, ones * 2.0**hi, ops.where(under, ones * 2.0**-lo, ones))
    return c, r, ops.logical_or(over, under)


def pairwise_kernel(a, b, squared, rescue=True):
    """`[n, m]` distances `||a_i - b_j||` (squared with `squared`) of
    float32/float64 rows `a` `[n, f]` and `b` `[m, f]` (`b=None`: `a`).

    The value: `s = sum(d**2)` over explicit differences `d = a_i - b_j`
    (one rounding each), summed again as `sum((c d)**2)` with an exact
    power of two `c` per pair for the pairs whose `s` left the range
    (`RESCUE`; a second pass that runs only when some pair needs it), so
    every distance is exact wherever it is representable, 0 exactly for
    coincident rows. `rescue=False` (float16 inputs, whose differences
    cannot leave the range) skips the check.

    The gradient, by explicit differences again (no expansion, no
    cancellation): `sum_j w_ij (a_i - b_j)` for `a` and `-sum_i w_ij (a_i -
    b_j)` for `b`, `w = g / ||a_i - b_j||` (0 for coincident rows and
    infinite distances), `w = 2 g` for squared distances. Memory
    `O(n m + (n + m) f)` in both passes.
    """
    same = b is None
    # The layout of the gradient's blocks (see the backward's `pass_over`).
    eager = eager_layout()
    features = static_shape(a)[1]
    blocks = -(-features // CHUNK)
    dtype = dtype_of(a)

    def sums(a, b):
        ab, bb = _blocked(a, blocks), (None if b is None else _blocked(b, blocks))
        bb = ab if bb is None else bb
        s, _ = _sums(ab, bb, blocks, with_l1=False)
        if not rescue:
            return s, None, None, None
        # Only a pair whose sum overflowed or fell below `2**low` (0 for
        # coincident rows too) may need the rescue, which tells them apart
        # with `sum(|d|)`: a second reduction over the differences, taken
        # (with the rescued sum) only when some pair is suspect - two
        # reductions in one pass cost XLA's CPU fusions 3x one. The diagonal
        # of `pairwise_distance(x)` is 0 and coincident by construction.
        _, _, low = RESCUE[dtype]
        suspect = ops.logical_or(is_pos_inf(s), ops.less(s, 2.0**low))
        if same:
            rows = ops.arange(ops.shape(s)[0])  # a batch size unknown when traced too
            diagonal = ops.equal(ops.expand_dims(rows, 1), ops.expand_dims(rows, 0))
            suspect = ops.logical_and(suspect, ops.logical_not(diagonal))
        ones = ops.ones_like(s)

        def rescued_sums():
            _, l1 = _sums(ab, bb, blocks, with_l1=True)
            c, r, rescued = _scales(s, l1, dtype)
            return _rescued_sum(ab, bb, blocks, c, rescued), c, r, rescued

        def plain_sums():
            return s, ones, ones, ops.zeros_like(suspect)

        s, c, r, rescued = ops.cond(ops.any(suspect), rescued_sums, plain_sums)
        return s, c, r, rescued

    def forward(*inputs):
        s, c, r, rescued = sums(inputs[0], None if same else inputs[1])
        if squared:
            out = s if r is None else (s * r) * r
        else:
            positive = ops.greater(s, 0)
            root = ops.sqrt(ops.where(positive, s, ops.ones_like(s)))
            # 0 for coincident rows, NaN stays NaN.
            out = ops.where(positive, root, ops.where(ops.isnan(s), s, ops.zeros_like(s)))
            out = out if r is None else out * r
        return out, (s, c, rescued)

    def backward(inputs, saved, output, upstream):
        s, c, rescued = saved
        a = inputs[0]
        b = a if same else inputs[1]
        ab, bb = _blocked(a, blocks), _blocked(b, blocks)
        g = ops.cast(upstream, a.dtype)
        if squared:
            w = 2.0 * g  # d ||d||**2 = 2 d
            scaled = None
        else:
            # d ||d|| = d / ||d|| = (c d) / sqrt(s): w = g / sqrt(s) times
            # `c d` (c = 1 but for rescued pairs). Coincident rows and
            # infinite distances have no derivative (NaN propagates).
            ok = ops.logical_and(ops.not_equal(s, 0), ops.logical_not(is_pos_inf(s)))
            root = ops.sqrt(ops.where(ok, s, ops.ones_like(s)))
            w = ops.where(ok, ops.where(ok, g, ops.zeros_like(g)) / root, ops.zeros_like(s))
            scaled = None if c is None else (c, rescued)

        def pass_over(scaled):
            # A block of weighted differences is laid out `[CHUNK, n, m]`
            # under XLA, like the weights, which its CPU fusions then read
            # in order (the `[n, m, CHUNK]` layout's reductions over its
            # leading axes were 4x slower); eager torch keeps `[n, m, CHUNK]`
            # (the other layout's strided blocks were 1.5x slower there).
            def step(i, grads):
                if eager:
                    d, at, sums = _diff(ab, bb, i), -1, (1, 0)
                else:
                    a_t = ops.transpose(ops.take(ab, i, axis=0))  # [CHUNK, n]
                    b_t = ops.transpose(ops.take(bb, i, axis=0))  # [CHUNK, m]
                    d, at, sums = ops.expand_dims(a_t, 2) - ops.expand_dims(b_t, 1), 0, (2, 1)
                if scaled is not None:
                    c, rescued = (ops.expand_dims(f, at) for f in scaled)
                    d = ops.where(rescued, d * c, d)
                wd = ops.expand_dims(w, at) * d
                ga, gb = ops.sum(wd, axis=sums[0]), -ops.sum(wd, axis=sums[1])
                if not eager:
                    ga, gb = ops.transpose(ga), ops.transpose(gb)
                return (
                    ops.slice_update(grads[0], (i, 0, 0), ops.expand_dims(ga, 0)),
                    ops.slice_update(grads[1], (i, 0, 0), ops.expand_dims(gb, 0)),
                )

            ga, gb = _over_blocks(blocks, step, (ops.zeros_like(ab), ops.zeros_like(bb)))
            # Row i of `x` is both a_i and b_i: its gradient is the sum (one
            # pass with `w + w^T` instead made XLA's CPU fusions 3x slower).
            return (ga + gb,) if same else (ga, gb)

        if scaled is None:
            grads = pass_over(None)
        else:
            grads = ops.cond(ops.any(rescued), lambda: pass_over(scaled), lambda: pass_over(None))
        return [_unblocked(gr, features) for gr in grads]

    inputs = (a,) if same else (a, b)
    # The backward reads the sums the forward kept, on PyTorch too (no
    # recomputation of the forward).
    return fused(forward, backward, *inputs, keep=True)
