"""Fused forward/backward passes (private to `keras_stable.ops`).

The one module where keras_stable writes gradients by hand: each function
here is a `keras.ops.custom_gradient` whose backward is the closed form of
the derivative, computed without keeping the intermediates that autodiff
would store. Every kernel is checked in the tests against the portable
`keras.ops` formulation (values and gradients), which stays the reference.

Two families live here: the fused linear cross-entropy (blocks of a large
vocabulary), and the closed-form backward passes of the norms and of the
softmax family, which keep only the input (or the output) and a few
per-slice scalars for the backward pass instead of the masks and
intermediates that autodiff would store for every `where`.
"""

import os

import keras
from keras import ops

from keras_stable.common.dtypes import dtype_of

# The one place where keras_stable imports a backend: the native kernels
# of PyTorch (the section at the end of this module).
torch = None
if keras.backend.backend() == "torch":
    import torch

_NEG_INF = float("-inf")


def _blocks(vocab, chunk_size):
    """`(full, rest)`: the number of whole blocks and the size of the last,
    partial one (0 when `chunk_size` divides `vocab`)."""
    return vocab // chunk_size, vocab % chunk_size


def _block_logits(hidden, kernel, bias, start, size):
    # One [tokens, size] block of float32 logits; `start` may be traced
    # (a dynamic slice inside `fori_loop`), `size` is static.
    dim = kernel.shape[0]
    logits = ops.matmul(hidden, ops.slice(kernel, (0, start), (dim, size)))
    return logits + ops.slice(bias, (start,), (size,))


def _for_each_block(vocab, chunk_size, body, state):
    """Runs `state = body(start, size, state)` over the vocabulary blocks.

    Whole blocks go through `keras.ops.fori_loop` (a compiled loop, so XLA
    keeps one block alive at a time instead of scheduling them all at once);
    a partial last block runs once more with its own static size.
    """
    full, rest = _blocks(vocab, chunk_size)

    def loop_body(i, state):
        return body(i * chunk_size, chunk_size, state)

    if full:
        state = ops.fori_loop(0, full, loop_body, state)
    if rest:
        state = body(full * chunk_size, rest, state)
    return state


def _online_logsumexp(hidden, kernel, bias, chunk_size):
    """`logsumexp(hidden @ kernel + bias, axis=-1)` one vocabulary block at a
    time (running max and rescaled sum), and whether each row has a finite
    entry. A row with nothing finite gives `-inf`, never NaN."""
    tokens = ops.shape(hidden)[0]

    def body(start, size, state):
        running_max, total = state
        logits = _block_logits(hidden, kernel, bias, start, size)
        new_max = ops.maximum(running_max, ops.max(logits, axis=-1))
        # All -inf so far: shift by 0 (exp(-inf - 0) = 0, no -inf - -inf).
        shift = ops.where(ops.isfinite(new_max), new_max, ops.zeros_like(new_max))
        total = total * ops.exp(running_max - shift) + ops.sum(
            ops.exp(logits - shift[:, None]), axis=-1
        )
        return new_max, total

    init = (ops.full((tokens,), _NEG_INF, "float32"), ops.zeros((tokens,), "float32"))
    running_max, total = _for_each_block(kernel.shape[1], chunk_size, body, init)
    shift = ops.where(ops.isfinite(running_max), running_max, ops.zeros_like(running_max))
    nonempty = ops.greater(total, 0)
    safe_total = ops.where(nonempty, total, ops.ones_like(total))
    lse = ops.where(nonempty, shift + ops.log(safe_total), ops.full_like(total, _NEG_INF))
    return lse, nonempty


