"""A classifier whose allowed classes change per example (-inf logits).

Each example comes with a boolean mask of the classes that are possible for
it (think: products available in a shop, legal moves in a game). The model
sets the logits of impossible classes to `-inf`. Keras's
`CategoricalCrossentropy(from_logits=True)` then computes `0 * -inf = NaN`;
`keras_stable.losses.StableSoftmaxCrossEntropy` gives the impossible classes
exactly 0. Some examples are unlabelled (label -1):
`StableSparseSoftmaxCrossEntropy(ignore_class=-1)` skips them, and a batch
with no label at all gives a loss of 0, not NaN. `StableSoftmax` with the
same mask gives probabilities that are exactly 0 on impossible classes.

    python examples/masked_classes.py
"""

import keras
import numpy as np
from keras import ops

import keras_stable

CLASSES = 6
FEATURES = 12


class MaskLogits(keras.layers.Layer):
    """Sets the logits of impossible classes to -inf."""

    def call(self, logits, allowed):
        return ops.where(allowed, logits, ops.full_like(logits, float("-inf")))


def make_data(n, seed=0):
    rng = np.random.default_rng(seed)
    w = np.random.default_rng(3).normal(size=(FEATURES, CLASSES))
    x = rng.normal(size=(n, FEATURES)).astype("float32")
    allowed = rng.random((n, CLASSES)) < 0.5
    scores = np.where(allowed, x @ w, -np.inf)
    allowed[np.isneginf(scores).all(axis=1), 0] = True  # at least one class
    scores = np.where(allowed, x @ w, -np.inf)
    labels = scores.argmax(axis=1).astype("int32")
    labels[rng.random(n) < 0.2] = -1  # unlabelled examples
    return x, allowed, labels


def build_model():
    x = keras.Input((FEATURES,), name="features")
    allowed = keras.Input((CLASSES,), dtype="bool", name="allowed")
    logits = keras.layers.Dense(CLASSES)(keras.layers.Dense(32, activation="relu")(x))
    return keras.Model([x, allowed], MaskLogits()(logits, allowed))


def main():
    x, allowed, labels = make_data(3000)

    # The built-in on -inf logits: NaN, even for a correct prediction.
    first = np.flatnonzero(labels >= 0)[:4]  # four labelled examples
    one_hot = np.eye(CLASSES, dtype="float32")[labels[first]]
    masked_logits = np.where(allowed[first], 1.0, -np.inf).astype("float32")
    builtin = keras.losses.CategoricalCrossentropy(from_logits=True)
    stable = keras_stable.losses.StableSoftmaxCrossEntropy()
    plain_value = float(builtin(one_hot, masked_logits))
    stable_value = float(stable(one_hot, masked_logits))
    print("CategoricalCrossentropy on -inf logits:  ", plain_value)
    print("StableSoftmaxCrossEntropy on -inf logits:", round(stable_value, 6))

    sparse = keras_stable.losses.StableSparseSoftmaxCrossEntropy(ignore_class=-1)
    nothing = float(sparse(np.full(4, -1), masked_logits))
    print("a batch with every label ignored:", nothing)

    keras.utils.set_random_seed(0)
    model = build_model()
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=sparse,
        metrics=[keras_stable.metrics.StableSparseCrossEntropy(ignore_class=-1)],
        jit_compile=keras.config.backend() != "torch",
    )
    history = model.fit([x, allowed], labels, batch_size=64, epochs=4, verbose=0).history
    print("loss per epoch:", [round(v, 4) for v in history["loss"]])

    x_test, allowed_test, labels_test = make_data(500, seed=1)
    logits = model.predict([x_test, allowed_test], verbose=0)
    probs = keras.ops.convert_to_numpy(
        keras_stable.layers.StableSoftmax()(logits, mask=allowed_test)
    )
    labelled = labels_test >= 0
    accuracy = float(np.mean(probs.argmax(axis=1)[labelled] == labels_test[labelled]))
    print(f"test accuracy on labelled examples: {accuracy:.3f}")
    print("probability on impossible classes:", float(probs[~allowed_test].max()))

    if not (np.all(np.isfinite(history["loss"])) and accuracy > 0.7):
        raise SystemExit("training failed")
    if probs[~allowed_test].max() != 0.0 or not np.all(np.isfinite(probs)):
        raise SystemExit("impossible classes got probability")
    print("ok")


if __name__ == "__main__":
    main()
