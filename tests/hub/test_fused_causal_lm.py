"""`keras_stable.hub.FusedCausalLM` against keras-hub's own `CausalLM.fit`.

Tiny random-weight Gemma (plain, and Gemma 2-style with a final logit soft
cap) and GPT-2 models, built without a preprocessor: the same loss curve and
the same weights as keras-hub's `fit` after a few steps (the same loss
curve under mixed_bfloat16 and mixed_float16), padding weighted
out as keras-hub's preprocessor's `sample_weight` does, logits, `generate`
and `score` unchanged, a `.keras` round trip that goes on training alike.
Skipped without keras-hub, unless `KERAS_STABLE_REQUIRE_HUB` is set.
"""

import keras
import numpy as np
import pytest

from keras_stable.hub import FusedCausalLM
from tests.backend_utils import BACKEND
from tests.backend_utils import TOLERANCES
from tests.backend_utils import import_keras_hub
from tests.backend_utils import to_numpy

keras_hub = import_keras_hub()

VOCAB, BATCH, LENGTH = 96, 4, 10
RNG = np.random.default_rng(0)
TOKEN_IDS = RNG.integers(1, VOCAB, (BATCH, LENGTH)).astype("int32")
PADDING = np.ones((BATCH, LENGTH), bool)
PADDING[1, 7:] = False
PADDING[3, 4:] = False
TOKEN_IDS[~PADDING] = 0
X = {"token_ids": TOKEN_IDS, "padding_mask": PADDING}
# What keras-hub's CausalLMPreprocessor returns: the next token as label,
# weighted by the padding mask shifted the same way.
Y = np.concatenate([TOKEN_IDS[:, 1:], np.zeros((BATCH, 1), "int32")], axis=1)
SAMPLE_WEIGHT = np.concatenate([PADDING[:, 1:], np.zeros((BATCH, 1), bool)], axis=1)
SAMPLE_WEIGHT = SAMPLE_WEIGHT.astype("float32")

# `fit`'s default on a CPU is TF graph mode (no XLA): the comparison with
# keras-hub's fit runs under XLA on TF (JAX always compiles; torch.compile
# is not what a torch user's fit runs), the other tests in graph mode.
JIT = {"jit_compile": True} if BACKEND == "tensorflow" else {}

GEMMA = dict(
    vocabulary_size=VOCAB,
    num_layers=1,
    num_query_heads=2,
    num_key_value_heads=1,
    hidden_dim=16,
    intermediate_dim=32,
    head_dim=8,
)
CONFIGS = {
    "gemma": (lambda: keras_hub.models.GemmaBackbone(**GEMMA), "GemmaCausalLM"),
    # Gemma 2's final soft cap; small, so that it changes the loss.
    "gemma2_soft_cap": (
        lambda: keras_hub.models.GemmaBackbone(
            **GEMMA,
            final_logit_soft_cap=1.5,
            attention_logit_soft_cap=50.0,
            use_post_ffw_norm=True,
            use_post_attention_norm=True,
        ),
        "GemmaCausalLM",
    ),
    "gpt2": (
        lambda: keras_hub.models.GPT2Backbone(
            vocabulary_size=VOCAB,
            num_layers=1,
            num_heads=2,
            hidden_dim=16,
            intermediate_dim=32,
            dropout=0.0,
            max_sequence_length=LENGTH,
        ),
        "GPT2CausalLM",
    ),
    # keras-hub's Llama unties its output projection by default: the
    # `ReversibleEmbedding(tie_weights=False)`'s own `(dim, vocab)` kernel.
    "llama_untied": (
        lambda: keras_hub.models.LlamaBackbone(
            vocabulary_size=VOCAB,
            num_layers=1,
            num_query_heads=2,
            num_key_value_heads=1,
            hidden_dim=16,
            intermediate_dim=32,
        ),
        "LlamaCausalLM",
    ),
}


def _causal_lm(config, seed=0):
    keras.utils.set_random_seed(seed)
    make_backbone, task = CONFIGS[config.removesuffix("_lora")]
    backbone = make_backbone()
    if config.endswith("_lora"):
        # keras-hub's parameter-efficient fine-tuning: only the LoRA
        # weights train (of the attention's query and value projections).
        backbone.enable_lora(rank=2)
    return getattr(keras_hub.models, task)(backbone, preprocessor=None)


