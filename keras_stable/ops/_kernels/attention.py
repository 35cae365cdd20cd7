"""Blockwise attention with a hand-written gradient (private to
`keras_stable.ops`).

The forward pass is an online softmax over blocks of keys (FlashAttention):
per query row a running maximum `m`, a running sum `l` and a running
weighted sum of the values, each block rescaled by `exp(m_old - m_new)`;
the blocks run in `keras.ops.fori_loop` (a compiled loop on TF and JAX, so
one block is alive at a time). It keeps the output and the log-sum-exp
`lse = m + log(l)` of each row. The backward pass (FlashAttention-2)
recomputes each block's probabilities `P = exp(logits - lse)` and turns
them into gradients at once: with `D = rowsum(dO * O)`,
`dS = P * (dO V^T - D)`, `dQ += scale dS K`, `dK = scale dS^T Q`,
`dV = P^T dO` (and `dS` itself for the bias, through `1 - tanh^2` for a
soft cap). Neither pass holds a `(B, N, T, S)` tensor: only blocks of
`(B, N, T, chunk_size)`.

A row with no allowed key has `l = 0`: output 0, and its upstream
gradient is dropped, so it contributes exactly 0 to every gradient.

The materialised formulation in `keras_stable/ops/attention.py` stays the
reference these kernels are tested against and the fallback
(`KERAS_STABLE_PORTABLE`).
"""

from keras import ops

from keras_stable.common.dtypes import is_neg_inf
from keras_stable.common.dtypes import lowest_like
from keras_stable.common.dtypes import maximum
from keras_stable.common.dtypes import tanh
from keras_stable.ops._kernels.blocks import for_each_block
from keras_stable.ops._kernels.dispatch import fused
from keras_stable.ops._kernels.dispatch import native_op
from keras_stable.ops._kernels.shared import soft_cap


def causal_mask(t, s, start=0, rank=2):
    """`(t, s)` bool, with leading unit axes up to `rank`: query `i` sees
    key `start + j` where `start + j <= i` (aligned at the top left, as
    Keras's `tril(ones((T, S)))`). `start` may be traced (inside the loop).
    The explicit rank keeps broadcasting against the logits explicit (JAX's
    `rank_promotion="raise"`)."""
    rows = ops.expand_dims(ops.arange(t, dtype="int32"), 1)
    cols = ops.expand_dims(ops.arange(s, dtype="int32") + start, 0)
    return ops.reshape(ops.greater_equal(rows, cols), (1,) * (rank - 2) + (t, s))


def _keys(x, start, size):
    """`x[:, start:start + size]` of a `(B, S, K, H)` tensor."""
    shape = ops.shape(x)
    return ops.slice(x, (0, start, 0, 0), (shape[0], size, shape[2], shape[3]))


def _last(t, start, size):
    """The block of a rank-5 mask or bias along its key axis (all of it
    when that axis broadcasts)."""
    if t is None or t.shape[-1] == 1:
        return t
    shape = ops.shape(t)
    return ops.slice(t, (0, 0, 0, 0, start), (*shape[:4], size))