def linear_cross_entropy_kernel(hidden, kernel, bias, labels, counted, chunk_size):
    """Per-token `logsumexp(h @ W + b) - (h @ W + b)[label]`, fused.

    Args:
        hidden: `[tokens, dim]`, float32.
        kernel: `[dim, vocab]`, float32.
        bias: `[vocab]` float32 (zeros when the head has none).
        labels: `[tokens]` int32, in range wherever `counted`.
        counted: `[tokens]` bool, the tokens that take part (others give 0
            and a zero gradient).
        chunk_size: static int, the vocabulary columns per block.

    Returns:
        The per-token loss `[tokens]`, float32. Neither pass holds more than
        one `[tokens, chunk_size]` block of logits: the backward recomputes
        each block and turns it into `softmax - onehot` at once.
    """
    vocab = kernel.shape[1]

    @ops.custom_gradient
    def fused(hidden, kernel, bias):
        lse, nonempty = _online_logsumexp(hidden, kernel, bias, chunk_size)
        # The label's logit without the [tokens, vocab] block: gather the
        # label's column of the kernel ([tokens, dim]).
        picked = ops.sum(hidden * ops.transpose(ops.take(kernel, labels, axis=1)), axis=-1)
        picked = picked + ops.take(bias, labels)
        take_part = ops.logical_and(counted, nonempty)
        loss = ops.where(take_part, lse - picked, ops.zeros_like(lse))

        def grad(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            g = ops.where(take_part, ops.cast(upstream, "float32"), ops.zeros_like(lse))
            safe_lse = ops.where(take_part, lse, ops.zeros_like(lse))

            def body(start, size, state):
                d_hidden, d_kernel, d_bias = state
                logits = _block_logits(hidden, kernel, bias, start, size)
                # exp may overflow on rows that do not take part; the where
                # keeps those rows out (their upstream is 0 anyway).
                probs = ops.where(
                    take_part[:, None],
                    ops.exp(logits - safe_lse[:, None]),
                    ops.zeros_like(logits),
                )
                classes = start + ops.arange(size, dtype="int32")
                onehot = ops.cast(ops.equal(labels[:, None], classes[None, :]), "float32")
                d_logits = g[:, None] * (probs - onehot)
                block = ops.slice(kernel, (0, start), (kernel.shape[0], size))
                d_hidden = d_hidden + ops.matmul(d_logits, ops.transpose(block))
                d_kernel = ops.slice_update(
                    d_kernel, (0, start), ops.matmul(ops.transpose(hidden), d_logits)
                )
                d_bias = ops.slice_update(d_bias, (start,), ops.sum(d_logits, axis=0))
                return d_hidden, d_kernel, d_bias

            init = (ops.zeros_like(hidden), ops.zeros_like(kernel), ops.zeros_like(bias))
            return _for_each_block(vocab, chunk_size, body, init)

        return loss, grad

    return fused(hidden, kernel, bias)


# --------------------------------------------------------------------------
# Closed-form backward passes: the norms and the softmax family.
#
# Each kernel below computes the value of its public op exactly as the
# portable formulation does (kept in `norms.py` / `softmax.py` as the
# `_reference_*` functions, the fallback and the reference of the tests),
# and its gradient from the derivative's closed form: the backward keeps
# the input (or the output) and a few scalars per slice, not the masks and
# intermediates that autodiff stores for every `where`. Each backward is
# itself written with `keras.ops` and the double-where pattern, so it can
# be differentiated again (gradient penalties): on TensorFlow and JAX the
# values it closes over are differentiable (taped by TensorFlow, residuals
# of JAX's `custom_vjp`); PyTorch runs the forward pass without autograd,
# so there the backward recomputes them from the inputs it saved.

_INF = float("inf")

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
# [2**-48, 2**32], and the rescue is skipped.
_RESCUE = {"float32": (90, 98, -100), "float64": (600, 600, -900)}


def kernels_enabled():
    """Whether the public ops use the kernels of this module.

    Setting the environment variable `KERAS_STABLE_PORTABLE` (to anything
    but `""` or `"0"`) makes them run their portable `keras.ops`
    formulation with plain autodiff instead: for A/B measurements, and for
    JAX's forward-mode differentiation (`jax.jvp`, `jax.jacfwd`,
    `jax.hessian`), which `keras.ops.custom_gradient` (a `jax.custom_vjp`)
    does not support. Read at each call (at trace time when compiled).
    """
    return os.environ.get("KERAS_STABLE_PORTABLE", "0") in ("", "0")


def _fused(forward, backward, *inputs, native=None):
    """`forward(*inputs)[0]`, with the gradient given by `backward`.

    `forward(*inputs) -> (output, saved)`; `backward(inputs, saved, output,
    upstream) -> [gradient for each input]`. Only tensors go in `inputs`:
    static arguments and masks are closed over. On PyTorch, `native` (a
    `(forward, backward)` pair of the torch section below) runs instead
    where it applies.
    """
    if keras.backend.backend() == "torch":
        return _torch_fused(forward, backward, native, inputs)

    @ops.custom_gradient
    def fused(*inputs):
        output, saved = forward(*inputs)

        def grad(upstream):
            grads = backward(inputs, saved, output, upstream)
            return grads[0] if len(grads) == 1 else tuple(grads)

        return output, grad

    return fused(*inputs)


def _full(like, value):
    return ops.full_like(like, value)


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
    hi, lo, low = _RESCUE[dtype_of(x)]
    low = 2.0**low
    in_range = ops.logical_and(ops.greater_equal(s, low), ops.less(s, _INF))
    # Overflow, an infinite entry or NaN: scale down (exactly 0 more
    # overflows, and `inf` stays `inf`); underflow: scale up.
    c = ops.where(
        in_range,
        ops.ones_like(s),
        ops.where(ops.less(s, low), _full(s, 2.0**lo), _full(s, 2.0**-hi)),
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
    ok = ops.logical_and(nonzero, ops.not_equal(s, _INF))
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

    return _fused(forward, backward, x, native=_torch_norm(axes, rescue))


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

    return _fused(forward, backward, x, native=_torch_l2_normalize(axes, rescue))


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

    return _fused(forward, backward, x1, x2, native=_torch_cosine(axis, rescue))


def _valid(x, mask):
    valid = ops.not_equal(x, -_INF)
    return valid if mask is None else ops.logical_and(valid, mask)


def _shift(x, axis, mask):
    """The softmax family's shared forward, as `softmax.shifted_logits`:
    `(valid, z, total, nonempty, row_max)`.

    `valid`: unmasked and not `-inf`; `z = x - m` (`-inf` where not valid
    under a mask) with `m = row_max` the largest valid entry (0 when it is
    not finite; no gradient: the family is shift-invariant);
    `total = sum(exp(z))` (keepdims), 0 exactly for a row with nothing
    left; `nonempty = total != 0` (NaN included).
    """
    valid = _valid(x, mask)
    if mask is None:
        row_max = ops.max(x, axis=axis, keepdims=True)
    else:
        row_max = ops.max(ops.where(valid, x, _full(x, -_INF)), axis=axis, keepdims=True)
    row_max = ops.where(ops.isfinite(row_max), row_max, ops.zeros_like(row_max))
    row_max = ops.stop_gradient(row_max)
    z = x - row_max
    if mask is not None:
        # A masked entry (NaN or huge included) never reaches exp.
        z = ops.where(valid, z, _full(z, -_INF))
    total = _sum(ops.exp(z), axis)
    return valid, z, total, ops.not_equal(total, 0), row_max


def softmax_kernel(x, axis, mask=None):
    """`softmax(x, axis, mask)` of a float32/float64 `x` (`axis` an int or
    a tuple; `mask` boolean, broadcast to `x`, or None); gradient
    `p * (g - sum(g * p))`, 0 where `p == 0` (masked, `-inf`, fully masked
    rows) whatever the upstream gradient there."""

    def forward(x):
        _, z, total, nonempty, _ = _shift(x, axis, mask)
        e = ops.exp(z)
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
        return [probs * (g - _sum(g * probs, axis))]

    return _fused(forward, backward, x, native=_torch_softmax(axis, mask))


def log_softmax_kernel(x, axis, mask=None):
    """`log_softmax(x, axis, mask)`; gradient `g - softmax * sum(g)` over
    the valid entries, 0 on the `-inf` (masked, `-inf`, fully masked)
    ones."""

    def forward(x):
        valid, z, total, nonempty, _ = _shift(x, axis, mask)
        log_total = ops.log(ops.where(nonempty, total, ops.ones_like(total)))
        return ops.where(valid, z - log_total, _full(z, -_INF)), ()

    def backward(inputs, saved, out, upstream):
        live = ops.not_equal(out, -_INF)  # NaN is live: it propagates
        zeros = ops.zeros_like(out)
        g = ops.where(live, ops.cast(upstream, out.dtype), zeros)
        # exp(-inf) = 0 on the dead entries: they get 0 - 0 * sum(g).
        return [g - ops.exp(out) * _sum(g, axis)]

    return _fused(forward, backward, x, native=_torch_log_softmax(axis, mask))


def logsumexp_kernel(x, axis, mask=None):
    """`logsumexp(x, axis, keepdims=True, mask)`; gradient `g * softmax`,
    0 for masked and `-inf` entries and for rows whose value is `-inf`
    (nothing left) or `+inf` (a `+inf` entry)."""

    def forward(x):
        _, z, total, nonempty, row_max = _shift(x, axis, mask)
        log_total = ops.log(ops.where(nonempty, total, ops.ones_like(total)))
        # A +inf entry: the shift is 0 and the total inf, so the value is
        # +inf already (NaN next to it gives NaN).
        lse = ops.where(nonempty, log_total + row_max, _full(total, -_INF))
        # exp(z) is kept for the backward pass (0 on masked and -inf
        # entries): recomputing it there costs more than it saves on the
        # CPU, and exp(x - lse) would be off by the rounding of lse (the ulp
        # of the shift: 6e-5 at 1000 in float32).
        return lse, (ops.exp(z), total)

    def backward(inputs, saved, lse, upstream):
        e, total = saved
        row_ok = ops.logical_and(ops.not_equal(lse, _INF), ops.not_equal(lse, -_INF))
        g = ops.cast(upstream, e.dtype)
        factor = ops.where(
            row_ok, g / ops.where(row_ok, total, ops.ones_like(total)), ops.zeros_like(lse)
        )
        # Rows without a derivative (-inf: nothing left; +inf: e is inf
        # there) are selected out whole.
        return [ops.where(row_ok, e * factor, ops.zeros_like(e))]

    return _fused(forward, backward, x, native=_torch_logsumexp(axis, mask))


def softmax_cross_entropy_kernel(labels, x, axis, mask=None):
    """Per-example `-sum(labels * log_softmax(x, axis, mask), axis)` (`axis`
    an int, reduced) of float32/float64 `labels` and `x` of one shape: the
    value of `softmax_cross_entropy` (0 with a zero label on a dead entry -
    masked or `-inf` -, `+inf` with a nonzero one, 0 for a row with nothing
    left). Gradients, over the live entries (0 on dead ones and for rows
    with nothing left): `g * (p * sum(live labels) - labels)` for `x`, as
    `tf.nn.softmax_cross_entropy_with_logits`, and `-g * log_softmax(x)`
    for the labels.

    Nothing of the size of `x` is kept for the backward pass, which
    recomputes `exp(x - max)` (one read of `x`) rather than reading a
    stored copy (a write and a read): the memory of the built-ins.
    """

    def forward(labels, x):
        valid, z, total, nonempty, row_max = _shift(x, axis, mask)
        log_total = ops.log(ops.where(nonempty, total, ops.ones_like(total)))
        # labels * -log p on the live entries; on a dead one 0 for a zero
        # label, +inf (the true value) for a nonzero one - never 0 * inf.
        dead = ops.where(ops.equal(labels, 0), ops.zeros_like(x), _full(x, _INF))
        loss = _sum(ops.where(valid, labels * (log_total - z), dead), axis)
        loss = ops.where(nonempty, loss, ops.zeros_like(loss))
        return ops.squeeze(loss, axis), (total, row_max, log_total)

    def backward(inputs, saved, loss, upstream):
        labels, x = inputs
        total, row_max, log_total = saved
        valid = _valid(x, mask)
        nonempty = ops.not_equal(total, 0)
        g = ops.expand_dims(ops.cast(upstream, x.dtype), axis)
        # Rows with nothing left are selected out whole, an infinite or NaN
        # upstream gradient there included.
        g = ops.where(nonempty, g, ops.zeros_like(g))
        zeros = ops.zeros_like(x)
        live_labels = ops.where(valid, labels, zeros)
        factor = _sum(live_labels, axis) * (g / ops.where(nonempty, total, ops.ones_like(total)))
        z = x - row_max
        d_x = ops.where(valid, ops.exp(z) * factor - g * labels, zeros)
        d_labels = ops.where(valid, g * (log_total - z), zeros)
        return [d_labels, d_x]

    return _fused(forward, backward, labels, x, native=_torch_softmax_cross_entropy(axis, mask))


# --------------------------------------------------------------------------
# PyTorch: native kernels.
#
# Eager PyTorch runs each `keras.ops` call as a pass over memory, and
# `keras.ops.custom_gradient` runs the forward pass without autograd, so
# the kernels above would recompute it in the backward pass. Here each
# kernel is a `torch.autograd.Function` written with torch's own fused
# ops (`vector_norm`, `softmax`, `log_softmax`, in-place updates of fresh
# temporaries), and the rare cases take Python branches, which cost a
# host sync and nothing else in eager mode: the overflow/underflow rescue
# of a norm only for the slices that left the range, the general softmax
# only for slices without a finite maximum. A native pass returns None
# where it does not apply; the `keras.ops` kernel then runs instead (in
# the backward pass: recomputing its forward pass from the saved inputs).
# A backward pass that autograd differentiates again (`create_graph=True`,
# the only case where grad mode is on inside it) also runs the `keras.ops`
# kernel, with autograd: second order works as on the other backends.
#
# Each native pass is `(forward, backward)`: `forward(*inputs) -> None or
# (output, saved)`, `saved` a tuple of tensors and Python values;
# `backward(inputs, saved, upstream, needs) -> None or [gradients]`,
# `needs[i]` whether input `i` wants one (None for those that do not).


def _torch_fused(forward, backward, native, inputs):
    """The `_fused` of PyTorch: `native` where it applies, else the
    `keras.ops` kernel `(forward, backward)`."""
    return _TorchFused.apply((forward, backward, native), *inputs)


if torch is not None:

    class _TorchFused(torch.autograd.Function):
        @staticmethod
        def forward(ctx, kernel, *inputs):
            forward, _, native = kernel
            # Symbolic shapes (meta tensors) and tracing by torch.compile or
            # torch.export (no data-dependent branches there) take the
            # `keras.ops` kernel.
            traced = inputs[0].is_meta or torch.compiler.is_compiling()
            result = None if native is None or traced else native[0](*inputs)
            ctx.kernel, ctx.native = kernel, result is not None
            output, saved = result if ctx.native else (forward(*inputs)[0], ())
            tensors = [isinstance(v, torch.Tensor) for v in saved]
            ctx.layout = tensors
            ctx.values = [v for v, t in zip(saved, tensors) if not t]
            ctx.save_for_backward(*inputs, *(v for v, t in zip(saved, tensors) if t))
            ctx.n_inputs = len(inputs)
            return output

        @staticmethod
        def backward(ctx, upstream):
            forward, backward, native = ctx.kernel
            stored = ctx.saved_tensors
            inputs, tensors = stored[: ctx.n_inputs], iter(stored[ctx.n_inputs :])
            values = iter(ctx.values)
            saved = [next(tensors) if t else next(values) for t in ctx.layout]
            grads = None
            if ctx.native and not torch.is_grad_enabled() and not torch.compiler.is_compiling():
                needs = ctx.needs_input_grad[1:]
                grads = native[1](inputs, saved, upstream.to(inputs[-1].dtype), needs)
            if grads is None:
                output, saved = forward(*inputs)
                grads = backward(inputs, saved, output, upstream)
            return (None, *grads)


def _torch_any(t):
    """`bool(t.any())`: a host sync."""
    return bool(torch.any(t))


def _torch_dim(axis):
    """The one axis of `axis` (an int or a tuple), or None for several."""
    if isinstance(axis, int):
        return axis
    return axis[0] if len(axis) == 1 else None


def _torch_masked(x, mask):
    """`x` with the masked entries `-inf` (x itself without a mask)."""
    return x if mask is None else torch.where(mask, x, _NEG_INF)


def _torch_norm_parts(x, axes, rescue):
    """`(y, c, n, ok)` per slice (keepdims), as `_square_sum`: `y = c x`
    (`x` itself where `c` is None), `n = ||y||`, `ok` the slices with a
    derivative (not the zero vector, no infinite entry; NaN included).

    One `vector_norm` (no temporary); the rescue by a power of two `c`
    only when a slice overflowed or underflowed (a zero vector did not:
    its largest magnitude is 0), then for those slices only.
    """
    n = torch.linalg.vector_norm(x, dim=axes, keepdim=True)
    c = None
    if rescue:
        hi, lo, low = _RESCUE[dtype_of(x)]
        small = n < 2.0 ** (low / 2)
        big = n == _INF  # an infinite entry too: rescued, it stays inf
        if _torch_any(small):
            small &= torch.linalg.vector_norm(x, ord=_INF, dim=axes, keepdim=True) != 0
        if _torch_any(small | big):
            c = torch.ones_like(n).masked_fill_(small, 2.0**lo).masked_fill_(big, 2.0**-hi)
            x = x * c
            n = torch.linalg.vector_norm(x, dim=axes, keepdim=True)
    return x, c, n, (n != 0) & (n != _INF)


def _torch_inverse(n, ok):
    """`1 / n` where `ok`, else 0."""
    return torch.where(ok, 1.0 / n, 0.0)


def _torch_select(grad, ok):
    """`grad`, 0 on the slices that are not `ok` (in place)."""
    return grad.masked_fill_(~ok, 0.0) if not bool(torch.all(ok)) else grad


def _torch_norm(axes, rescue):
    """`norm_kernel`: `n / c`; gradient `(y * g) / n`."""

    def forward(x):
        y, c, n, ok = _torch_norm_parts(x, axes, rescue)
        return (n if c is None else n / c), (c, n, ok)

    def backward(inputs, saved, g, needs):
        (x,) = inputs
        c, n, ok = saved
        factor = torch.where(ok, g / n, 0.0)
        grad = x * factor if c is None else (x * c).mul_(factor)
        return [_torch_select(grad, ok)]

    return forward, backward


def _torch_l2_normalize(axes, rescue):
    """`l2_normalize_kernel`: `u = y / n`; gradient
    `g / ||x|| - y * (sum(g * y) / n**2 / ||x||)`."""

    def forward(x):
        y, c, n, ok = _torch_norm_parts(x, axes, rescue)
        inv = _torch_inverse(n, ok)
        return y * inv, (c, n, ok, inv)

    def backward(inputs, saved, g, needs):
        (x,) = inputs
        c, n, ok, inv = saved
        y = x if c is None else x * c
        scale = inv if c is None else inv * c  # 1 / ||x||
        dot = torch.sum(g * y, dim=axes, keepdim=True) * inv  # sum(g * u)
        grad = (g * scale).addcmul_(y, (inv * dot) * scale, value=-1.0)
        return [_torch_select(grad, ok)]

    return forward, backward


def _torch_cosine(axis, rescue):
    """`cosine_kernel`: `sum(y1 * y2) / (n1 n2)`, clipped; gradients
    `g (u2 - cos u1) / ||x1||` and symmetrically."""
    axes = (axis,)

    def forward(x1, x2):
        y1, c1, n1, ok1 = _torch_norm_parts(x1, axes, rescue)
        y2, c2, n2, ok2 = _torch_norm_parts(x2, axes, rescue)
        inv1, inv2 = _torch_inverse(n1, ok1), _torch_inverse(n2, ok2)
        # |sum(y1 * y2)| <= n1 n2 <= max(n1, n2)**2: in range, as both.
        raw = torch.sum(y1 * y2, dim=axis, keepdim=True) * inv1 * inv2
        cos = torch.clamp(raw, -1.0, 1.0)
        unclipped = ~((raw > 1.0) | (raw < -1.0))  # NaN passes
        return cos, (c1, ok1, inv1, c2, ok2, inv2, cos, unclipped)

    def backward(inputs, saved, g, needs):
        x1, x2 = inputs
        c1, ok1, inv1, c2, ok2, inv2, cos, unclipped = saved
        g = torch.where(unclipped, g, 0.0)
        y1 = x1 if c1 is None else x1 * c1
        y2 = x2 if c2 is None else x2 * c2
        grads = []
        for need, (ya, ca, oka, inva), (yb, invb) in (
            (needs[0], (y1, c1, ok1, inv1), (y2, inv2)),
            (needs[1], (y2, c2, ok2, inv2), (y1, inv1)),
        ):
            if not need:
                grads.append(None)
                continue
            # g / ||xa|| (0 where `a` has no derivative) times ub - cos ua.
            ga = torch.where(oka, g * (inva if ca is None else inva * ca), 0.0)
            grad = (yb * (invb * ga)).addcmul_(ya, inva * (ga * cos), value=-1.0)
            grads.append(_torch_select(grad, oka))
        return grads

    return forward, backward


def _torch_softmax(axis, mask):
    """`softmax_kernel` as `torch.softmax`, which it is wherever each slice
    has a finite maximum (elsewhere torch gives NaN); gradient
    `p g - p sum(p g)`, which is the kernel's wherever it is finite (a
    non-finite upstream gradient at `p == 0` makes its slice NaN)."""
    dim = _torch_dim(axis)

    def forward(x):
        if dim is None:
            return None
        probs = torch.softmax(_torch_masked(x, mask), dim)
        if bool(torch.isnan(torch.sum(probs))):
            return None
        return probs, (probs,)

    def backward(inputs, saved, g, needs):
        (probs,) = saved
        gp = g * probs
        grad = gp.addcmul_(probs, torch.sum(gp, dim=dim, keepdim=True), value=-1.0)
        return [grad] if bool(torch.isfinite(torch.sum(grad))) else None

    return forward, backward


def _torch_log_softmax(axis, mask):
    """`log_softmax_kernel` as `torch.log_softmax` (the kernel wherever
    each slice has a finite maximum); gradient `g - exp(out) sum(g)` over
    the entries that are not `-inf`."""
    dim = _torch_dim(axis)

    def forward(x):
        if dim is None:
            return None
        out = torch.log_softmax(_torch_masked(x, mask), dim)
        lowest = torch.amin(out)  # NaN: a slice without a finite maximum
        if bool(torch.isnan(lowest)):
            return None
        return out, (out, bool(lowest == _NEG_INF))

    def backward(inputs, saved, g, needs):
        out, dead = saved
        if dead:  # masked or -inf entries: their upstream gradient is dropped
            g = torch.where(out != _NEG_INF, g, 0.0)
        return [torch.exp(out).mul_(-torch.sum(g, dim=dim, keepdim=True)).add_(g)]

    return forward, backward


def _torch_logsumexp(axis, mask):
    """`logsumexp_kernel`, keeping `exp(x - max)` and its sum; gradient
    `g exp(x - max) / total`, 0 for the rows whose value is infinite."""

    def forward(x):
        x = _torch_masked(x, mask)
        shift = torch.amax(x, dim=axis, keepdim=True)
        shift = torch.where(torch.isfinite(shift), shift, 0.0)
        e = torch.exp(x - shift)
        total = torch.sum(e, dim=axis, keepdim=True)
        # log(0) = -inf for a row with nothing left (its shift is 0).
        lse = torch.log(total).add_(shift)
        return lse, (e, total, ~torch.isinf(lse))

    def backward(inputs, saved, g, needs):
        e, total, ok = saved
        return [_torch_select(e * torch.where(ok, g / total, 0.0), ok)]

    return forward, backward


def _torch_softmax_cross_entropy(axis, mask):
    """`softmax_cross_entropy_kernel` for logits that are all finite and
    unmasked (the `keras.ops` kernel otherwise): `sum(labels * (log_total
    - z))`, `z = x - max`; gradients `exp(z) sum(labels) g / total - g
    labels` and `g (log_total - z)`, `z` recomputed from `x`."""

    def forward(labels, x):
        if mask is not None:
            return None
        lowest, shift = torch.aminmax(x, dim=axis, keepdim=True)
        if not bool(torch.all(torch.isfinite(lowest) & torch.isfinite(shift))):
            return None
        z = x - shift
        total = torch.sum(torch.exp(z), dim=axis, keepdim=True)
        log_total = torch.log(total)
        loss = torch.sum(z.neg_().add_(log_total).mul_(labels), dim=axis)
        return loss, (shift, total, log_total)

    def backward(inputs, saved, g, needs):
        labels, x = inputs
        shift, total, log_total = saved
        g = torch.unsqueeze(g, axis)
        z = x - shift
        d_labels = torch.sub(log_total, z).mul_(g) if needs[0] else None
        d_x = None
        if needs[1]:
            factor = torch.sum(labels, dim=axis, keepdim=True) * (g / total)
            d_x = z.exp_().mul_(factor).addcmul_(labels, g, value=-1.0)
        return [d_labels, d_x]

    return forward, backward


def native_sparse_cross_entropy(labels, x, axis, ignore_class):
    """`sparse_softmax_cross_entropy`'s value (`logsumexp(x) - x[label]`, 0
    for `ignore_class`) by `torch.nn.functional.cross_entropy`, torch's
    fused forward and backward, where it gives exactly that: PyTorch
    eager, float32/float64 logits all finite (no mask: the caller checks),
    every label in range or `ignore_class`. None otherwise (other
    backends, tracing, `-inf` logits, out-of-range labels), and the
    portable formulation runs instead. Two host syncs (the checks)."""
    if torch is None or x.is_meta or torch.compiler.is_compiling():
        return None
    if x.dtype not in (torch.float32, torch.float64) or x.ndim == 0:
        return None
    lowest, highest = torch.aminmax(x)
    if not bool(torch.isfinite(lowest) & torch.isfinite(highest)):
        return None
    labels = labels.long()
    ok = (labels >= 0) & (labels < x.shape[axis])
    if ignore_class is not None:
        ok |= labels == ignore_class
    if not bool(torch.all(ok)):
        return None
    # Labels in range are never negative: -100 matches none of them.
    ignore_index = -100 if ignore_class is None else int(ignore_class)
    if x.ndim > 1:
        x = torch.movedim(x, axis, 1)
    return torch.nn.functional.cross_entropy(x, labels, reduction="none", ignore_index=ignore_index)


def native_sigmoid_cross_entropy(labels, x):
    """`sigmoid_cross_entropy`'s value from logits (`max(x, 0) - x y +
    log1p(exp(-|x|))`, gradient `sigmoid(x) - y`) by torch's fused
    `binary_cross_entropy_with_logits`, where it gives exactly that:
    PyTorch eager, float32/float64, every logit finite (one host sync).
    None otherwise, and the portable formulation runs instead."""
    if torch is None or x.is_meta or torch.compiler.is_compiling():
        return None
    if x.dtype not in (torch.float32, torch.float64) or labels.dtype != x.dtype:
        return None
    if not bool(torch.all(torch.isfinite(x))):
        return None
    return torch.nn.functional.binary_cross_entropy_with_logits(x, labels, reduction="none")
