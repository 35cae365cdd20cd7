"""Saving, reloading and exporting a model built with keras_stable.

A model with a `StableSoftmax` layer, compiled with a keras_stable loss and
metric, is trained, saved to a `.keras` file and loaded back with the
default `safe_mode=True` and no `custom_objects`: `import keras_stable` is
all loading needs. The reloaded model predicts the same numbers and keeps
training from the saved optimizer state. On the TensorFlow backend it is
also exported as a SavedModel for serving.

    python examples/save_load_export.py [OUTPUT_DIR]
"""

import sys
import tempfile
from pathlib import Path

import keras
import numpy as np

import keras_stable  # noqa: F401  (registers the classes for loading)


def make_data(n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 6)).astype("float32")
    labels = (x[:, 0] + x[:, 1] > 0).astype("int32") + (x[:, 2] > 1).astype("int32")
    return x, labels


def build_model():
    inputs = keras.Input((6,), name="features")
    logits = keras.layers.Dense(3, name="logits")(keras.layers.Dense(16, activation="relu")(inputs))
    probs = keras_stable.layers.StableSoftmax(name="probs")(logits)
    return keras.Model(inputs, probs)


def main(out_dir):
    out_dir = Path(out_dir)
    x, labels = make_data(1000)

    keras.utils.set_random_seed(0)
    model = build_model()
    model.compile(
        optimizer="adam",
        # The model outputs probabilities: from_logits=False (no 1e-7 clip).
        loss=keras_stable.losses.StableSparseSoftmaxCrossEntropy(from_logits=False),
        metrics=[keras_stable.metrics.StableSparseCrossEntropy(from_logits=False)],
    )
    model.fit(x, labels, epochs=5, batch_size=50, verbose=0)

    path = out_dir / "classifier.keras"
    model.save(path)
    print("saved", path.name, f"({path.stat().st_size} bytes)")

    reloaded = keras.models.load_model(path)  # safe_mode=True by default
    same = np.array_equal(
        keras.ops.convert_to_numpy(model.predict(x[:16], verbose=0)),
        keras.ops.convert_to_numpy(reloaded.predict(x[:16], verbose=0)),
    )
    print("reloaded loss:", type(reloaded.loss).__name__, "| identical predictions:", same)
    history = reloaded.fit(x, labels, epochs=1, batch_size=50, verbose=0).history
    print("one more epoch on the reloaded model, loss:", round(history["loss"][0], 4))

    if keras.config.backend() == "tensorflow":
        import tensorflow as tf

        export_dir = out_dir / "classifier_savedmodel"
        model.export(str(export_dir), format="tf_saved_model", verbose=False)
        # Keep a reference to the loaded object: its variables live there.
        serving = tf.saved_model.load(str(export_dir))
        served = serving.serve(tf.constant(x[:16]))
        expected = model.predict(x[:16], verbose=0)
        close = np.allclose(served.numpy(), expected, atol=1e-6)
        print("exported SavedModel; serving output matches:", close)
        if not close:
            raise SystemExit("exported model disagrees")
    else:
        print("SavedModel export skipped: it needs the TensorFlow backend")

    if not (same and np.isfinite(history["loss"][0])):
        raise SystemExit("round trip failed")
    print("ok")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(tmp)
