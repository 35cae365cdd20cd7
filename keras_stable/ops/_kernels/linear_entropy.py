"""The fused linear entropy: the entropy of `softmax(cap(h @ W + b))` per
token, one vocabulary block at a time (the loops of `head.py`).

Forward: a running max `m`, the shifted sum `T = sum(exp(s - m))` and
`W = sum(exp(s - m) (s - m))`, moved together to each new shift; then
`H = log(T) - W / T`. Backward (`dispatch.fused`, `keep=True`): each block
is recomputed and its gradient `-g p (s - lse + H)` taken at once.
"""

from keras import ops

from keras_stable.common.dtypes import maximum
from keras_stable.ops._kernels.blocks import for_each_block
from keras_stable.ops._kernels.dispatch import fused
from keras_stable.ops._kernels.head import _LOWEST
from keras_stable.ops._kernels.head import HeadOptions
from keras_stable.ops._kernels.head import accumulate_block
from keras_stable.ops._kernels.head import block_logits
from keras_stable.ops._kernels.head import finish_logsumexp
from keras_stable.ops._kernels.head import finite_shift


def _entropy_stats(hidden, kernel, bias, chunk_size, options):
    tokens = ops.shape(hidden)[0]

    def body(start, size, state):
        running_max, total, weighted = state
        logits = options.cap(block_logits(hidden, kernel, bias, start, size, options))
        new_max = maximum(running_max, ops.max(logits, axis=-1))
        shift = finite_shift(new_max)
        # The previous shift (the shift itself on a row with nothing summed
        # yet, whose max is still the sentinel): both sums move by
        # exp(delta), and W also by delta * T.
        started = ops.greater(total, 0)
        delta = ops.where(started, running_max, shift) - shift
        scale = ops.exp(delta)
        weighted = scale * (weighted + delta * total)
        total = scale * total
        shifted = logits - shift[:, None]
        e = ops.exp(shifted)
        # A -inf logit (a -inf bias entry) has e = 0: its term is 0, not
        # 0 * -inf.
        zero = ops.zeros_like(e)
        weighted = weighted + ops.sum(e * ops.where(ops.greater(e, 0), shifted, zero), axis=-1)
        total = total + ops.sum(e, axis=-1)
        return new_max, total, weighted

    zeros = ops.zeros((tokens,), "float32")
    init = (ops.full((tokens,), _LOWEST, "float32"), zeros, zeros)
    return for_each_block(options.vocab(kernel), min(chunk_size, options.vocab(kernel)), body, init)


def linear_entropy_kernel(hidden, kernel, bias, chunk_size, options=None):
    """Per-token entropy of `softmax(cap(hidden @ kernel + bias))`, fused.

    Args: as `linear_cross_entropy_kernel`, without labels.

    Returns:
        `[tokens]` float32; 0 with a zero gradient on a token whose classes
        are all `-inf`.
    """
    options = options or HeadOptions()

    def forward(hidden, kernel, bias):
        running_max, total, weighted = _entropy_stats(hidden, kernel, bias, chunk_size, options)
        lse, nonempty = finish_logsumexp(running_max, total)
        safe_total = ops.where(nonempty, total, ops.ones_like(total))
        h = ops.where(nonempty, ops.log(safe_total) - weighted / safe_total, ops.zeros_like(total))
        return h, (lse, nonempty)

    def backward(inputs, saved, h, upstream):
        hidden, kernel, bias = inputs
        lse, nonempty = saved
        g = ops.where(nonempty, ops.cast(upstream, "float32"), ops.zeros_like(lse))

        def body(start, size, state):
            raw = block_logits(hidden, kernel, bias, start, size, options)
            shifted = options.cap(raw) - lse[:, None]
            p = ops.where(nonempty[:, None], ops.exp(shifted), ops.zeros_like(raw))
            log_p = ops.where(ops.greater(p, 0), shifted, ops.zeros_like(raw))
            d_logits = -(g[:, None] * p) * (log_p + h[:, None])
            return accumulate_block(hidden, kernel, start, size, raw, d_logits, state, options)

        init = (ops.zeros_like(hidden), ops.zeros_like(kernel), ops.zeros_like(bias))
        vocab = options.vocab(kernel)
        return list(for_each_block(vocab, min(chunk_size, vocab), body, init))

    return fused(forward, backward, hidden, kernel, bias, keep=True)
