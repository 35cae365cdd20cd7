"""`LinearSoftmaxHead` with a tied embedding and the head's options, as a
user trains it: the numbers of `ReversibleEmbedding(reverse=True)` /
`Dense` + Keras's cross-entropy (sample weights and Keras masks included),
one weight in the model and the `.keras` file, the tie kept after loading
in a fresh process, bad arguments named."""

import os
import warnings

import keras
import numpy as np
import pytest

import keras_stable
from tests.backend_utils import BACKEND
from tests.backend_utils import KERAS_3_16
from tests.backend_utils import to_numpy
from tests.integration._fresh_process import run_fresh

JIT = BACKEND in ("tensorflow", "jax")
VOCAB, DIM, STEPS = 61, 8, 6
RNG = np.random.default_rng(0)
TOKENS = RNG.integers(1, VOCAB, (8, STEPS)).astype("int32")
TOKENS[0, 3:] = 0  # padding: masked by Embedding(mask_zero=True)
LABELS = np.roll(TOKENS, -1, axis=1)
WEIGHTS = RNG.uniform(0.0, 2.0, (8, STEPS)).astype("float32")


def _tied_models(
    embedding_cls=keras.layers.ReversibleEmbedding,
    seed=0,
    mask_zero=True,
    embed_kwargs=None,
    **head,
):
    """Train model (`fused`) and Keras's own head (`plain`) over one embedding."""
    keras.utils.set_random_seed(seed)
    tokens = keras.Input((STEPS,), dtype="int32")
    labels = keras.Input((STEPS,), dtype="int32")
    weights = keras.Input((STEPS,), dtype="float32")
    embed = embedding_cls(VOCAB, DIM, mask_zero=mask_zero, name="embed", **(embed_kwargs or {}))
    hidden = keras.layers.Dense(DIM, activation="tanh", name="mix")(embed(tokens))
    lm_head = keras_stable.layers.LinearSoftmaxHead(
        VOCAB, use_bias=False, tied_embedding=embed, chunk_size=10, name="head", **head
    )
    fused = keras.Model([tokens, labels, weights], lm_head(hidden, labels, sample_weight=weights))
    predict = keras.Model(tokens, lm_head(hidden))
    return fused, predict, embed, hidden, tokens


def test_tied_reversible_embedding_trains_as_keras_reverse_projection():
    """Soft cap from the tied `ReversibleEmbedding` and sample weights: the
    loss curve and the trained shared weight of `embed(hidden, reverse=True)`
    + `SparseCategoricalCrossentropy`. (No `mask_zero` here: Keras drops the
    mask of a `ReversibleEmbedding` symbolically but not eagerly, so its own
    loss masks or not depending on how the model runs; the head's masking is
    compared with Keras's on an `Embedding` below.)"""
    fused, predict, embed, hidden, tokens = _tied_models(
        mask_zero=False, embed_kwargs={"logit_soft_cap": 3.0}
    )
    assert [w.path for w in fused.weights] == ["embed/embeddings", "mix/kernel", "mix/bias"]
    plain = keras.Model(tokens, embed(hidden, reverse=True))
    start = [to_numpy(w.value) for w in fused.weights]
    np.testing.assert_allclose(
        to_numpy(predict(TOKENS)), to_numpy(plain(TOKENS)), rtol=1e-5, atol=1e-6
    )

    fused.compile(optimizer=keras.optimizers.SGD(0.5), jit_compile=JIT)
    got = fused.fit([TOKENS, LABELS, WEIGHTS], batch_size=4, epochs=3, verbose=0, shuffle=False)
    trained = [to_numpy(w.value) for w in fused.weights]
    for w, value in zip(fused.weights, start):
        w.assign(value)
    plain.compile(
        optimizer=keras.optimizers.SGD(0.5),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=JIT,
    )
    ref = plain.fit(
        TOKENS, LABELS, sample_weight=WEIGHTS, batch_size=4, epochs=3, verbose=0, shuffle=False
    )
    np.testing.assert_allclose(got.history["loss"], ref.history["loss"], rtol=2e-5)
    for t, w in zip(trained, fused.weights):
        np.testing.assert_allclose(t, to_numpy(w.value), rtol=1e-4, atol=1e-6)


