"""The fused linear cross-entropy: a large vocabulary, one block at a time.

`keras.ops.custom_gradient` on every backend (the blocks run in a compiled
`fori_loop`; nothing of the size `[tokens, vocab]` is kept): no native pass.
"""

from keras import ops

from keras_stable.ops._kernels.blocks import for_each_block

_NEG_INF = float("-inf")


def _block_logits(hidden, kernel, bias, start, size):
    # One [tokens, size] block of float32 logits; `start` may be traced
    # (a dynamic slice inside `fori_loop`), `size` is static.
    dim = kernel.shape[0]
    logits = ops.matmul(hidden, ops.slice(kernel, (0, start), (dim, size)))
    return logits + ops.slice(bias, (start,), (size,))


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
    running_max, total = for_each_block(kernel.shape[1], chunk_size, body, init)
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
            return for_each_block(vocab, chunk_size, body, init)

        return loss, grad

    return fused(hidden, kernel, bias)
