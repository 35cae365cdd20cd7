"""The fused linear cross-entropy: a large vocabulary, one block at a time.

`dispatch.fused` with `keep=True` on every backend: the backward reads the
forward's per-token statistics (`lse`, the tokens that take part) instead
of running the forward's block loop again; no native pass. The block loops
themselves are in `head.py` (shared with the sharded head, `sharded.py`).
"""

from keras import ops

from keras_stable.ops._kernels.dispatch import fused
from keras_stable.ops._kernels.head import HeadOptions
from keras_stable.ops._kernels.head import assemble_loss
from keras_stable.ops._kernels.head import backward_blocks
from keras_stable.ops._kernels.head import finish_logsumexp
from keras_stable.ops._kernels.head import label_logit
from keras_stable.ops._kernels.head import partial_stats


def linear_cross_entropy_kernel(hidden, kernel, bias, labels, counted, chunk_size, options=None):
    """Per-token cross-entropy of `cap(h @ W + b)` (smoothed, plus z-loss), fused.

    Args:
        hidden: `[tokens, dim]`, float32.
        kernel: `[dim, vocab]` float32 (`[vocab, dim]` with
            `options.transpose_kernel`, read in place).
        bias: `[vocab]` float32 (zeros when the head has none).
        labels: `[tokens]` int32, in range wherever `counted`.
        counted: `[tokens]` bool, the tokens that take part (others give 0
            and a zero gradient).
        chunk_size: static int, the vocabulary columns per block.
        options: a `HeadOptions` (None: plain cross-entropy).

    Returns:
        The per-token loss `[tokens]`, float32:
        `lse - (1 - e) s[label] - e/V sum(s) + z lse**2` with `s` the
        (capped) logits and `lse = logsumexp(s)`. Neither pass holds more
        than one `[tokens, chunk_size]` block of logits: the backward
        recomputes each block and turns it into its gradient at once.
    """
    options = options or HeadOptions()
    vocab = options.vocab(kernel)

    def forward(hidden, kernel, bias):
        running_max, total, logit_sum = partial_stats(hidden, kernel, bias, chunk_size, options)
        lse, nonempty = finish_logsumexp(running_max, total)
        take_part = ops.logical_and(counted, nonempty)
        picked = None
        if options.label_smoothing < 1:
            picked = label_logit(hidden, kernel, bias, labels, options)
        loss = assemble_loss(lse, take_part, picked, logit_sum, vocab, options)
        return loss, (lse, take_part)

    def backward(inputs, saved, loss, upstream):
        hidden, kernel, bias = inputs
        lse, take_part = saved
        g = ops.where(take_part, ops.cast(upstream, "float32"), ops.zeros_like(lse))
        return list(
            backward_blocks(
                hidden, kernel, bias, labels, take_part, lse, g, chunk_size, vocab, options
            )
        )

    return fused(forward, backward, hidden, kernel, bias, keep=True)