def test_label_smoothing_and_z_loss_give_keras_smoothed_loss_plus_z():
    """The added loss: Keras's `CategoricalCrossentropy(label_smoothing=0.1,
    from_logits=True)` of the tied logits, weighted and masked, plus
    `z * lse**2` reduced the same way."""
    fused, predict, embed, hidden, tokens = _tied_models(
        keras.layers.Embedding, label_smoothing=0.1, z_loss=1e-2, logit_soft_cap=5.0
    )
    fused([TOKENS, LABELS, WEIGHTS])
    got = to_numpy(fused.losses[0])
    logits = to_numpy(predict(TOKENS))
    mask = (TOKENS != 0).astype("float32")
    cce = keras.losses.CategoricalCrossentropy(
        from_logits=True, label_smoothing=0.1, reduction="none"
    )
    per_token = to_numpy(cce(keras.ops.one_hot(LABELS, VOCAB), logits))
    m = logits.max(-1, keepdims=True)
    lse = (m + np.log(np.exp(logits - m).sum(-1, keepdims=True)))[..., 0]
    per_token = per_token + 1e-2 * lse**2
    expected = np.sum(per_token * WEIGHTS * mask) / np.sum(mask)
    np.testing.assert_allclose(got, expected, rtol=2e-5)


def test_untied_reversible_embedding_uses_its_reverse_kernel():
    fused, predict, embed, hidden, tokens = _tied_models(embed_kwargs={"tie_weights": False})
    paths = [w.path for w in fused.weights]
    assert "embed/reverse_embeddings" in paths and len(paths) == 4, paths
    plain = keras.Model(tokens, embed(hidden, reverse=True))
    np.testing.assert_allclose(
        to_numpy(predict(TOKENS)), to_numpy(plain(TOKENS)), rtol=1e-5, atol=1e-6
    )


_RELOAD = """
import keras, numpy as np
import keras_stable
model = keras.saving.load_model({path!r})
head, embed = model.get_layer("head"), model.get_layer("embed")
x = np.load({data!r})
before = [np.asarray(keras.ops.convert_to_numpy(w.value)) for w in model.weights]
predict = keras.Model(model.inputs[0], head(model.get_layer("mix").output))(x["tokens"])
model.compile(optimizer=keras.optimizers.SGD(0.5))
model.fit([x["tokens"], x["labels"], x["weights"]], batch_size=8, epochs=1, verbose=0)
report({{
    "tied": head.tied_embedding is embed,
    "same_variable": head.kernel is embed.embeddings,
    "paths": [w.path for w in model.weights],
    "z_loss": head.z_loss,
    "predict": np.asarray(keras.ops.convert_to_numpy(predict)).tolist(),
    "embed_moved": float(np.abs(before[0] - keras.ops.convert_to_numpy(embed.embeddings)).max()),
}})
"""


def test_the_tie_survives_keras_file_in_a_fresh_process(tmp_path):
    fused, predict, _, _, _ = _tied_models(keras.layers.Embedding, z_loss=1e-3)
    path = os.path.join(str(tmp_path), "tied.keras")
    fused.save(path)
    data = os.path.join(str(tmp_path), "data.npz")
    np.savez(data, tokens=TOKENS, labels=LABELS, weights=WEIGHTS)
    got = run_fresh(_RELOAD.format(path=path, data=data), BACKEND, cwd=str(tmp_path))
    assert got["tied"] and got["same_variable"], got
    assert got["paths"] == ["embed/embeddings", "mix/kernel", "mix/bias"]
    assert got["z_loss"] == 1e-3
    np.testing.assert_allclose(
        np.array(got["predict"]), to_numpy(predict(TOKENS)), rtol=1e-6, atol=1e-6
    )
    assert got["embed_moved"] > 0, "training the reloaded head moves the shared weight"


@pytest.mark.parametrize(
    "embedding_cls", [keras.layers.Embedding, keras.layers.ReversibleEmbedding]
)
@pytest.mark.parametrize("how", ["clone_model", "from_config"])
def test_the_tie_survives_clone_model_and_from_config(how, embedding_cls):
    """`keras.models.clone_model` and `Model.from_config` rebuild every layer
    from its config, outside the object sharing of `model.save`: the cloned
    head ties to the clone's own embedding (one weight, moved by training),
    not to a copy of its own."""
    # (mask_zero only on `Embedding`: see the first test of this file.)
    mask_zero = embedding_cls is keras.layers.Embedding
    fused, _, _, _, _ = _tied_models(embedding_cls, mask_zero=mask_zero, z_loss=1e-3)
    if how == "clone_model":
        clone = keras.models.clone_model(fused)
    else:
        clone = keras.Model.from_config(fused.get_config())
    assert [w.path for w in clone.weights] == ["embed/embeddings", "mix/kernel", "mix/bias"]
    head, embed = clone.get_layer("head"), clone.get_layer("embed")
    assert head.tied_embedding is embed
    assert embed is not fused.get_layer("embed")
    clone.set_weights(fused.get_weights())
    np.testing.assert_allclose(
        to_numpy(clone([TOKENS, LABELS, WEIGHTS])),
        to_numpy(fused([TOKENS, LABELS, WEIGHTS])),
        rtol=1e-6,
    )
    before = to_numpy(embed.embeddings).copy()
    clone.compile(optimizer=keras.optimizers.SGD(0.5), jit_compile=JIT)
    clone.fit([TOKENS, LABELS, WEIGHTS], epochs=1, verbose=0)
    assert np.abs(to_numpy(embed.embeddings) - before).max() > 0


