"""Linear layer + sparse softmax cross-entropy without the logits."""

import keras
import numpy as np
from keras import ops

from keras_stable.common.checks import check_bool
from keras_stable.common.checks import check_ignore_class
from keras_stable.common.checks import check_label_smoothing
from keras_stable.common.checks import check_non_negative
from keras_stable.common.checks import check_positive
from keras_stable.common.dtypes import dtype_of
from keras_stable.common.dtypes import static_shape
from keras_stable.ops._kernels import HeadOptions
from keras_stable.ops._kernels import linear_cross_entropy_kernel
from keras_stable.ops._kernels import sharded_linear_cross_entropy
from keras_stable.ops._kernels import vocabulary_sharding

# By default a block of logits holds about 2**21 float32 values (8 MiB):
# measured under JAX jit, the peak transient memory of forward + backward is
# then ~1.5 blocks, 19x less than the materialised logits at [2048, 32000].
BLOCK_ELEMENTS = 2**21
MIN_CHUNK_SIZE = 128


def default_chunk_size(tokens, vocab, options=None):
    """Vocabulary columns per block for `tokens` rows (None if not static).

    With a soft cap, smoothing or z-loss the backward keeps a few more
    block-sized temporaries alive (TF's XLA does not fuse the cap's
    derivative into the softmax's): half-size blocks keep the transient
    memory where it is without them (measured at [1024, 32000]: 64 MiB
    with full blocks, 12 MiB with half ones).
    """
    elements = BLOCK_ELEMENTS
    if options is not None and (
        options.soft_cap is not None or options.label_smoothing > 0 or options.z_loss > 0
    ):
        elements //= 2
    if tokens is None:
        return min(vocab, elements // 2048)
    return min(vocab, max(MIN_CHUNK_SIZE, elements // max(tokens, 1)))


def _check_inputs(hidden, kernel, labels, bias, chunk_size, transpose_kernel):
    """`(dim, vocab)` once the arguments are checked (`labels` may be None:
    the entropy of the head takes none)."""
    h_shape, k_shape = static_shape(hidden), static_shape(kernel)
    layout = "[vocab, dim]" if transpose_kernel else "[dim, vocab]"
    if len(h_shape) < 1 or len(k_shape) != 2:
        raise ValueError(
            f"`hidden` must be `[..., dim]` and `kernel` `{layout}`, got "
            f"hidden.shape={h_shape} and kernel.shape={k_shape}."
        )
    dim_axis, vocab_axis = (1, 0) if transpose_kernel else (0, 1)
    dim, vocab = k_shape[dim_axis], k_shape[vocab_axis]
    if h_shape[-1] is not None and dim is not None and h_shape[-1] != dim:
        which = "second (transpose_kernel=True)" if transpose_kernel else "first"
        raise ValueError(
            f"`hidden` of shape {h_shape} and `kernel` of shape {k_shape} do "
            f"not match: hidden's last dimension ({h_shape[-1]}) must equal "
            f"kernel's {which} ({dim})."
        )
    if vocab is None:
        raise ValueError(f"`kernel` needs a static vocabulary size, got shape {k_shape}.")
    if labels is not None:
        _check_labels(labels, h_shape)
    if bias is not None and (
        len(static_shape(bias)) != 1 or static_shape(bias)[0] not in (None, vocab)
    ):
        raise ValueError(
            f"`bias` of shape {static_shape(bias)} does not match `kernel` of "
            f"shape {k_shape}: expected ({vocab},)."
        )
    if chunk_size is not None and (
        isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size <= 0
    ):
        raise ValueError(f"`chunk_size` must be a positive int or None, got {chunk_size!r}.")
    return dim, vocab


def _check_labels(labels, h_shape):
    l_shape = static_shape(labels)
    if len(l_shape) != len(h_shape) - 1 or any(
        a is not None and b is not None and a != b for a, b in zip(l_shape, h_shape[:-1])
    ):
        raise ValueError(
            f"`labels` of shape {l_shape} do not match `hidden` of shape "
            f"{h_shape}: expected labels of shape {h_shape[:-1]} (one class "
            "index per token)."
        )
    if not dtype_of(labels).startswith(("int", "uint")):
        raise ValueError(
            f"`labels` must be integer class indices, got dtype {dtype_of(labels)} with shape {l_shape}."
        )


def head_options(transpose_kernel=False, label_smoothing=0.0, z_loss=0.0, logit_soft_cap=None):
    """The fused head's options, checked (a `ValueError` names the argument)."""
    return HeadOptions(
        transpose_kernel=check_bool(transpose_kernel, "transpose_kernel"),
        label_smoothing=check_label_smoothing(label_smoothing, closed=True),
        z_loss=check_non_negative(z_loss, "z_loss"),
        soft_cap=None
        if logit_soft_cap is None
        else check_positive(logit_soft_cap, "logit_soft_cap"),
    )


def linear_softmax_cross_entropy(
    hidden,
    kernel,
    labels,
    bias=None,
    chunk_size=None,
    ignore_class=None,
    *,
    transpose_kernel=False,
    label_smoothing=0.0,
    z_loss=0.0,
    logit_soft_cap=None,
):
    """Per-token `sparse_softmax_cross_entropy(labels, hidden @ kernel + bias)`,
    without ever forming the `[tokens, vocab]` logits.

    Args:
        hidden: `[..., dim]` float tensor (the last hidden states).
        kernel: `[dim, vocab]` float tensor (the output projection), or
            `[vocab, dim]` with `transpose_kernel=True`.
        labels: integer class indices of shape `hidden.shape[:-1]`.
        bias: optional `[vocab]` float tensor.
        chunk_size: vocabulary columns per block. Any positive int (it need
            not divide the vocabulary); by default a block holds about 2**21
            logits (`2**21 // tokens` columns, at least 128, at most the
            vocabulary).
        ignore_class: optional int; tokens with this label give 0 and a
            zero gradient (e.g. padding, or -100).
        transpose_kernel: bool: `kernel` is `[vocab, dim]` (the weights of
            a tied `Embedding`/`ReversibleEmbedding`), read in place — never
            copied transposed.
        label_smoothing: float in [0, 1]: the target is
            `(1 - label_smoothing) * onehot + label_smoothing / vocab`, as in
            Keras's `CategoricalCrossentropy(label_smoothing=...)`.
        z_loss: float >= 0: adds `z_loss * logsumexp(logits)**2` per token
            (PaLM's auxiliary loss, which keeps the log-normaliser near 0).
        logit_soft_cap: optional float > 0: the logits are
            `logit_soft_cap * tanh(logits / logit_soft_cap)` (Gemma 2; Keras's
            `ReversibleEmbedding(logit_soft_cap=...)`), bias included.

    Returns:
        The loss per token, of shape `labels.shape`, float32.

    Numerical stability:
        The log-sum-exp is computed online, block by block (a running max
        and a rescaled sum, as in the softmax of FlashAttention), in float32
        for float16/bfloat16 inputs; the label's logit is a dot product with
        the label's column of the kernel. The gradient is written by hand
        (`keras.ops.custom_gradient`): the backward recomputes each block
        of logits and turns it into `softmax - onehot` immediately, so
        neither pass holds more than about two `[tokens, chunk_size]` blocks
        (the blocks run in a compiled loop): for 4096 tokens and a 128k
        vocabulary, ~12 MiB instead of 2 GiB of logits plus 2 GiB of their
        gradient. Semantics are those of
        `sparse_softmax_cross_entropy`: a `-inf` bias entry removes its
        class, a label on such a class gives `+inf`, a label outside
        `[0, vocab)` that is not `ignore_class` gives NaN, and a token whose
        classes are all removed gives 0 with a zero gradient. Every option
        keeps the gradient exact (it is written out, not traced): the
        softmax part is scaled by `1 + 2 z_loss lse`, the smoothing
        subtracts `label_smoothing / vocab` from each logit's gradient, and
        the soft cap multiplies it by `1 / cosh(logits / cap)**2`. With
        label smoothing, a `-inf` class gives `+inf` (the target puts mass
        on it), as Keras's smoothed cross-entropy would.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> h = np.array([[1.0, 0.0], [0.0, 2.0]], "float32")
        >>> w = np.array([[1.0, 0.0, -1.0], [0.0, 1.0, 0.0]], "float32")
        >>> loss = ops.linear_softmax_cross_entropy(h, w, np.array([0, -1]), chunk_size=2, ignore_class=-1)
        >>> np.round(np.asarray(loss), 6)
        array([0.407606, 0.      ], dtype=float32)
    """
    symbolic = any(keras.utils.is_keras_tensor(x) for x in (hidden, kernel, labels, bias))
    if not symbolic:
        hidden = ops.convert_to_tensor(hidden)
        kernel = ops.convert_to_tensor(kernel)
        labels = ops.convert_to_tensor(labels)
        if bias is not None:
            bias = ops.convert_to_tensor(bias)
    options = head_options(transpose_kernel, label_smoothing, z_loss, logit_soft_cap)
    dim, vocab = _check_inputs(hidden, kernel, labels, bias, chunk_size, transpose_kernel)
    ignore_class = check_ignore_class(ignore_class)
    if symbolic:
        h_shape = static_shape(hidden)
        # Keras tensors (a functional model's inputs): the output's shape
        # and dtype, as `keras.ops` gives on symbolic inputs.
        shape = tuple(b if a is None else a for a, b in zip(static_shape(labels), h_shape))
        return keras.KerasTensor(shape, dtype="float32")
    tokens = None
    if None not in static_shape(labels):
        tokens = int(np.prod(static_shape(labels), dtype="int64"))
    chunk_size = min(chunk_size or default_chunk_size(tokens, vocab, options), vocab)

    out_shape = ops.shape(labels)
    flat_hidden = ops.cast(ops.reshape(hidden, (-1, dim)), "float32")
    flat_labels = ops.cast(ops.reshape(labels, (-1,)), "int32")
    kernel32 = ops.cast(kernel, "float32")
    bias32 = ops.zeros((vocab,), "float32") if bias is None else ops.cast(bias, "float32")

    in_range = ops.logical_and(ops.greater_equal(flat_labels, 0), ops.less(flat_labels, vocab))
    counted = in_range
    if ignore_class is not None:
        counted = ops.logical_and(counted, ops.not_equal(flat_labels, ignore_class))
    safe_labels = ops.where(in_range, flat_labels, ops.zeros_like(flat_labels))
    args = (flat_hidden, kernel32, bias32, safe_labels, counted, chunk_size, options)
    sharding = vocabulary_sharding(tokens, vocab)
    if sharding is not None:
        loss = sharded_linear_cross_entropy(*args, sharding)
    else:
        loss = linear_cross_entropy_kernel(*args)
    # Out of range and not ignored: NaN, never the loss of a clamped index.
    # `log(-1)` builds the NaN on those tokens only (a tensor of NaNs to
    # pick from would trip `jax.debug_nans` on valid labels too).
    bad = ops.logical_not(in_range)
    if ignore_class is not None:
        bad = ops.logical_and(bad, ops.not_equal(flat_labels, ignore_class))
    loss = loss + ops.log(ops.where(bad, -ops.ones_like(loss), ops.ones_like(loss)))
    return ops.reshape(loss, out_shape)
