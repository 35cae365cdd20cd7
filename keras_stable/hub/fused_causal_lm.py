"""`FusedCausalLM`: fine-tune a keras-hub `CausalLM` without its logits."""

import keras

from keras_stable import ops as stable_ops
from keras_stable.common.checks import check_positive_int
from keras_stable.common.keras_internals import call_inputs
from keras_stable.common.keras_internals import embedding_matrix
from keras_stable.common.keras_internals import producer
from keras_stable.common.keras_internals import reverse_embedding_matrix
from keras_stable.common.reduction import reduce_losses
from keras_stable.common.serialization import register

INSTALL_HINT = (
    "keras_stable.hub needs keras-hub: `pip install keras_stable[hub]` (or "
    "`pip install --no-deps keras-hub` plus its pure-Python dependencies, "
    "to keep TensorFlow out: see docs/hub.md)."
)


def import_keras_hub():
    """`keras_hub`, imported on first use: `keras_stable.hub` itself loads
    without it (the docs build, users of the rest of keras_stable)."""
    try:
        import keras_hub
    except ImportError as error:
        raise ImportError(INSTALL_HINT) from error
    return keras_hub


def _called_on(tensor, layer):
    """The KerasTensors `layer` took to make `tensor` (a flat list), or
    None where `tensor` is not the output of a call of `layer`."""
    made = producer(tensor)
    if made is None or made[0] is not layer:
        return None
    return keras.tree.flatten(call_inputs(*made))


def _check_causal_lm(causal_lm):
    """Checks that `causal_lm` is a keras-hub `CausalLM` whose logits are
    `backbone.token_embedding(backbone(inputs), reverse=True)`: nothing
    after the reverse embedding (a slice, a cap of its own) that the fused
    loss would skip."""
    keras_hub = import_keras_hub()
    if not isinstance(causal_lm, keras_hub.models.CausalLM):
        raise TypeError(
            "`causal_lm` must be a `keras_hub.models.CausalLM` (e.g. "
            f"`GemmaCausalLM`, `GPT2CausalLM`), got {type(causal_lm).__name__}: "
            f"{causal_lm!r}."
        )
    backbone = causal_lm.backbone
    embedding = getattr(backbone, "token_embedding", None)
    if not isinstance(embedding, keras.layers.ReversibleEmbedding):
        raise ValueError(
            f"{type(causal_lm).__name__}'s backbone has no `token_embedding` "
            "`keras.layers.ReversibleEmbedding` (got "
            f"{type(embedding).__name__}): FusedCausalLM computes the logits "
            "as that layer's reverse projection."
        )
    # Walk the functional graph back from the logits: embedding(reverse),
    # then the backbone, called on the CausalLM's own inputs. (The reverse
    # call is the only one of the embedding on a float hidden state.)
    outputs = causal_lm.outputs
    hidden = _called_on(outputs[0], embedding) if len(outputs) == 1 else None
    feeds = _called_on(hidden[0], backbone) if hidden and len(hidden) == 1 else None
    if feeds is None or {id(t) for t in feeds} != {id(t) for t in causal_lm.inputs}:
        raise ValueError(
            f"{type(causal_lm).__name__}'s logits are not "
            "`backbone.token_embedding(backbone(inputs), reverse=True)`: "
            "FusedCausalLM supports the CausalLMs whose output is exactly "
            "that (GemmaCausalLM, GPT2CausalLM, Llama, Mistral, ...), not "
            "those that slice the logits or cap them outside the embedding."
        )


