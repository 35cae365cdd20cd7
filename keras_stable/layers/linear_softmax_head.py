"""`LinearSoftmaxHead`: a large-vocabulary output layer that trains without
materialising its logits."""

import warnings

import keras
from keras import ops

from keras_stable import ops as stable_ops
from keras_stable.common.checks import check_bool
from keras_stable.common.checks import check_ignore_class
from keras_stable.common.checks import check_positive_int
from keras_stable.common.keras_internals import call_inputs
from keras_stable.common.keras_internals import embedding_matrix
from keras_stable.common.keras_internals import producer
from keras_stable.common.keras_internals import replace_sublayer
from keras_stable.common.keras_internals import reverse_embedding_matrix
from keras_stable.common.reduction import keras_mask_of
from keras_stable.common.reduction import reduce_losses
from keras_stable.common.serialization import register
from keras_stable.ops.linear_cross_entropy import head_options


def _check_tied_embedding(layer, vocab_size):
    if layer is None:
        return None
    if not isinstance(layer, keras.layers.Embedding):
        raise ValueError(
            "`tied_embedding` must be a `keras.layers.Embedding` or "
            f"`ReversibleEmbedding` layer, got {layer!r}."
        )
    if layer.input_dim != vocab_size:
        raise ValueError(
            f"`tied_embedding` {layer.name!r} has input_dim {layer.input_dim}, "
            f"but vocab_size={vocab_size}: a tied head's classes are the "
            "embedding's rows."
        )
    return layer


def _upstream_layer(name, tensors):
    """The layer called `name` that (transitively) feeds the Keras tensors
    in `tensors`, or None (no such layer, or eager tensors)."""
    stack = [t for t in keras.tree.flatten(tensors) if isinstance(t, keras.KerasTensor)]
    seen = set()
    while stack:
        produced = producer(stack.pop())
        if produced is None or id(produced[0]) in seen:
            continue
        operation, node_index = produced
        seen.add(id(operation))
        if operation.name == name and isinstance(operation, keras.layers.Embedding):
            return operation
        stack.extend(call_inputs(operation, node_index))
    return None


def _tied_kernel_is_transposed(layer):
    # An `Embedding`'s weights are `(vocab, dim)`; a `ReversibleEmbedding`
    # with `tie_weights=False` keeps its own `(dim, vocab)` reverse kernel.
    return getattr(layer, "tie_weights", True)


def _resolved_soft_cap(logit_soft_cap, layer):
    own = getattr(layer, "logit_soft_cap", None)
    if logit_soft_cap is None or own is None:
        return own if logit_soft_cap is None else logit_soft_cap
    if float(own) != float(logit_soft_cap):
        raise ValueError(
            f"`logit_soft_cap`={logit_soft_cap} differs from the tied "
            f"ReversibleEmbedding {layer.name!r}'s logit_soft_cap={own}: "
            "leave one of them None."
        )
    return logit_soft_cap


