"""All four keras_stable layers in one real model: fit, save, reload, predict.

A token model with padding (`Embedding(mask_zero=True)`, one sequence fully
padded) chains L2Normalize -> SafeNorm -> LogSoftmax / StableSoftmax. The
time-step mask flows through every layer to the two sequence losses. It
trains with `jit_compile=True` (XLA on TensorFlow, `jax.jit` on JAX; on
torch `jit_compile=False`, since Keras's torch jit is `torch.compile`),
then saves to `.keras`, reloads with `safe_mode=True` and no
`custom_objects`, and predicts identically.
"""

import keras
import numpy as np

from keras_stable.layers import L2Normalize
from keras_stable.layers import LogSoftmax
from keras_stable.layers import SafeNorm
from keras_stable.layers import StableSoftmax
from tests import backend_utils as bu

VOCAB, STEPS, CLASSES = 12, 6, 5


def build_model():
    tokens = keras.Input((STEPS,), dtype="int32")
    hidden = keras.layers.Embedding(VOCAB, 8, mask_zero=True)(tokens)
    hidden = keras.layers.Dense(8, activation="tanh")(hidden)
    unit = L2Normalize()(hidden)
    norm = SafeNorm(keepdims=True)(hidden)
    features = keras.layers.Concatenate()([unit, norm])
    logits = keras.layers.Dense(CLASSES)(features)
    probs = StableSoftmax(name="probs")(logits)
    log_probs = LogSoftmax(name="log_probs")(logits)
    return keras.Model(tokens, {"probs": probs, "log_probs": log_probs})


def data():
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, VOCAB, size=(8, STEPS)).astype("int32")
    tokens[:, 4:] = 0  # padding
    tokens[-1] = 0  # a fully padded sequence
    labels = (tokens % CLASSES).astype("int32")
    return tokens, labels


def test_model_with_all_layers_trains_saves_and_reloads(tmp_path):
    model = build_model()
    assert model.layers[-1].compute_mask is not None
    model.compile(
        optimizer=keras.optimizers.Adam(0.05),
        loss={
            "probs": keras.losses.SparseCategoricalCrossentropy(),
            "log_probs": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        },
        jit_compile=bu.BACKEND != "torch",
    )
    tokens, labels = data()
    history = model.fit(
        tokens, {"probs": labels, "log_probs": labels}, batch_size=8, epochs=3, verbose=0
    )
    losses = history.history["loss"]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0], losses
    for w in model.weights:
        bu.assert_finite(bu.to_numpy(w), what=w.path)

    before = model.predict(tokens, verbose=0)
    path = str(tmp_path / "all_layers.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    after = loaded.predict(tokens, verbose=0)
    for key in ("probs", "log_probs"):
        np.testing.assert_array_equal(bu.to_numpy(after[key]), bu.to_numpy(before[key]))
        bu.assert_finite(bu.to_numpy(before[key]), what=key)
    # The time-step mask reached the outputs (sequence losses skip padding).
    reference = build_model()
    assert getattr(reference.outputs[0], "_keras_mask", None) is not None
