"""The entropy of a linear layer's softmax, without the logits."""

import keras
import numpy as np
from keras import ops

from keras_stable.common.dtypes import static_shape
from keras_stable.ops._kernels import linear_entropy_kernel
from keras_stable.ops.linear_cross_entropy import _check_inputs
from keras_stable.ops.linear_cross_entropy import default_chunk_size
from keras_stable.ops.linear_cross_entropy import head_options


def linear_softmax_entropy(
    hidden, kernel, bias=None, chunk_size=None, *, transpose_kernel=False, logit_soft_cap=None
):
    """Per-token `entropy(hidden @ kernel + bias)` of the softmax over the
    vocabulary, without ever forming the `[tokens, vocab]` logits.

    The companion of `linear_softmax_cross_entropy` (the same head, blocks
    and options): the entropy of a language model's next-token
    distribution, for an entropy bonus or a confidence score.

    Args:
        hidden: `[..., dim]` float tensor (the last hidden states).
        kernel: `[dim, vocab]` float tensor, or `[vocab, dim]` with
            `transpose_kernel=True` (a tied embedding, read in place).
        bias: optional `[vocab]` float tensor.
        chunk_size: vocabulary columns per block (any positive int; by
            default as `linear_softmax_cross_entropy`).
        transpose_kernel: bool: `kernel` is `[vocab, dim]`.
        logit_soft_cap: optional float > 0: the logits are
            `logit_soft_cap * tanh(logits / logit_soft_cap)`.

    Returns:
        The entropy per token (nats), of shape `hidden.shape[:-1]`, float32.

    Numerical stability:
        One pass over the vocabulary blocks keeps a running max `m`, the
        shifted sum `T = sum(exp(s - m))` and `W = sum(exp(s - m)(s - m))`
        (both moved to each new max, as the online log-sum-exp), in
        float32 for half-precision inputs; the entropy is `log(T) - W / T`.
        The gradient is written by hand: the backward recomputes each
        block and turns it into `-p (log p + H)` at once, so neither pass
        holds more than a `[tokens, chunk_size]` block. A `-inf` bias entry
        removes its class (it contributes 0, with a zero gradient, where
        `0 * -inf` would be NaN); a token whose classes are all removed
        gives 0 with a zero gradient.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> h = np.array([[0.0, 0.0], [1.0, 0.0]], "float32")
        >>> w = np.array([[50.0, 0.0, 0.0], [0.0, 0.0, 0.0]], "float32")
        >>> b = np.array([0.0, 0.0, -np.inf], "float32")
        >>> np.round(np.asarray(ops.linear_softmax_entropy(h, w, b, chunk_size=2)), 6)
        array([0.693147, 0.      ], dtype=float32)
    """
    symbolic = any(keras.utils.is_keras_tensor(x) for x in (hidden, kernel, bias))
    if not symbolic:
        hidden = ops.convert_to_tensor(hidden)
        kernel = ops.convert_to_tensor(kernel)
        if bias is not None:
            bias = ops.convert_to_tensor(bias)
    options = head_options(transpose_kernel, logit_soft_cap=logit_soft_cap)
    dim, vocab = _check_inputs(hidden, kernel, None, bias, chunk_size, transpose_kernel)
    if symbolic:
        return keras.KerasTensor(static_shape(hidden)[:-1], dtype="float32")
    tokens = None
    if None not in static_shape(hidden)[:-1]:
        tokens = int(np.prod(static_shape(hidden)[:-1], dtype="int64"))
    chunk_size = min(chunk_size or default_chunk_size(tokens, vocab, options), vocab)
    out_shape = ops.shape(hidden)[:-1]
    flat_hidden = ops.cast(ops.reshape(hidden, (-1, dim)), "float32")
    kernel32 = ops.cast(kernel, "float32")
    bias32 = ops.zeros((vocab,), "float32") if bias is None else ops.cast(bias, "float32")
    h = linear_entropy_kernel(flat_hidden, kernel32, bias32, chunk_size, options)
    return ops.reshape(h, out_shape)