@register
class LinearSoftmaxHead(keras.layers.Layer):
    """Output projection + softmax cross-entropy for large vocabularies.

    The layer owns a `[dim, vocab_size]` kernel (and a bias), or uses the
    weights of a tied `Embedding`/`ReversibleEmbedding` of the same model
    (`tied_embedding`: one weight in the model and in the `.keras` file, read
    in place as the `(vocab, dim)` matrix it is). Called with
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
        tied_embedding: optional `keras.layers.Embedding` or
            `keras.layers.ReversibleEmbedding` with `input_dim == vocab_size`
            and `output_dim` the hidden width: the head projects with its
            weights (the reverse embeddings of a
            `ReversibleEmbedding(tie_weights=False)`) and owns no kernel.
            The tie survives `keras.saving.load_model`, and
            `keras.models.clone_model` / `Model.from_config`, where the
            rebuilt head ties to the rebuilt embedding of the same name
            upstream of its inputs (a warning where there is none). A
            quantized embedding (`model.quantize("int8")` or `"int4"`
            quantizes every `Embedding` of the model, before or after the
            head is built) is read dequantized, at each call, as Keras's
            `ReversibleEmbedding(reverse=True)` reads it (without
            quantizing the hidden states: Keras's reverse pass does).
            `model.quantize` leaves the head's own kernel in float (Keras
            warns that the layer has no `quantize`).
        label_smoothing: float in [0, 1], as in Keras's
            `CategoricalCrossentropy` (the target is
            `(1 - e) onehot + e / vocab_size`).
        z_loss: float >= 0: adds `z_loss * logsumexp(logits)**2` per token.
        logit_soft_cap: optional float > 0: logits `c * tanh(logits / c)`,
            in the loss and at inference. None with a tied
            `ReversibleEmbedding` takes that layer's `logit_soft_cap`.
        return_entropy: bool: a call with labels also returns the entropy
            of the softmax per token (`(losses, entropies)`), computed in
            blocks as the loss, without the logits (an entropy bonus or a
            confidence score); the entropy is not added to the loss. The
            method `entropy(hidden)` gives it at any time.
        **kwargs: base layer arguments (`name`, `dtype`...).

    Call arguments:
        hidden: `[..., dim]` hidden states.
        labels: optional integer labels of shape `hidden.shape[:-1]`.
        mask: optional Keras mask of `hidden` (e.g. from
            `Embedding(mask_zero=True)`): masked tokens count for nothing in
            the loss, as in Keras's losses.
        sample_weight: optional weights of the tokens (`(batch,)` or
            `labels`' shape), as a Keras loss's `sample_weight`: the added
            loss is `sum(w * loss) / counted tokens`.

    Returns:
        With labels: the per-token losses (float32, 0 where not counted);
        with `return_entropy=True`, `(losses, entropies)` (float32, the
        entropy of every token, counted or not).
        Without: logits `[..., vocab_size]` (or the `(values, indices)` of
        the `top_k`), computed and returned in float32 whatever the dtype
        policy: under `mixed_float16` a float16 logit would overflow to inf
        past 65504 and lose the differences that sampling reads (Keras's
        mixed-precision guide keeps a model's softmax output in float32
        for the same reason). The policy still decides the operands: the
        hidden states and the weights enter in its compute dtype (Keras's
        autocast), their products are summed in float32.

    Numerical stability:
        The loss is an online log-sum-exp in float32 (also for
        mixed-precision hidden states) with a hand-written gradient that
        recomputes each block of logits: the transient memory of a training
        step does not grow with `vocab_size`. The added loss is the mean over
        the counted tokens (0, not NaN, when none is counted).

    Examples:
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
        tied_embedding=None,
        label_smoothing=0.0,
        z_loss=0.0,
        logit_soft_cap=None,
        return_entropy=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocab_size = check_positive_int(vocab_size, "vocab_size")
        self.use_bias = check_bool(use_bias, "use_bias")
        self.chunk_size = check_positive_int(chunk_size, "chunk_size", allow_none=True)
        self.ignore_class = check_ignore_class(ignore_class)
        self.top_k = check_positive_int(top_k, "top_k", allow_none=True)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.tied_embedding = _check_tied_embedding(tied_embedding, self.vocab_size)
        self.label_smoothing = label_smoothing
        self.z_loss = z_loss
        self.logit_soft_cap = logit_soft_cap
        self.return_entropy = check_bool(return_entropy, "return_entropy")
        self._options = head_options(
            self.tied_embedding is not None and _tied_kernel_is_transposed(self.tied_embedding),
            label_smoothing,
            z_loss,
            _resolved_soft_cap(logit_soft_cap, self.tied_embedding),
        )
        self.supports_masking = True

    def build(self, hidden_shape, labels_shape=None):
        dim = hidden_shape[-1]
        if dim is None:
            raise ValueError(
                "LinearSoftmaxHead needs a static last dimension, got hidden "
                f"states of shape {hidden_shape}."
            )
        if self.tied_embedding is None:
            self._kernel = self.add_weight(
                shape=(dim, self.vocab_size), initializer=self.kernel_initializer, name="kernel"
            )
        else:
            if not self.tied_embedding.built:
                self.tied_embedding.build(None)
            width = self.tied_embedding.output_dim
            if width != dim:
                raise ValueError(
                    f"`tied_embedding` {self.tied_embedding.name!r} has width "
                    f"(output_dim) {width}, but the hidden states have shape "
                    f"{hidden_shape}: their last dimension must be {width}."
                )
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight(
                shape=(self.vocab_size,), initializer=self.bias_initializer, name="bias"
            )

    @property
    def kernel(self):
        """The projection's weight: the head's own `(dim, vocab)` kernel, or
        the tied embedding's (`(vocab, dim)` embeddings, or a
        `ReversibleEmbedding(tie_weights=False)`'s `(dim, vocab)` reverse
        embeddings). The variable itself, except for a quantized tied
        embedding: then the matrix its codes stand for (dequantized in
        float32 from the embedding's current state, as Keras's
        `ReversibleEmbedding(reverse=True)` does)."""
        tied = self.tied_embedding
        if tied is None:
            return self._kernel
        if _tied_kernel_is_transposed(tied):
            return embedding_matrix(tied)
        return reverse_embedding_matrix(tied)

    def logits(self, hidden):
        """The (soft-capped) logits `[..., vocab_size]`, computed and
        returned in float32 (see the class's `Returns:`)."""
        hidden = ops.cast(hidden, "float32")
        kernel = ops.cast(self.kernel, "float32")
        if self._options.transpose_kernel:
            kernel = ops.transpose(kernel)
        logits = ops.matmul(hidden, kernel)
        if self.bias is not None:
            # Explicit broadcasting (JAX's `jax_numpy_rank_promotion="raise"`).
            bias = ops.cast(self.bias, "float32")
            logits = logits + ops.reshape(bias, (1,) * (len(logits.shape) - 1) + (-1,))
        return self._options.cap(logits)

    def entropy(self, hidden):
        """The entropy of the softmax per token, `hidden.shape[:-1]`,
        float32, without forming the logits
        (`keras_stable.ops.linear_softmax_entropy`, in blocks of
        `chunk_size`, with the head's soft cap and tied kernel)."""
        options = self._options
        return stable_ops.linear_softmax_entropy(
            hidden,
            self.kernel,
            bias=self.bias,
            chunk_size=self.chunk_size,
            transpose_kernel=options.transpose_kernel,
            logit_soft_cap=options.soft_cap,
        )

    def call(self, hidden, labels=None, mask=None, sample_weight=None):
        if labels is None:
            logits = self.logits(hidden)
            if self.top_k:
                return ops.top_k(logits, self.top_k)
            return logits
        labels = ops.convert_to_tensor(labels)
        if not keras.backend.standardize_dtype(labels.dtype).startswith("int"):
            labels = ops.cast(labels, "int32")
        options = self._options
        losses = stable_ops.linear_softmax_cross_entropy(
            hidden,
            self.kernel,
            labels,
            bias=self.bias,
            chunk_size=self.chunk_size,
            ignore_class=self.ignore_class,
            transpose_kernel=options.transpose_kernel,
            label_smoothing=options.label_smoothing,
            z_loss=options.z_loss,
            logit_soft_cap=options.soft_cap,
        )
        if mask is None:
            # Keras passes `mask` only to a call with one tensor argument.
            mask = keras_mask_of(hidden)
        valid = None
        if self.ignore_class is not None:
            valid = ops.not_equal(labels, self.ignore_class)
        self.add_loss(reduce_losses(losses, sample_weight=sample_weight, mask=mask, valid=valid))
        if self.return_entropy:
            return losses, self.entropy(hidden)
        return losses

    def compute_mask(self, inputs, mask=None):
        return None if self.top_k else mask

    def compute_output_spec(self, hidden, labels=None, mask=None, sample_weight=None):
        if labels is not None:
            per_token = keras.KerasTensor(tuple(hidden.shape[:-1]), dtype="float32")
            if self.return_entropy:
                return per_token, keras.KerasTensor(tuple(hidden.shape[:-1]), dtype="float32")
            return per_token
        if self.top_k:
            shape = tuple(hidden.shape[:-1]) + (self.top_k,)
            return (
                keras.KerasTensor(shape, dtype="float32"),
                keras.KerasTensor(shape, dtype="int32"),
            )
        return keras.KerasTensor(tuple(hidden.shape[:-1]) + (self.vocab_size,), dtype="float32")

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
                # Saved as a reference: inside `model.save`, Keras's object
                # sharing makes it the model's own layer again on loading.
                "tied_embedding": None
                if self.tied_embedding is None
                else keras.saving.serialize_keras_object(self.tied_embedding),
                "label_smoothing": self.label_smoothing,
                "z_loss": self.z_loss,
                "logit_soft_cap": self.logit_soft_cap,
                "return_entropy": self.return_entropy,
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        tied = config.get("tied_embedding")
        if not isinstance(tied, dict):
            return cls(**config)
        # Inside `keras.saving.load_model`, Keras's object sharing gives back
        # the model's own layer. Elsewhere (`keras.models.clone_model`,
        # `Model.from_config`) this is a copy of the embedding: the head
        # ties to the layer of that name upstream of it on its first call.
        config["tied_embedding"] = keras.saving.deserialize_keras_object(tied)
        layer = cls(**config)
        if "shared_object_id" not in tied:
            layer._tie_by_name = config["tied_embedding"].name
        return layer

    def __call__(self, *args, **kwargs):
        name = getattr(self, "_tie_by_name", None)
        if name is not None:
            self._tie_by_name = None
            self._retie(_upstream_layer(name, (args, kwargs)), name)
        return super().__call__(*args, **kwargs)

    def _retie(self, upstream, name):
        copy = self.tied_embedding
        if upstream is None:
            warnings.warn(
                f"LinearSoftmaxHead {self.name!r}: its tied embedding {name!r} was "
                "not found upstream of its inputs (a head rebuilt from its config "
                "outside `keras.saving.load_model`, called on eager tensors or on "
                "inputs that do not come from that embedding): it uses a copy of "
                "its own, tied to nothing. Pass `tied_embedding=` the model's layer.",
                stacklevel=3,
            )
            return
        if upstream is copy:
            return
        if upstream.get_config() != copy.get_config():
            raise ValueError(
                f"LinearSoftmaxHead {self.name!r}: the layer {name!r} upstream of it "
                "is configured differently from the tied embedding in its config "
                f"({upstream.get_config()} against {copy.get_config()})."
            )
        # Deserialising a built model builds the head (and the copy) first.
        replace_sublayer(self, "tied_embedding", upstream)