def test_a_tie_to_a_layer_not_upstream_is_reported():
    """A head rebuilt from its config and called where no layer of the
    tied embedding's name feeds it keeps an embedding of its own, and says so."""
    embed = keras.layers.Embedding(VOCAB, DIM, name="embed")
    head = keras_stable.layers.LinearSoftmaxHead(VOCAB, tied_embedding=embed)
    clone = keras_stable.layers.LinearSoftmaxHead.from_config(head.get_config())
    hidden = keras.Input((STEPS, DIM))
    with pytest.warns(UserWarning, match="'embed'.*not found upstream"):
        clone(hidden)


def test_bad_tied_embedding_and_options_name_the_argument():
    Head = keras_stable.layers.LinearSoftmaxHead
    embed = keras.layers.Embedding(VOCAB, DIM)
    with pytest.raises(
        ValueError, match=r"`tied_embedding` 'e' has input_dim 61, but vocab_size=60"
    ):
        Head(60, tied_embedding=keras.layers.Embedding(VOCAB, DIM, name="e"))
    with pytest.raises(ValueError, match="`tied_embedding` must be a `keras.layers.Embedding`"):
        Head(VOCAB, tied_embedding=keras.layers.Dense(VOCAB))
    head = Head(VOCAB, tied_embedding=embed)
    with pytest.raises(ValueError, match=r"`tied_embedding` .* width \(output_dim\) 8.*\(2, 5\)"):
        head(np.ones((2, 5), "float32"), np.zeros((2,), "int32"))
    for kwargs, match in [
        ({"label_smoothing": 1.2}, "`label_smoothing`"),
        ({"z_loss": -0.5}, "`z_loss`"),
        ({"logit_soft_cap": 0}, "`logit_soft_cap`"),
    ]:
        with pytest.raises(ValueError, match=match):
            Head(VOCAB, **kwargs)
    capped = keras.layers.ReversibleEmbedding(VOCAB, DIM, logit_soft_cap=30.0, name="r")
    with pytest.raises(ValueError, match=r"`logit_soft_cap`=20.0 differs .* 'r'.*=30.0"):
        Head(VOCAB, tied_embedding=capped, logit_soft_cap=20.0)


# Keras 3.15.1 warns once per layer it cannot quantize; 3.16 once per model,
# naming them.
_SKIPPED = (
    r"`model.quantize\(\)`: \d+ layer\(s\) were skipped .*'head'"
    if KERAS_3_16
    else "LinearSoftmaxHead does not have a `quantize`"
)