def _twins(config):
    """Two CausalLMs with the same (random) weights."""
    reference = _causal_lm(config, seed=0)
    other = _causal_lm(config, seed=1)
    other.set_weights(reference.get_weights())
    return reference, other


def _fit(model, epochs=3):
    history = model.fit(
        X, Y, sample_weight=SAMPLE_WEIGHT, batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0
    )
    return history.history["loss"]


def _assert_same_weights(a, b, atol):
    for u, v in zip(a.get_weights(), b.get_weights(), strict=True):
        np.testing.assert_allclose(u, v, rtol=1e-5, atol=atol)


# Plain Gemma is the soft-capped one without the cap (tested below, and in
# the padding test): two configurations keep the JAX leg short. "_lora":
# with `backbone.enable_lora(rank=2)`, as keras-hub fine-tunes.
@pytest.mark.parametrize("config", ["gemma2_soft_cap_lora", "gpt2"])
def test_fit_matches_keras_hub(config):
    """Same loss curve and weights as keras-hub's own fit (its default
    compile: SparseCategoricalCrossentropy(from_logits=True)), same
    optimizer, within float32 round-off."""
    reference, wrapped = _twins(config)
    reference.compile(optimizer=keras.optimizers.Adam(1e-2), **JIT)
    model = FusedCausalLM(wrapped)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), **JIT)
    expected, got = _fit(reference), _fit(model)
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    assert got[-1] < got[0]
    # Adam divides by the root of the gradients' second moment: where a
    # gradient is ~0, its round-off moves the weight by up to ~1e-5.
    _assert_same_weights(reference, wrapped, atol=1e-5)
    if config.endswith("_lora"):
        assert len(model.trainable_weights) == 4  # LoRA's, of query and value


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_fit_matches_keras_hub(policy):
    """Under a mixed policy (Gemma 2-style soft caps; `compile` wraps the
    optimizer in a LossScaleOptimizer under mixed_float16, for both): the
    loss curve of keras-hub's own fit within the compute dtype's round-off.
    (keras-hub's GPT-2 under mixed_float16 does not run on JAX's CPU: an
    `F16_F16_F32` dot_general, its own model's.)"""
    keras.config.set_dtype_policy(policy)
    reference, wrapped = _twins("gemma2_soft_cap")
    assert wrapped.backbone.token_embedding.compute_dtype == policy.removeprefix("mixed_")
    reference.compile(optimizer=keras.optimizers.Adam(1e-2), **JIT)
    model = FusedCausalLM(wrapped)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), **JIT)
    if policy == "mixed_float16":
        assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    expected, got = _fit(reference), _fit(model)
    assert np.isfinite(got).all() and got[-1] < got[0]
    rtol, atol = TOLERANCES[policy.removeprefix("mixed_")]
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


@pytest.mark.jax
@pytest.mark.parametrize("kind", ["data_parallel", "model_parallel"])
def test_fit_on_two_devices_matches_keras_hub_on_one(kind):
    """`keras.distribution` over the pytest process's two host devices
    (tests/conftest.py): `DataParallel`, and `ModelParallel` with
    keras-hub's own Gemma layout map, which shards the token embedding
    over the vocabulary (the fused loss reads it sharded in place). The
    loss curve is keras-hub's fit on one device."""
    import jax

    devices = jax.devices()
    if len(devices) < 2:
        pytest.skip("needs XLA_FLAGS=--xla_force_host_platform_device_count=2 before JAX starts")
    devices = devices[:2]
    # Two key/value heads: the layout map shards the heads over "model".
    config = dict(GEMMA, num_key_value_heads=2, final_logit_soft_cap=1.5)
    keras.utils.set_random_seed(0)
    reference = keras_hub.models.GemmaCausalLM(
        keras_hub.models.GemmaBackbone(**config), preprocessor=None
    )
    reference.compile(optimizer=keras.optimizers.Adam(1e-2))
    if kind == "data_parallel":
        distribution = keras.distribution.DataParallel(devices=devices)
        spec = (None, None)
    else:
        mesh = keras.distribution.DeviceMesh((1, 2), ["batch", "model"], devices)
        layout_map = keras_hub.models.GemmaBackbone.get_layout_map(mesh)
        distribution = keras.distribution.ModelParallel(
            layout_map=layout_map, batch_dim_name="batch"
        )
        spec = ("model", "batch")
    previous = keras.distribution.distribution()
    keras.distribution.set_distribution(distribution)
    try:
        causal_lm = keras_hub.models.GemmaCausalLM(
            keras_hub.models.GemmaBackbone(**config), preprocessor=None
        )
        causal_lm.set_weights(reference.get_weights())
        model = FusedCausalLM(causal_lm)
        model.compile(optimizer=keras.optimizers.Adam(1e-2))
        got = _fit(model)
    finally:
        keras.distribution.set_distribution(previous)
    sharding = causal_lm.backbone.token_embedding.embeddings.value.sharding
    assert len(sharding.device_set) == 2 and tuple(sharding.spec) == spec
    np.testing.assert_allclose(got, _fit(reference), rtol=1e-5)


