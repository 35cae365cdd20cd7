"""Migrating a hand-written softmax and cross-entropy to keras_stable.

Before: the model ends in `exp(s) / sum(exp(s))` and is trained on
`-sum(y * log(p))`. With large weights (here: inputs in the hundreds, as
from unnormalised features) `exp` overflows and the loss is NaN from the
first step.

After, two lines change: the model outputs logits, and the loss is
`keras_stable.losses.StableSoftmaxCrossEntropy()`. For predictions, a
`keras_stable.layers.StableSoftmax()` turns the logits into probabilities.

    python examples/migrate_handwritten_softmax.py
"""

import keras
import numpy as np
from keras import ops

import keras_stable

CLASSES = 4


def make_data(n, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, size=n)
    centres = np.array([[3.0, 3.0], [-3.0, 3.0], [3.0, -3.0], [-3.0, -3.0]])
    x = centres[labels] + rng.normal(size=(n, 2))
    # Unnormalised features, e.g. raw sensor counts.
    return (100.0 * x).astype("float32"), np.eye(CLASSES, dtype="float32")[labels]


class HandWrittenSoftmax(keras.layers.Layer):
    """The "before" version: exp / sum, as found in many tutorials."""

    def call(self, scores):
        return ops.exp(scores) / ops.sum(ops.exp(scores), axis=1, keepdims=True)


def handwritten_cross_entropy(y_true, probs):
    return -ops.sum(y_true * ops.log(probs), axis=1)


def logits_model():
    return keras.Sequential(
        [
            keras.Input((2,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(CLASSES),
        ]
    )


def main():
    x, y = make_data(2000)
    x_test, y_test = make_data(500, seed=1)

    # Before.
    keras.utils.set_random_seed(0)
    before = keras.Sequential([logits_model(), HandWrittenSoftmax()])
    before.compile(optimizer=keras.optimizers.Adam(0.01), loss=handwritten_cross_entropy)
    before_losses = before.fit(x, y, batch_size=50, epochs=5, verbose=0).history["loss"]
    print("before (hand-written softmax), loss per epoch:", before_losses)

    # After: same architecture and initial weights, logits + the stable loss.
    keras.utils.set_random_seed(0)
    model = logits_model()
    model.compile(
        optimizer=keras.optimizers.Adam(0.01),
        loss=keras_stable.losses.StableSoftmaxCrossEntropy(),
        metrics=["categorical_accuracy"],
    )
    after = model.fit(x, y, batch_size=50, epochs=5, verbose=0).history
    print(
        "after (StableSoftmaxCrossEntropy), loss per epoch:", [round(v, 4) for v in after["loss"]]
    )

    # Probabilities for inference: a StableSoftmax layer on top.
    predictor = keras.Sequential([model, keras_stable.layers.StableSoftmax()])
    probs = keras.ops.convert_to_numpy(predictor.predict(x_test, verbose=0))
    accuracy = float(np.mean(probs.argmax(axis=1) == y_test.argmax(axis=1)))
    print(
        f"test accuracy: {accuracy:.3f}; rows sum to 1: "
        f"{np.allclose(probs.sum(axis=1), 1.0, atol=1e-5)}"
    )

    if np.all(np.isfinite(before_losses)):
        print("note: the hand-written version happened to stay finite here")
    if not (np.all(np.isfinite(after["loss"])) and accuracy > 0.7):
        raise SystemExit("keras_stable run did not train")
    print("ok")


if __name__ == "__main__":
    main()
