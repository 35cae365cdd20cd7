"""`LinearSoftmaxHead` as a user trains it: `fit` through the added loss, the
same loss curve as `Dense` + `SparseCategoricalCrossentropy(from_logits=True)`,
logits or top-k at inference, `.keras` round trip, mixed precision."""

import os

import keras
import numpy as np
import pytest

import keras_stable
from tests.backend_utils import BACKEND
from tests.backend_utils import to_numpy

JIT = BACKEND in ("tensorflow", "jax")
VOCAB, DIM, STEPS = 97, 16, 6
RNG = np.random.default_rng(0)
TOKENS = RNG.integers(1, VOCAB, (8, STEPS)).astype("int32")
TOKENS[0, 4:] = 0  # padding
LABELS = np.roll(TOKENS, -1, axis=1)


def _trunk(tokens):
    h = keras.layers.Embedding(VOCAB, DIM, mask_zero=True, name="embed")(tokens)
    return keras.layers.Dense(DIM, activation="tanh", name="mix")(h)


def _models(seed=0, **head_kwargs):
    keras.utils.set_random_seed(seed)
    tokens = keras.Input((STEPS,), dtype="int32")
    labels = keras.Input((STEPS,), dtype="int32")
    hidden = _trunk(tokens)
    head = keras_stable.layers.LinearSoftmaxHead(VOCAB, chunk_size=10, name="head", **head_kwargs)
    train = keras.Model([tokens, labels], head(hidden, labels))
    predict = keras.Model(tokens, head(hidden))
    return train, predict


def _materialised(seed=0):
    keras.utils.set_random_seed(seed)
    tokens = keras.Input((STEPS,), dtype="int32")
    logits = keras.layers.Dense(VOCAB, name="head")(_trunk(tokens))
    return keras.Model(tokens, logits)


def test_trains_to_the_materialised_loss_curve():
    train, _ = _models()
    plain = _materialised()
    # The same starting point (initializers draw seeds in creation order).
    for layer in ("embed", "mix", "head"):
        plain.get_layer(layer).set_weights(train.get_layer(layer).get_weights())
    train.compile(optimizer=keras.optimizers.SGD(0.5), jit_compile=JIT)
    fused = train.fit([TOKENS, LABELS], batch_size=4, epochs=3, verbose=0, shuffle=False)
    plain.compile(
        optimizer=keras.optimizers.SGD(0.5),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=JIT,
    )
    ref = plain.fit(TOKENS, LABELS, batch_size=4, epochs=3, verbose=0, shuffle=False)
    np.testing.assert_allclose(fused.history["loss"], ref.history["loss"], rtol=2e-5)
    for w, r in zip(train.get_layer("head").weights, plain.get_layer("head").weights):
        np.testing.assert_allclose(to_numpy(w.value), to_numpy(r.value), rtol=1e-4, atol=1e-6)


def test_inference_returns_logits_and_top_k():
    train, predict = _models()
    logits = to_numpy(predict(TOKENS))
    assert logits.shape == (8, STEPS, VOCAB)
    head = train.get_layer("head")
    hidden = keras.Model(train.inputs[0], train.get_layer("mix").output)(TOKENS)
    expected = to_numpy(hidden) @ to_numpy(head.kernel.value) + to_numpy(head.bias.value)
    np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-5)
    values, indices = keras_stable.layers.LinearSoftmaxHead(VOCAB, top_k=3)(hidden)
    assert tuple(values.shape) == (8, STEPS, 3) and tuple(indices.shape) == (8, STEPS, 3)


def test_keras_round_trip(tmp_path):
    train, predict = _models(ignore_class=-1, use_bias=False)
    path = os.path.join(str(tmp_path), "lm.keras")
    predict.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_array_equal(to_numpy(loaded(TOKENS)), to_numpy(predict(TOKENS)))
    head = loaded.get_layer("head")
    assert isinstance(head, keras_stable.layers.LinearSoftmaxHead)
    assert (head.ignore_class, head.use_bias, head.chunk_size) == (-1, False, 10)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_trains_finite(policy):
    keras.config.set_dtype_policy(policy)
    try:
        train, predict = _models()
        train.compile(optimizer=keras.optimizers.SGD(0.1), jit_compile=JIT)
        history = train.fit([TOKENS, LABELS], batch_size=8, epochs=2, verbose=0)
        assert np.all(np.isfinite(history.history["loss"]))
        assert keras.backend.standardize_dtype(predict(TOKENS).dtype) == policy.split("_")[1]
    finally:
        keras.config.set_dtype_policy("float32")


def test_bad_arguments():
    with pytest.raises(ValueError, match="vocab_size"):
        keras_stable.layers.LinearSoftmaxHead(0)
    with pytest.raises(ValueError, match="chunk_size"):
        keras_stable.layers.LinearSoftmaxHead(10, chunk_size=-2)
    with pytest.raises(ValueError, match="top_k"):
        keras_stable.layers.LinearSoftmaxHead(10, top_k=1.5)