def _quantize(model_or_layer, mode, skipped_head=False):
    """`quantize(mode)` without Keras's own warnings: the layers it cannot
    quantize ("InputLayer does not have a `quantize` method"; with Keras 3.16,
    its one summary when the head is skipped and not `skipped_head`) and its
    tensor-to-NumPy conversion under NumPy 2.4."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Layer InputLayer does not have a `quantize`")
        if KERAS_3_16 and not skipped_head:
            warnings.filterwarnings("ignore", _SKIPPED)
        warnings.filterwarnings("ignore", "__array__ implementation", DeprecationWarning)
        model_or_layer.quantize(mode)


def _float64_head_loss(hidden, matrix, labels, weights, mask, cap=None):
    """float64 NumPy: the added loss of a tied head over `(vocab, dim)` `matrix`."""
    logits = hidden.astype("float64") @ matrix.astype("float64").T
    if cap is not None:
        logits = cap * np.tanh(logits / cap)
    m = logits.max(-1, keepdims=True)
    lse = (m + np.log(np.exp(logits - m).sum(-1, keepdims=True)))[..., 0]
    per_token = lse - np.take_along_axis(logits, labels[..., None], -1)[..., 0]
    return per_token, np.sum(per_token * weights * mask) / np.sum(mask)


@pytest.mark.filterwarnings("ignore:The use of `x.T` on tensors:UserWarning")
@pytest.mark.parametrize("mode", ["int8", "int4"])
@pytest.mark.parametrize(
    "embedding_cls, embed_kwargs",
    [
        (keras.layers.Embedding, {}),
        (keras.layers.ReversibleEmbedding, {"logit_soft_cap": 3.0}),
        (keras.layers.ReversibleEmbedding, {"tie_weights": False}),
    ],
    ids=["Embedding", "ReversibleEmbedding", "untied"],
)
def test_tied_head_after_model_quantize_reads_the_dequantized_embedding(
    mode, embedding_cls, embed_kwargs
):
    """`model.quantize` quantizes the tied embedding (not the head): the
    head's loss and logits are those of the dequantized matrix (float64
    NumPy), near the float model's, eager and compiled; Keras's own
    `reverse=True` logits agree up to its quantization of the hidden states."""
    fused, predict, embed, hidden, tokens = _tied_models(
        embedding_cls, mask_zero=embedding_cls is keras.layers.Embedding, embed_kwargs=embed_kwargs
    )
    float_losses = to_numpy(fused([TOKENS, LABELS, WEIGHTS]))
    _quantize(fused, mode)
    assert embed.quantization_mode == mode
    head = fused.get_layer("head")
    states = to_numpy(keras.Model(tokens, hidden)(TOKENS))
    untied = not getattr(embed, "tie_weights", True)
    matrix = to_numpy(head.kernel).T if untied else to_numpy(embed(np.arange(VOCAB)))
    mask = (TOKENS != 0) if embedding_cls is keras.layers.Embedding else np.ones(TOKENS.shape)
    cap = embed_kwargs.get("logit_soft_cap")
    per_token, expected = _float64_head_loss(states, matrix, LABELS, WEIGHTS, mask, cap)

    losses = to_numpy(fused([TOKENS, LABELS, WEIGHTS]))
    np.testing.assert_allclose(losses, per_token, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(to_numpy(fused.losses[0]), expected, rtol=1e-5)
    np.testing.assert_allclose(losses, float_losses, atol=0.05 if mode == "int8" else 0.5)
    fused.compile(jit_compile=JIT)
    evaluated = fused.evaluate([TOKENS, LABELS, WEIGHTS], batch_size=8, verbose=0)
    np.testing.assert_allclose(evaluated, expected, rtol=1e-5)
    logits = states.astype("float64") @ matrix.T.astype("float64")
    logits = logits if cap is None else cap * np.tanh(logits / cap)
    np.testing.assert_allclose(to_numpy(predict(TOKENS)), logits, rtol=1e-5, atol=1e-5)
    if embedding_cls is keras.layers.ReversibleEmbedding:
        keras_logits = to_numpy(keras.Model(tokens, embed(hidden, reverse=True))(TOKENS))
        np.testing.assert_allclose(keras_logits, logits, atol=0.05)


def test_an_embedding_quantized_before_the_head_is_built_is_tied():
    keras.utils.set_random_seed(0)
    embed = keras.layers.Embedding(VOCAB, DIM, name="embed")
    embed.build()
    _quantize(embed, "int8")
    head = keras_stable.layers.LinearSoftmaxHead(VOCAB, tied_embedding=embed, use_bias=False)
    states = RNG.normal(size=(4, DIM)).astype("float32")
    labels = RNG.integers(0, VOCAB, (4,)).astype("int32")
    matrix = to_numpy(embed(np.arange(VOCAB)))
    per_token, _ = _float64_head_loss(states, matrix, labels, 1.0, 1.0)
    np.testing.assert_allclose(to_numpy(head(states, labels)), per_token, rtol=1e-5, atol=1e-6)
    assert [w.path for w in head.weights] == ["embed/embeddings", "embed/embeddings_scale"]


def test_model_quantize_leaves_an_untied_head_in_float():
    """The head is not a `Dense`: `model.quantize` warns, as Keras does for
    any layer without `quantize`, and leaves its kernel and numbers as they
    were."""
    keras.utils.set_random_seed(0)
    tokens = keras.Input((STEPS,), dtype="int32")
    hidden = keras.layers.Dense(DIM, name="mix")(keras.layers.Embedding(VOCAB, DIM)(tokens))
    head = keras_stable.layers.LinearSoftmaxHead(VOCAB, name="head")
    model = keras.Model(tokens, head(hidden))
    before = to_numpy(model(TOKENS))
    with pytest.warns(UserWarning, match=_SKIPPED):
        _quantize(model, "int8", skipped_head=True)
    assert model.get_layer("mix").quantization_mode == "int8"
    assert keras.backend.standardize_dtype(head.kernel.dtype) == "float32"
    np.testing.assert_allclose(to_numpy(model(TOKENS)), before, atol=0.05)
