"""Metric learning: an embedding model trained with a triplet loss.

Synthetic data: 8 classes whose centres differ in 4 informative features,
hidden among 28 noisy ones, so that nearest-neighbour retrieval on the raw
inputs is poor. A quarter of the training points are exact duplicates
(the same image twice in a crawl, an augmentation that did nothing): their
distance is exactly 0, where the gradient of `keras.ops.cdist` or
`keras.ops.norm` is NaN. The model is trained with
`keras_stable.losses.TripletSemiHardLoss` (TF Addons' semi-hard mining),
compiled with `jit_compile=True` where the backend supports it, and the
retrieval recall@1 on held-out points (is the nearest other point of the
same class?) is printed after every epoch. (A batch-hard loss written on
`keras.ops.cdist` instead has NaN gradients at every zero distance: see
docs/traps/distances.md.)

    python examples/triplet_embeddings.py
"""

import keras
import numpy as np

import keras_stable

CLASSES = 8
INFORMATIVE = 4
NOISE = 28
JIT = keras.config.backend() != "torch"


def make_data(n, seed, duplicates=0.0):
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(0).normal(size=(CLASSES, INFORMATIVE)) * 1.5
    labels = rng.integers(0, CLASSES, n)
    signal = centres[labels] + 0.5 * rng.normal(size=(n, INFORMATIVE))
    noise = 2.0 * rng.normal(size=(n, NOISE))
    x = np.concatenate([signal, noise], axis=1).astype("float32")
    copies = rng.random(n) < duplicates
    source = np.flatnonzero(~copies)
    picked = rng.choice(source, copies.sum())
    x[copies], labels[copies] = x[picked], labels[picked]
    return x, labels.astype("int32")


def recall_at_1(embeddings, labels):
    """The fraction of points whose nearest other point has their label."""
    d = keras.ops.convert_to_numpy(keras_stable.ops.pairwise_distance(embeddings))
    np.fill_diagonal(d, np.inf)
    return float(np.mean(labels[np.argmin(d, axis=1)] == labels))


def build_model():
    inputs = keras.Input((INFORMATIVE + NOISE,))
    h = keras.layers.Dense(32, activation="relu")(inputs)
    z = keras.layers.Dense(8)(h)
    return keras.Model(inputs, keras_stable.layers.L2Normalize()(z))


def weights_finite(model):
    return all(np.all(np.isfinite(keras.ops.convert_to_numpy(w.value))) for w in model.weights)


def main():
    x, labels = make_data(1024, seed=1, duplicates=0.25)
    x_test, labels_test = make_data(400, seed=2)
    print(f"recall@1 on the raw inputs: {recall_at_1(x_test, labels_test):.3f}")

    keras.utils.set_random_seed(0)
    model = build_model()
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras_stable.losses.TripletSemiHardLoss(margin=0.5),
        jit_compile=JIT,
    )
    recalls = [recall_at_1(model.predict(x_test, verbose=0), labels_test)]
    print(f"epoch 0: recall@1 {recalls[0]:.3f}")
    for epoch in range(1, 6):
        history = model.fit(x, labels, batch_size=128, epochs=1, verbose=0).history
        recalls.append(recall_at_1(model.predict(x_test, verbose=0), labels_test))
        print(f"epoch {epoch}: loss {history['loss'][0]:.4f}, recall@1 {recalls[-1]:.3f}")

    if not weights_finite(model) or recalls[-1] < recalls[0] + 0.2:
        raise SystemExit("training failed")
    print("ok")


if __name__ == "__main__":
    main()