class _Problem:
    """The static description of one attention call: `(B, T, K, G, H)`
    queries, `(B, S, K, H)` keys and values, rank-5 `bias`/`mask`
    broadcastable to `(B, K, G, T, S)` (closed over: the mask is not
    differentiated, the bias is an input of the kernel)."""

    def __init__(self, mask, scale, is_causal, cap, chunk_size):
        self.mask, self.scale, self.is_causal = mask, scale, is_causal
        self.cap, self.chunk_size = cap, chunk_size

    def block(self, q, k, bias, start, size):
        """`(keys, pre, logits, allowed)` of one block: `pre` the scaled
        `q . k`, `logits` after the cap and the bias, `allowed` the keys
        that take part, all `(B, K, G, T, size)`."""
        keys = _keys(k, start, size)
        pre = ops.einsum("btkgh,bskh->bkgts", q, keys) * self.scale
        logits = pre if self.cap is None else soft_cap(pre, self.cap)
        if bias is not None:
            logits = logits + _last(bias, start, size)
        allowed = ops.logical_not(is_neg_inf(logits))
        if self.mask is not None:
            allowed = ops.logical_and(allowed, _last(self.mask, start, size))
        if self.is_causal:
            allowed = ops.logical_and(allowed, causal_mask(q.shape[1], size, start, rank=5))
        return keys, pre, logits, allowed

    def forward(self, q, k, v, bias=None):
        """`(output (B, T, K, G, H), (lse, nonempty, output))`."""
        rows = ops.zeros_like(ops.transpose(q[..., 0], (0, 2, 3, 1)))  # (B, K, G, T)

        def body(start, size, state):
            row_max, total, acc = state
            _, _, logits, allowed = self.block(q, k, bias, start, size)
            values = _keys(v, start, size)
            # Finite sentinels, not -inf: no infinite intermediate on valid
            # inputs (the NaN tools stay silent).
            block_max = ops.max(ops.where(allowed, logits, lowest_like(logits)), axis=-1)
            # A row has seen an allowed key once its total is positive (the
            # largest key adds exp(0) = 1); until then row_max is 0, not a
            # maximum, and the total and acc are 0 whatever the rescale.
            before = ops.greater(total, 0)
            first = ops.where(ops.any(allowed, axis=-1), block_max, ops.zeros_like(block_max))
            new_max = ops.where(before, maximum(row_max, block_max), first)
            z = ops.where(allowed, logits - new_max[..., None], ops.zeros_like(logits))
            e = ops.where(allowed, ops.exp(z), ops.zeros_like(z))
            rescale = ops.exp(ops.where(before, row_max - new_max, ops.zeros_like(row_max)))
            total = total * rescale + ops.sum(e, axis=-1)
            acc = acc * rescale[..., None] + ops.einsum("bkgts,bskh->bkgth", e, values)
            return new_max, total, acc

        init = (
            rows,
            rows,
            ops.zeros_like(ops.transpose(q, (0, 2, 3, 1, 4))),
        )
        row_max, total, acc = for_each_block(k.shape[1], self.chunk_size, body, init)
        nonempty = ops.greater(total, 0)
        safe_total = ops.where(nonempty, total, ops.ones_like(total))
        out = ops.where(nonempty[..., None], acc / safe_total[..., None], ops.zeros_like(acc))
        lse = row_max + ops.log(safe_total)  # row_max is 0 on empty rows
        out = ops.transpose(out, (0, 3, 1, 2, 4))  # (B, T, K, G, H)
        return out, (lse, nonempty, out)

    def backward(self, inputs, saved, upstream):
        q, k, v = inputs[:3]
        bias = inputs[3] if len(inputs) > 3 else None
        lse, nonempty, out = saved
        # (B, K, G, T, H); an empty row's upstream (even inf or NaN) is dropped.
        d_out = ops.transpose(ops.cast(upstream, q.dtype), (0, 2, 3, 1, 4))
        d_out = ops.where(nonempty[..., None], d_out, ops.zeros_like(d_out))
        delta = ops.sum(d_out * ops.transpose(out, (0, 2, 3, 1, 4)), axis=-1)

        def body(start, size, state):
            d_q, d_k, d_v, d_bias = state
            keys, pre, logits, allowed = self.block(q, k, bias, start, size)
            values = _keys(v, start, size)
            z = ops.where(allowed, logits - lse[..., None], ops.zeros_like(logits))
            p = ops.where(allowed, ops.exp(z), ops.zeros_like(z))
            d_p = ops.einsum("bkgth,bskh->bkgts", d_out, values)
            d_s = p * (d_p - delta[..., None])  # d logits
            d_v = ops.slice_update(d_v, (0, start, 0, 0), ops.einsum("bkgts,bkgth->bskh", p, d_out))
            if bias is not None:
                d_bias = _bias_update(d_bias, d_s, start)
            if self.cap is not None:
                d_s = d_s * (1.0 - ops.square(tanh(pre / self.cap)))
            d_s = d_s * self.scale
            d_q = d_q + ops.einsum("bkgts,bskh->bkgth", d_s, keys)
            d_k = ops.slice_update(d_k, (0, start, 0, 0), ops.einsum("bkgts,btkgh->bskh", d_s, q))
            return d_q, d_k, d_v, d_bias

        init = (
            ops.zeros_like(ops.transpose(q, (0, 2, 3, 1, 4))),
            ops.zeros_like(k),
            ops.zeros_like(v),
            ops.zeros_like(bias) if bias is not None else ops.zeros(()),
        )
        d_q, d_k, d_v, d_bias = for_each_block(k.shape[1], self.chunk_size, body, init)
        grads = [ops.transpose(d_q, (0, 3, 1, 2, 4)), d_k, d_v]
        return grads + ([d_bias] if bias is not None else [])


def _bias_update(d_bias, d_s, start):
    """Adds a block's `d logits` to the bias gradient, summed over the axes
    the bias broadcasts along."""
    axes = tuple(i for i in range(4) if d_bias.shape[i] == 1)
    block = ops.sum(d_s, axis=axes, keepdims=True) if axes else d_s
    if d_bias.shape[-1] == 1:
        return d_bias + ops.sum(block, axis=-1, keepdims=True)
    return ops.slice_update(d_bias, (0, 0, 0, 0, start), block)


def attention_kernel(q, k, v, bias, mask, scale, is_causal, cap, chunk_size):
    """Blockwise `softmax(scale * q k^T [capped] + bias) v`.

    Args:
        q: `(B, T, K, G, H)` float32/float64 (query head `k * G + g`).
        k, v: `(B, S, K, H)`, the dtype of `q`.
        bias: None or rank 5, broadcastable to `(B, K, G, T, S)`.
        mask: None or rank-5 bool, broadcastable likewise.
        scale: float; is_causal: bool; cap: None or a positive float.
        chunk_size: static int, keys per block (need not divide `S`).

    Returns:
        `(B, T, K, G, H)`: 0 on rows with no allowed key, whose gradients
        are exactly 0.
    """
    # PyTorch: its fused attention where it computes ours (the same
    # blockwise algorithm and backward; eager, so no compiled loop of ours
    # to fuse the blocks).
    out = native_op("attention", q, k, v, bias, mask, scale, is_causal, cap)
    if out is not None:
        return out
    problem = _Problem(mask, scale, is_causal, cap, chunk_size)
    inputs = (q, k, v) if bias is None else (q, k, v, bias)

    def backward(inputs, saved, output, upstream):
        return problem.backward(inputs, saved, upstream)

    # The backward reads `saved` (lse, output) on PyTorch too, instead of
    # running the forward's loop over the key blocks again.
    return fused(problem.forward, backward, *inputs, keep=True)