@register
class FusedCausalLM(keras.Model):
    """A keras-hub `CausalLM` that trains without materialising its logits.

    keras-hub's `CausalLM.fit` computes `SparseCategoricalCrossentropy(
    from_logits=True)` over the full `[batch, sequence, vocabulary]`
    logits — 2 GiB in float32 for 2048 tokens at Gemma's 256k vocabulary,
    and as much again for their gradient. `FusedCausalLM(causal_lm)` wraps
    the model, sharing its layers and weights: in `fit` and `evaluate` its
    forward stops at the backbone's final hidden states, and the loss is
    `keras_stable.ops.linear_softmax_cross_entropy` over the tied token
    embeddings, read in place (`transpose_kernel=True`), with the
    embedding's `logit_soft_cap` (Gemma 2's `final_logit_soft_cap`) — the
    same per-token cross-entropy, computed block by block.

    The loss is keras-hub's own: the mean over all `batch * sequence`
    tokens of `sample_weight * cross_entropy`, where `sample_weight` is the
    padding mask keras-hub's `CausalLMPreprocessor` returns as the third
    element of `(x, y, sample_weight)` (Keras's `"sum_over_batch_size"`
    reduction), plus the model's regularisation losses. A weight of 0
    contributes exactly 0, even where the token's loss is not finite.

    Calling the model, `predict`, `generate` and `score` are the wrapped
    model's: they return logits (and tokens) as before. Fine-tuning changes
    the wrapped model's weights in place, so `causal_lm.generate(...)`
    after `fused.fit(...)` uses the new weights.

    Args:
        causal_lm: a `keras_hub.models.CausalLM` whose logits are
            `backbone.token_embedding(backbone(inputs), reverse=True)`
            (`GemmaCausalLM`, `GPT2CausalLM`, `LlamaCausalLM`, ...; a
            `ReversibleEmbedding(tie_weights=False)` is read through its
            reverse kernel).
        chunk_size: optional int, vocabulary columns per block (see
            `keras_stable.ops.linear_softmax_cross_entropy`; by default a
            block holds about 2**21 logits).
        **kwargs: passed to `keras.Model` (`name`).

    Compile arguments (`compile`): `optimizer` (default `"auto"`: keras-hub's
    `Adam(2e-5)`), `loss="auto"` (the fused cross-entropy: no other loss is
    accepted), `sampler` (passed to the wrapped model's `generate`), and the
    other arguments of `keras.Model.compile`. `metrics` and
    `weighted_metrics` are not accepted: during `fit` the model's output
    is the hidden states, not the logits a metric like
    `SparseCategoricalAccuracy` (keras-hub's default) reads.

    Numerical stability:
        The cross-entropy is computed in float32 from the hidden states and
        the embeddings whatever the model's dtype policy (keras-hub computes
        the logits in the compute dtype, e.g. bfloat16, before its float32
        loss), with an online log-sum-exp over blocks of the vocabulary and
        a hand-written gradient; see `linear_softmax_cross_entropy`. A
        label outside `[0, vocabulary)` with a nonzero weight gives NaN
        (never the loss of a clamped index); with weight 0 it gives 0.

    Examples:
        (A fenced example, not a doctest: keras-hub is an optional extra;
        `examples/keras_hub_causal_lm.py` runs it.)

        ```python
        import keras_hub
        import keras_stable

        backbone = keras_hub.models.GemmaBackbone(
            vocabulary_size=256, num_layers=1, num_query_heads=2,
            num_key_value_heads=1, hidden_dim=16, intermediate_dim=32,
            head_dim=8, final_logit_soft_cap=30.0,
        )
        causal_lm = keras_hub.models.GemmaCausalLM(backbone, preprocessor=None)
        model = keras_stable.hub.FusedCausalLM(causal_lm)
        model.compile(optimizer=keras.optimizers.Adam(1e-3))
        # x = {"token_ids", "padding_mask"}, y = next tokens, sample_weight =
        # the padding mask of y: what keras-hub's CausalLMPreprocessor returns.
        model.fit(x, y, sample_weight=sample_weight, epochs=1)
        model.generate({"token_ids": token_ids, "padding_mask": padding_mask})
        ```
    """

    def __init__(self, causal_lm, chunk_size=None, **kwargs):
        _check_causal_lm(causal_lm)
        if chunk_size is not None:
            chunk_size = check_positive_int(chunk_size, "chunk_size")
        kwargs.setdefault("dtype", causal_lm.dtype_policy)
        super().__init__(**kwargs)
        self.causal_lm = causal_lm
        self.chunk_size = chunk_size
        # True while `train_step`/`test_step` trace or run: the forward
        # then returns the hidden states that `compute_loss` projects.
        self._hidden_outputs = False
        self.built = True

    # -- The wrapped model ---------------------------------------------

    @property
    def backbone(self):
        """The wrapped model's backbone (shared, not copied)."""
        return self.causal_lm.backbone

    @property
    def preprocessor(self):
        """The wrapped model's preprocessor (None when it has none)."""
        return self.causal_lm.preprocessor

    def call(self, inputs, training=None):
        if self._hidden_outputs:
            return self.causal_lm.backbone(inputs, training=training)
        return self.causal_lm(inputs, training=training)

    def generate(self, *args, **kwargs):
        """The wrapped model's `generate` (same arguments and result)."""
        return self.causal_lm.generate(*args, **kwargs)

    def score(self, *args, **kwargs):
        """The wrapped model's `score`, where it has one."""
        if not hasattr(self.causal_lm, "score"):
            raise AttributeError(f"{type(self.causal_lm).__name__} has no `score` method.")
        return self.causal_lm.score(*args, **kwargs)

    # -- Training --------------------------------------------------------

    def compile(
        self,
        optimizer="auto",
        loss="auto",
        *,
        metrics=None,
        weighted_metrics="auto",
        sampler=None,
        **kwargs,
    ):
        """Configures training; see the class docstring for the arguments."""
        if loss not in ("auto", None):
            raise ValueError(
                f"FusedCausalLM's loss is the fused sparse cross-entropy, got "
                f"loss={loss!r}: leave `loss` as 'auto' (or compile the wrapped "
                "CausalLM for another loss)."
            )
        if weighted_metrics == "auto":
            weighted_metrics = None
        for name, value in (("metrics", metrics), ("weighted_metrics", weighted_metrics)):
            if value:
                raise ValueError(
                    f"FusedCausalLM does not take `{name}` (got {value!r}): during "
                    "`fit` and `evaluate` its output is the hidden states, not "
                    "the logits a metric reads. The loss is tracked; compute "
                    "metrics on `predict`'s logits or the wrapped model's "
                    "`evaluate`."
                )
        if isinstance(optimizer, str) and optimizer == "auto":
            optimizer = keras.optimizers.Adam(2e-5)  # keras-hub's CausalLM default
        if sampler is not None:
            keras_hub = import_keras_hub()
            self.causal_lm.sampler = keras_hub.samplers.get(sampler)
            self.causal_lm.generate_function = None
        super().compile(optimizer=optimizer, **kwargs)

    def train_step(self, *args, **kwargs):
        with _HiddenOutputs(self):
            return super().train_step(*args, **kwargs)

    def test_step(self, *args, **kwargs):
        with _HiddenOutputs(self):
            return super().test_step(*args, **kwargs)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """keras-hub's `CausalLM` loss, from the hidden states `y_pred`.

        Outside `train_step`/`test_step` (`y_pred` then holds the logits
        of a call), the same loss from the logits.
        """
        del x, training
        if self._hidden_outputs:
            per_token = self.token_losses(y_pred, y)
        else:
            per_token = keras.losses.sparse_categorical_crossentropy(
                y, keras.ops.cast(y_pred, "float32"), from_logits=True
            )
        losses = [reduce_losses(per_token, sample_weight, reduction="sum_over_batch_size")]
        losses.extend(keras.ops.sum(keras.ops.cast(loss, "float32")) for loss in self.losses)
        return losses[0] if len(losses) == 1 else keras.ops.sum(keras.ops.stack(losses))

    def token_losses(self, hidden_states, labels):
        """Per-token cross-entropy of the wrapped model's logits at
        `hidden_states` (the backbone's output), float32, of `labels`'
        shape — computed without the logits."""
        embedding = self.causal_lm.backbone.token_embedding
        tied = getattr(embedding, "tie_weights", True)
        kernel = embedding_matrix(embedding) if tied else reverse_embedding_matrix(embedding)
        return stable_ops.linear_softmax_cross_entropy(
            hidden_states,
            kernel,
            keras.ops.cast(labels, "int32"),
            chunk_size=self.chunk_size,
            transpose_kernel=tied,
            logit_soft_cap=getattr(embedding, "logit_soft_cap", None),
        )

    # -- Serialization --------------------------------------------------

    def get_config(self):
        causal_lm = keras.saving.serialize_keras_object(self.causal_lm)
        # The wrapped model's compile state is not what trains (this model's
        # is), and keras-hub's custom `compile` cannot be restored from it
        # (Keras warns): the loaded CausalLM gets its class's default
        # compilation (its default sampler), as keras-hub builds it.
        causal_lm.pop("compile_config", None)
        return {"name": self.name, "causal_lm": causal_lm, "chunk_size": self.chunk_size}

    def compile_from_config(self, config):
        """Compiles as the saved model was (`keras.saving.load_model`),
        then builds the optimizer so that its saved state loads."""
        config = keras.saving.deserialize_keras_object(config)
        self.compile(**config)
        if self.built:
            self.optimizer.build(self.trainable_variables)

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        import_keras_hub()  # registers keras-hub's classes
        config["causal_lm"] = keras.saving.deserialize_keras_object(config["causal_lm"])
        return cls(**config)


class _HiddenOutputs:
    """Sets `model._hidden_outputs` for the duration of a step."""

    def __init__(self, model):
        self.model = model

    def __enter__(self):
        self.previous = self.model._hidden_outputs
        self.model._hidden_outputs = True

    def __exit__(self, *exc):
        self.model._hidden_outputs = self.previous
        return False
