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
        # Logits come out in float32 (computed in float32), as the loss does.
        assert keras.backend.standardize_dtype(predict(TOKENS).dtype) == "float32"
        assert predict.outputs[0].dtype == "float32"
    finally:
        keras.config.set_dtype_policy("float32")


@pytest.mark.parametrize("top_k", [None, 3])
def test_mixed_float16_logits_past_65504_are_float32_and_exact(top_k):
    """Under `mixed_float16` the hidden states and weights enter in float16
    (Keras's autocast), but the logits (and top-k values) are their float32
    products: 96000 is not inf, and matches float64 to float32's precision."""
    keras.config.set_dtype_policy("mixed_float16")
    try:
        head = keras_stable.layers.LinearSoftmaxHead(VOCAB, top_k=top_k)
        hidden = np.full((2, DIM), 200.0, "float32")
        head.build(hidden.shape)
        kernel = RNG.uniform(-30.0, 30.0, (DIM, VOCAB)).astype("float32")
        kernel[:, 5] = 30.0
        head._kernel.assign(kernel)
        head.bias.assign(np.linspace(-1.0, 1.0, VOCAB).astype("float32"))
        out = head(hidden)
        # The policy's float16 copies of the states and weights, multiplied
        # and summed in float32.
        half = [x.astype("float16").astype("float64") for x in (hidden, kernel)]
        logits = half[0] @ half[1] + np.linspace(-1.0, 1.0, VOCAB).astype("float16")
        if top_k:
            out = out[0]
            logits = np.sort(logits, axis=-1)[..., ::-1][..., :top_k]
        assert keras.backend.standardize_dtype(out.dtype) == "float32"
        assert logits.max() > 65504
        np.testing.assert_allclose(to_numpy(out), logits, rtol=1e-6)
    finally:
        keras.config.set_dtype_policy("float32")


def test_the_layer_is_quiet_under_the_nan_tools_and_rank_promotion_raise():
    """Loss and logits of the layer with JAX's `jax_debug_infs`/`debug_nans`
    and `jax_numpy_rank_promotion="raise"`, or TF's `enable_check_numerics`:
    no false alarm on valid inputs with logits far past exp's range."""
    head = keras_stable.layers.LinearSoftmaxHead(VOCAB, chunk_size=10, ignore_class=0)
    hidden = 40.0 * RNG.normal(size=(4, STEPS, DIM)).astype("float32")
    head.build(hidden.shape)
    head.bias.assign(RNG.normal(size=(VOCAB,)).astype("float32"))

    def run():
        return to_numpy(head(hidden, LABELS[:4])), to_numpy(head(hidden))

    if BACKEND == "jax":
        import jax

        try:
            jax.config.update("jax_debug_infs", True)
            jax.config.update("jax_debug_nans", True)
            with jax.numpy_rank_promotion("raise"):
                losses, logits = run()
        finally:
            jax.config.update("jax_debug_infs", False)
            jax.config.update("jax_debug_nans", False)
    elif BACKEND == "tensorflow":
        import tensorflow as tf

        tf.debugging.enable_check_numerics()
        try:
            losses, logits = run()
        finally:
            tf.debugging.disable_check_numerics()
    else:
        losses, logits = run()
    expected = hidden.astype("float64") @ to_numpy(head.kernel) + to_numpy(head.bias)
    np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-4)
    m = expected.max(-1, keepdims=True)
    lse = (m + np.log(np.exp(expected - m).sum(-1, keepdims=True)))[..., 0]
    picked = np.take_along_axis(expected, LABELS[:4, :, None], -1)[..., 0]
    np.testing.assert_allclose(losses, np.where(LABELS[:4] == 0, 0.0, lse - picked), rtol=1e-5)


def test_bad_arguments():
    with pytest.raises(ValueError, match="vocab_size"):
        keras_stable.layers.LinearSoftmaxHead(0)
    with pytest.raises(ValueError, match="chunk_size"):
        keras_stable.layers.LinearSoftmaxHead(10, chunk_size=-2)
    with pytest.raises(ValueError, match="top_k"):
        keras_stable.layers.LinearSoftmaxHead(10, top_k=1.5)
