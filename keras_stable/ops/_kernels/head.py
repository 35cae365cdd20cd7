"""The fused linear cross-entropy's passes over the vocabulary, one block
at a time: the forward statistics (`partial_stats`, `finish_logsumexp`,
`label_logit`, `assemble_loss`) and the backward (`backward_blocks`), over
the whole kernel (`linear_cross_entropy.py`) or one device's shard of it
(`sharded.py`). The options of the head (a tied `(vocab, dim)` kernel read
in place, label smoothing, z-loss, logit soft-capping) are folded into the
same two loops. Imports nothing that chooses a backend (`dispatch.py`
imports `sharded.py`, which imports this module).
"""

import numpy as np
from keras import ops

from keras_stable.common.dtypes import maximum
from keras_stable.ops._kernels.blocks import for_each_block
from keras_stable.ops._kernels.shared import soft_cap

# The running max before any block: the lowest finite float32, not -inf, so
# that valid inputs never build an inf (`jax.debug_infs`, TF's
# `enable_check_numerics`); every finite logit is >= it.
_LOWEST = float(np.finfo("float32").min)


class HeadOptions:
    """The static options of the fused head (Python values, not tensors).

    `transpose_kernel`: the kernel is `(vocab, dim)`. `label_smoothing` `e`:
    the target is `(1 - e) onehot + e / vocab`. `z_loss` `z`: `z * lse**2`
    is added per token. `soft_cap` `c`: the logits are `c * tanh(z / c)`.
    """

    def __init__(self, transpose_kernel=False, label_smoothing=0.0, z_loss=0.0, soft_cap=None):
        self.transpose_kernel = transpose_kernel
        self.label_smoothing = label_smoothing
        self.z_loss = z_loss
        self.soft_cap = soft_cap

    def vocab(self, kernel):
        return kernel.shape[0] if self.transpose_kernel else kernel.shape[1]

    def kernel_block(self, kernel, start, size):
        """Columns `[start, start + size)` of the logical `(dim, vocab)`
        kernel, in the kernel's own layout (`(size, dim)` when transposed)."""
        if self.transpose_kernel:
            return ops.slice(kernel, (start, 0), (size, kernel.shape[1]))
        return ops.slice(kernel, (0, start), (kernel.shape[0], size))

    # The block products as einsums: XLA contracts the right axes of each
    # operand in place (a `transpose` first is a copy of the block on TF).
    def matmul_block(self, hidden, block):
        """`hidden @ block`: `[tokens, size]` raw logits (without bias)."""
        return ops.einsum("td,vd->tv" if self.transpose_kernel else "td,dv->tv", hidden, block)

    def hidden_gradient(self, d_logits, block):
        """`d_logits @ block.T` in the logical layout: `[tokens, dim]`."""
        return ops.einsum("tv,vd->td" if self.transpose_kernel else "tv,dv->td", d_logits, block)

    def block_gradient(self, hidden, d_logits):
        """The gradient of the block in the kernel's own layout."""
        return ops.einsum("td,tv->vd" if self.transpose_kernel else "td,tv->dv", hidden, d_logits)

    def label_columns(self, kernel, labels):
        """The label's column of the logical kernel per token, `[tokens, dim]`."""
        if self.transpose_kernel:
            return ops.take(kernel, labels, axis=0)
        return ops.transpose(ops.take(kernel, labels, axis=1))

    def cap(self, logits):
        if self.soft_cap is None:
            return logits
        return soft_cap(logits, self.soft_cap)

    def cap_derivative(self, logits):
        """`d cap(z) / dz = 1 / cosh(z / c)**2`, as `4 a / (1 + a)**2` with
        `a = exp(-2 |z / c|)` in (0, 1]: exactly 0 far out (where
        `1 - tanh**2` would round to a multiple of float32's epsilon), and
        no `cosh` that overflows to inf on the way there."""
        a = ops.exp(-2.0 * ops.abs(logits / self.soft_cap))
        return 4.0 * a / ops.square(1.0 + a)


def _block_logits(hidden, kernel, bias, start, size, options):
    # One [tokens, size] block of float32 raw logits; `start` may be traced
    # (a dynamic slice inside `fori_loop`), `size` is static.
    logits = options.matmul_block(hidden, options.kernel_block(kernel, start, size))
    # Explicit broadcasting (JAX's `jax_numpy_rank_promotion="raise"`).
    return logits + ops.slice(bias, (start,), (size,))[None, :]


def partial_stats(hidden, kernel, bias, chunk_size, options):
    """One pass over the vocabulary blocks of `kernel` (all of it, or one
    device's shard): the running max of the (capped) logits, the sum of
    their exponentials shifted by it, and (with label smoothing) their sum.
    """
    tokens = ops.shape(hidden)[0]
    smoothing = options.label_smoothing > 0

    def body(start, size, state):
        running_max, total, logit_sum = state
        logits = options.cap(_block_logits(hidden, kernel, bias, start, size, options))
        new_max = maximum(running_max, ops.max(logits, axis=-1))
        shift = finite_shift(new_max)
        total = rescale(total, running_max, shift) + ops.sum(
            ops.exp(logits - shift[:, None]), axis=-1
        )
        if smoothing:
            logit_sum = logit_sum + ops.sum(logits, axis=-1)
        return new_max, total, logit_sum

    zeros = ops.zeros((tokens,), "float32")
    init = (ops.full((tokens,), _LOWEST, "float32"), zeros, zeros)
    chunk_size = min(chunk_size, options.vocab(kernel))
    return for_each_block(options.vocab(kernel), chunk_size, body, init)


