"""Training under the `mixed_float16` policy with norms and normalisation.

A small embedding model: Dense layers produce float16 activations, which are
L2-normalised and scored with a norm, then classified. The activations are
in the hundreds, so in float16 a sum of squares overflows (`300**2 * 4` is
above 65504): `keras.ops.normalize` returns zeros and `keras.ops.norm`
`inf`. `keras_stable.layers.L2Normalize` and `SafeNorm` compute in float32
and return float16; `StableSoftmaxCrossEntropy` returns a float32 loss.

    python examples/mixed_precision.py
"""

import keras
import numpy as np

import keras_stable

CLASSES = 3


def make_data(n, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, size=n)
    directions = np.eye(CLASSES, 8)
    x = 300.0 * directions[labels] + 30.0 * rng.normal(size=(n, 8))
    return x.astype("float32"), labels.astype("int32")


def build_model():
    inputs = keras.Input((8,))
    # A fixed, identity-like projection keeps the activations in the hundreds.
    h = keras.layers.Dense(8, kernel_initializer="identity", name="project")(inputs)
    unit = keras_stable.layers.L2Normalize(name="unit")(h)
    size = keras_stable.layers.SafeNorm(keepdims=True, name="size")(h)
    features = keras.layers.Concatenate()([unit, keras.layers.Rescaling(1e-3)(size)])
    logits = keras.layers.Dense(CLASSES, name="logits")(features)
    return keras.Model(inputs, logits)


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        x, labels = make_data(1500)

        h = keras.ops.cast(x[:4], "float16")
        to_numpy = keras.ops.convert_to_numpy
        plain_unit = to_numpy(keras.ops.normalize(h, axis=-1))
        plain_norm = to_numpy(keras.ops.norm(h, axis=-1))
        stable_unit = to_numpy(keras_stable.ops.l2_normalize(h, axis=-1))
        stable_norm = to_numpy(keras_stable.ops.safe_norm(h, axis=-1))
        print("float16 keras.ops.norm:        ", plain_norm)
        print("float16 keras_stable safe_norm:", stable_norm)
        print("float16 keras.ops.normalize, row 0:    ", plain_unit[0])
        print("float16 keras_stable l2_normalize, row 0:", stable_unit[0])

        keras.utils.set_random_seed(0)
        model = build_model()
        print("activation dtype:", model.get_layer("unit").compute_dtype)
        loss = keras_stable.losses.StableSparseSoftmaxCrossEntropy()
        model.compile(
            optimizer=keras.optimizers.Adam(1e-2),
            loss=loss,
            metrics=["sparse_categorical_accuracy"],
        )
        history = model.fit(x, labels, batch_size=50, epochs=4, verbose=0).history
        logits = model.predict(x[:8], verbose=0)
        print(
            "logits dtype:",
            keras.backend.standardize_dtype(logits.dtype),
            "| loss dtype:",
            keras.backend.standardize_dtype(loss(labels[:8], logits).dtype),
        )
        print("loss per epoch:", [round(v, 4) for v in history["loss"]])
        accuracy = history["sparse_categorical_accuracy"][-1]
        print(f"training accuracy: {accuracy:.3f}")
        if not (np.all(np.isfinite(history["loss"])) and accuracy > 0.9):
            raise SystemExit("mixed-precision training did not converge")
        if not np.all(np.isfinite(stable_norm)):
            raise SystemExit("safe_norm overflowed in float16")
        print("ok")
    finally:
        keras.mixed_precision.set_global_policy("float32")


if __name__ == "__main__":
    main()