def _keras_hub_token_losses(causal_lm):
    logits = causal_lm(X)
    return to_numpy(keras.losses.sparse_categorical_crossentropy(Y, logits, from_logits=True))


def test_soft_cap_is_honoured():
    causal_lm = _causal_lm("gemma2_soft_cap")
    assert causal_lm.backbone.token_embedding.logit_soft_cap == 1.5
    model = FusedCausalLM(causal_lm)
    hidden = causal_lm.backbone(X)
    fused = to_numpy(model.token_losses(hidden, Y))
    np.testing.assert_allclose(fused, _keras_hub_token_losses(causal_lm), rtol=1e-5, atol=1e-6)
    # Without the cap the loss is another one: the cap is not a no-op here.
    causal_lm.backbone.token_embedding.logit_soft_cap = None
    uncapped = _keras_hub_token_losses(causal_lm)
    assert np.abs(fused - uncapped).max() > 1e-2


def test_untied_output_projection():
    """Llama's separate reverse kernel: the loss of keras-hub's logits, and
    (on torch, the quickest to fit; the path is the same on every backend)
    the same training."""
    causal_lm = _causal_lm("llama_untied")
    assert not causal_lm.backbone.token_embedding.tie_weights
    model = FusedCausalLM(causal_lm)
    fused = to_numpy(model.token_losses(causal_lm.backbone(X), Y))
    np.testing.assert_allclose(fused, _keras_hub_token_losses(causal_lm), rtol=1e-5, atol=1e-6)
    if BACKEND != "torch":
        return
    reference, wrapped = _twins("llama_untied")
    reference.compile(optimizer=keras.optimizers.Adam(1e-2))
    model = FusedCausalLM(wrapped)
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    np.testing.assert_allclose(_fit(model), _fit(reference), rtol=1e-5)
    _assert_same_weights(reference, wrapped, atol=1e-5)


def test_padding_counts_for_nothing():
    """keras-hub's reduction: sum(sample_weight * loss) over all
    batch * length tokens; a padded token's label (even out of range)
    changes neither the loss nor the gradient."""
    causal_lm = _causal_lm("gemma")
    model = FusedCausalLM(causal_lm)
    model.compile(optimizer=keras.optimizers.SGD(0.1))
    expected = np.sum(_keras_hub_token_losses(causal_lm) * SAMPLE_WEIGHT) / Y.size
    loss = model.evaluate(X, Y, sample_weight=SAMPLE_WEIGHT, verbose=0)
    np.testing.assert_allclose(loss, expected, rtol=1e-5)
    garbage = np.where(SAMPLE_WEIGHT > 0, Y, VOCAB + 5)
    np.testing.assert_allclose(
        model.evaluate(X, garbage, sample_weight=SAMPLE_WEIGHT, verbose=0), loss, rtol=1e-6
    )
    twin = _causal_lm("gemma", seed=1)
    twin.set_weights(causal_lm.get_weights())
    other = FusedCausalLM(twin)
    other.compile(optimizer=keras.optimizers.SGD(0.1))
    model.fit(X, Y, sample_weight=SAMPLE_WEIGHT, batch_size=BATCH, verbose=0)
    other.fit(X, garbage, sample_weight=SAMPLE_WEIGHT, batch_size=BATCH, verbose=0)
    _assert_same_weights(causal_lm, twin, atol=1e-9)


