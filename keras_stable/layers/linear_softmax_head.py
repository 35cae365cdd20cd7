"""`LinearSoftmaxHead`: a large-vocabulary output layer that trains without
materialising its logits."""

import keras
from keras import ops

from keras_stable import ops as stable_ops
from keras_stable.common.checks import check_bool
from keras_stable.common.checks import check_ignore_class
from keras_stable.common.reduction import keras_mask_of
from keras_stable.common.reduction import reduce_losses
from keras_stable.common.serialization import register


def _check_positive_int(value, name, allow_none=False):
    if allow_none and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        expected = "a positive int or None" if allow_none else "a positive int"
        raise ValueError(f"`{name}` must be {expected}, got {value!r}.")
    return value


@register
class LinearSoftmaxHead(keras.layers.Layer):
    """Output projection + softmax cross-entropy for large vocabularies.

    The layer owns a `[dim, vocab_size]` kernel (and a bias). Called with
    labels, it computes the per-token cross-entropy of the logits
    `hidden @ kernel + bias` with `keras_stable.ops.linear_softmax_cross_entropy`
    — block by block, never forming the `[tokens, vocab_size]` logits or
    their gradient — adds their mean to the model's losses (`add_loss`), and
    returns the per-token losses. Called without labels, it returns the
    logits (inference) — or, with `top_k`, the `(values, indices)` of the
    `top_k` largest.

    Train a model whose inputs include the labels and whose loss is the
    added loss (`model.compile(optimizer)` without `loss`); predict with a
    model over the same layers that calls the head without labels.

    Args:
        vocab_size: int, the number of classes.
        use_bias: bool, whether the logits have a bias.
        chunk_size: optional int, vocabulary columns per block (see
            `linear_softmax_cross_entropy`).
        ignore_class: optional int label that counts for nothing (padding).
        top_k: optional int: return the top `top_k` logits and their indices
            instead of all logits at inference.
        kernel_initializer: Keras initializer of the kernel.
        bias_initializer: Keras initializer of the bias.
        **kwargs: base layer arguments (`name`, `dtype`...).

    Call arguments:
        hidden: `[..., dim]` hidden states.
        labels: optional integer labels of shape `hidden.shape[:-1]`.
        mask: optional Keras mask of `hidden` (e.g. from
            `Embedding(mask_zero=True)`): masked tokens count for nothing in
            the loss, as in Keras's losses.

    Returns:
        With labels: the per-token losses (float32, 0 where not counted).
        Without: logits `[..., vocab_size]` in the compute dtype (or the
        `(values, indices)` of the `top_k`).

    Numerical stability:
        The loss is an online log-sum-exp in float32 (also for
        mixed-precision hidden states) with a hand-written gradient that
        recomputes each block of logits: the transient memory of a training
        step does not grow with `vocab_size`. The added loss is the mean over
        the counted tokens (0, not NaN, when none is counted).

    Example:

    >>> import keras
    >>> import numpy as np
    >>> from keras_stable.layers import LinearSoftmaxHead
    >>> tokens = keras.Input((5,), dtype="int32")
    >>> labels = keras.Input((5,), dtype="int32")
    >>> hidden = keras.layers.Embedding(50, 8)(tokens)
    >>> head = LinearSoftmaxHead(50, chunk_size=16)
    >>> train = keras.Model([tokens, labels], head(hidden, labels))
    >>> train.compile(optimizer="sgd")
    >>> x = np.arange(10).reshape(2, 5) % 50
    >>> history = train.fit([x, (x + 1) % 50], epochs=2, verbose=0)
    >>> predict = keras.Model(tokens, head(hidden))
    >>> tuple(predict(x).shape)
    (2, 5, 50)
    """

    def __init__(
        self,
        vocab_size,
        use_bias=True,
        chunk_size=None,
        ignore_class=None,
        top_k=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocab_size = _check_positive_int(vocab_size, "vocab_size")
        self.use_bias = check_bool(use_bias, "use_bias")
        self.chunk_size = _check_positive_int(chunk_size, "chunk_size", allow_none=True)
        self.ignore_class = check_ignore_class(ignore_class)
        self.top_k = _check_positive_int(top_k, "top_k", allow_none=True)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.supports_masking = True

    def build(self, hidden_shape, labels_shape=None):
        dim = hidden_shape[-1]
        if dim is None:
            raise ValueError(
                "LinearSoftmaxHead needs a static last dimension, got hidden "
                f"states of shape {hidden_shape}."
            )
        self.kernel = self.add_weight(
            shape=(dim, self.vocab_size), initializer=self.kernel_initializer, name="kernel"
        )
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight(
                shape=(self.vocab_size,), initializer=self.bias_initializer, name="bias"
            )

    def call(self, hidden, labels=None, mask=None):
        if labels is None:
            logits = ops.matmul(hidden, ops.cast(self.kernel, hidden.dtype))
            if self.bias is not None:
                logits = logits + ops.cast(self.bias, hidden.dtype)
            if self.top_k:
                return ops.top_k(logits, self.top_k)
            return logits
        labels = ops.convert_to_tensor(labels)
        if not keras.backend.standardize_dtype(labels.dtype).startswith("int"):
            labels = ops.cast(labels, "int32")
        losses = stable_ops.linear_softmax_cross_entropy(
            hidden,
            self.kernel,
            labels,
            bias=self.bias,
            chunk_size=self.chunk_size,
            ignore_class=self.ignore_class,
        )
        if mask is None:
            # Keras passes `mask` only to a call with one tensor argument.
            mask = keras_mask_of(hidden)
        valid = None
        if self.ignore_class is not None:
            valid = ops.not_equal(labels, self.ignore_class)
        self.add_loss(reduce_losses(losses, mask=mask, valid=valid))
        return losses

    def compute_mask(self, inputs, mask=None):
        return None if self.top_k else mask

    def compute_output_spec(self, hidden, labels=None, mask=None):
        if labels is not None:
            return keras.KerasTensor(tuple(hidden.shape[:-1]), dtype="float32")
        if self.top_k:
            shape = tuple(hidden.shape[:-1]) + (self.top_k,)
            return (
                keras.KerasTensor(shape, dtype=self.compute_dtype),
                keras.KerasTensor(shape, dtype="int32"),
            )
        return keras.KerasTensor(
            tuple(hidden.shape[:-1]) + (self.vocab_size,), dtype=self.compute_dtype
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "vocab_size": self.vocab_size,
                "use_bias": self.use_bias,
                "chunk_size": self.chunk_size,
                "ignore_class": self.ignore_class,
                "top_k": self.top_k,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config