def finite_shift(running_max):
    """The running max where finite, else 0 (a `+inf` logit's row)."""
    return ops.where(ops.isfinite(running_max), running_max, ops.zeros_like(running_max))


def rescale(total, running_max, shift):
    """`total * exp(running_max - shift)`: the shifted sum moved to a new
    shift. A row with nothing summed yet (`total == 0`, its max still the
    sentinel `_LOWEST`, which `- shift` could overflow to `-inf`) stays 0
    through `exp(0)`."""
    started = ops.greater(total, 0)
    return total * ops.exp(ops.where(started, running_max, shift) - shift)


def finish_logsumexp(running_max, total):
    """`(lse, nonempty)` from the running max and shifted sum. `lse` is 0 on
    a row with nothing finite (its log-sum-exp is `-inf`, which no caller
    reads: such a row takes no part), so no `-inf` is ever built."""
    nonempty = ops.greater(total, 0)
    safe_total = ops.where(nonempty, total, ops.ones_like(total))
    lse = ops.where(
        nonempty, finite_shift(running_max) + ops.log(safe_total), ops.zeros_like(total)
    )
    return lse, nonempty


def label_logit(hidden, kernel, bias, labels, options):
    """The (capped) logit of each token's label, from the label's column of
    the kernel (`[tokens, dim]`), not from a `[tokens, vocab]` block."""
    picked = ops.sum(hidden * options.label_columns(kernel, labels), axis=-1)
    return options.cap(picked + ops.take(bias, labels))


def assemble_loss(lse, take_part, picked, logit_sum, vocab, options):
    """`lse - (1 - e) s[label] - e/V sum(s) + z lse**2` where `take_part`,
    else 0; `picked` is None when `e == 1` (the label's logit drops out).
    `lse` is finite on every row (`finish_logsumexp`)."""
    loss = lse
    if picked is not None:
        loss = loss - (1.0 - options.label_smoothing) * picked
    if options.label_smoothing > 0:
        loss = loss - (options.label_smoothing / vocab) * logit_sum
    if options.z_loss > 0:
        loss = loss + options.z_loss * ops.square(lse)
    return ops.where(take_part, loss, ops.zeros_like(lse))


def backward_blocks(hidden, kernel, bias, labels, take_part, lse, g, chunk_size, vocab, options):
    """The gradients of `sum(g * loss)` for `hidden`, `kernel` and `bias`,
    one recomputed block of logits at a time.

    `labels` index this kernel's columns (a label outside them, as on
    another device's shard, matches none); `vocab` is the whole vocabulary
    (the smoothing's `e / V`); `lse` is each row's log-sum-exp (0 on an
    empty row). Each block's logits become
    `(1 + 2 z lse) softmax - (1 - e) onehot - e/V`, times the cap's
    derivative, at once.
    """
    smoothing = options.label_smoothing
    on_label = 1.0 - smoothing
    # The z-loss scales the softmax part: d(z lse^2)/ds = 2 z lse p.
    g_probs = g * (1.0 + 2.0 * options.z_loss * lse) if options.z_loss else g

    def body(start, size, state):
        raw = _block_logits(hidden, kernel, bias, start, size, options)
        # Shifted by the row's own log-sum-exp on every row (an ignored
        # token's included), so the exp stays <= 1; the where keeps the
        # rows that take no part out (their upstream is 0 anyway).
        probs = ops.where(
            take_part[:, None],
            ops.exp(options.cap(raw) - lse[:, None]),
            ops.zeros_like(raw),
        )
        d_logits = g_probs[:, None] * probs
        if on_label > 0:
            classes = start + ops.arange(size, dtype="int32")
            onehot = ops.cast(ops.equal(labels[:, None], classes[None, :]), "float32")
            d_logits = d_logits - (on_label * g)[:, None] * onehot
        if smoothing > 0:
            d_logits = d_logits - ((smoothing / vocab) * g)[:, None]
        return accumulate_block(hidden, kernel, start, size, raw, d_logits, state, options)

    init = (ops.zeros_like(hidden), ops.zeros_like(kernel), ops.zeros_like(bias))
    chunk_size = min(chunk_size, options.vocab(kernel))
    return for_each_block(options.vocab(kernel), chunk_size, body, init)


def block_logits(hidden, kernel, bias, start, size, options):
    """One `[tokens, size]` block of raw (uncapped) float32 logits."""
    return _block_logits(hidden, kernel, bias, start, size, options)


def accumulate_block(hidden, kernel, start, size, raw, d_logits, state, options):
    """Adds one block's share to `(d_hidden, d_kernel, d_bias)`: `d_logits`
    is the gradient for the block's capped logits (`raw` uncapped), taken
    through the cap and the block's product."""
    d_hidden, d_kernel, d_bias = state
    if options.soft_cap is not None:
        d_logits = d_logits * options.cap_derivative(raw)
    block = options.kernel_block(kernel, start, size)
    d_hidden = d_hidden + options.hidden_gradient(d_logits, block)
    at = (start, 0) if options.transpose_kernel else (0, start)
    d_kernel = ops.slice_update(d_kernel, at, options.block_gradient(hidden, d_logits))
    d_bias = ops.slice_update(d_bias, (start,), ops.sum(d_logits, axis=0))
    return d_hidden, d_kernel, d_bias