def test_inference_generate_and_score_are_the_causal_lms():
    causal_lm = _causal_lm("gpt2")
    model = FusedCausalLM(causal_lm)
    np.testing.assert_array_equal(to_numpy(model(X)), to_numpy(causal_lm(X)))
    np.testing.assert_array_equal(model.predict(X, verbose=0), causal_lm.predict(X, verbose=0))
    np.testing.assert_array_equal(
        to_numpy(model.score(TOKEN_IDS, padding_mask=PADDING)), to_numpy(causal_lm(X))
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-2), sampler="greedy")
    _fit(model, epochs=1)
    # Generation after fine-tuning, from token ids (no preprocessor): the
    # prompt is kept, the rest is filled with tokens of the vocabulary.
    prompt = {"token_ids": TOKEN_IDS, "padding_mask": PADDING}
    out = model.generate(prompt, stop_token_ids=None)
    ids = to_numpy(out["token_ids"])
    assert ids.shape == (BATCH, LENGTH)
    np.testing.assert_array_equal(ids[PADDING], TOKEN_IDS[PADDING])
    assert ((ids >= 0) & (ids < VOCAB)).all()
    # Greedy: the first generated token is the argmax of the logits.
    first = int(PADDING[3].sum())
    logits = to_numpy(causal_lm(X))[3, first - 1]
    assert ids[3, first] == int(np.argmax(logits))


def test_keras_round_trip(tmp_path):
    reference, wrapped = _twins("gemma2_soft_cap")
    model = FusedCausalLM(wrapped, chunk_size=32)
    model.compile(optimizer=keras.optimizers.Adam(1e-2))
    _fit(model, epochs=2)
    path = str(tmp_path / "fused.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, FusedCausalLM)
    assert loaded.chunk_size == 32
    assert isinstance(loaded.causal_lm, keras_hub.models.GemmaCausalLM)
    assert loaded.causal_lm.backbone.token_embedding.logit_soft_cap == 1.5
    np.testing.assert_array_equal(to_numpy(loaded(X)), to_numpy(model(X)))
    # The optimizer's state came back: one more step agrees.
    np.testing.assert_allclose(_fit(loaded, epochs=1), _fit(model, epochs=1), rtol=1e-6)
    _assert_same_weights(loaded, model, atol=1e-6)


def test_bad_arguments():
    with pytest.raises(TypeError, match="keras_hub.models.CausalLM"):
        FusedCausalLM(keras.Sequential([keras.layers.Dense(2)]))
    with pytest.raises(TypeError, match="keras_hub.models.CausalLM"):
        FusedCausalLM("gemma_2b_en")
    causal_lm = _causal_lm("gemma")
    with pytest.raises(ValueError, match="chunk_size"):
        FusedCausalLM(causal_lm, chunk_size=0)
    model = FusedCausalLM(causal_lm)
    with pytest.raises(ValueError, match="loss"):
        model.compile(loss="mse")
    with pytest.raises(ValueError, match="weighted_metrics"):
        model.compile(weighted_metrics=[keras.metrics.SparseCategoricalAccuracy()])
    with pytest.raises(ValueError, match="metrics"):
        model.compile(metrics=["accuracy"])


def test_logits_after_the_embedding_are_refused():
    """A CausalLM whose logits are not the reverse embedding's output (here
    scaled afterwards) would train on another loss: refused."""
    backbone = CONFIGS["gemma"][0]()

    class ScaledCausalLM(keras_hub.models.CausalLM):
        def __init__(self, backbone, **kwargs):
            self.backbone = backbone
            self.preprocessor = None
            inputs = backbone.input
            logits = backbone.token_embedding(backbone(inputs), reverse=True)
            super().__init__(inputs=inputs, outputs=keras.layers.Rescaling(2.0)(logits), **kwargs)

    with pytest.raises(ValueError, match="reverse=True"):
        FusedCausalLM(ScaledCausalLM(backbone))
