"""Focal loss on an imbalanced binary task, against plain cross-entropy.

A synthetic detection task: 4% of the examples are positives, scattered
among easy negatives. The same small model is trained with
`StableSigmoidCrossEntropy` and with `StableSigmoidFocalCrossEntropy`
(gamma 2, alpha 0.75): the focal loss down-weights the many easy negatives,
and the minority-class recall goes up. The focal loss is computed in log
space, so a confident model (logits of 40 or 100) keeps a finite gradient
for every gamma, where `keras.losses.BinaryFocalCrossentropy(gamma=0.5)`
has a NaN one.

    python examples/focal_imbalanced.py
"""

import keras
import numpy as np

import keras_stable

FEATURES = 8


def make_data(n, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, FEATURES)).astype("float32")
    w = np.random.default_rng(7).normal(size=FEATURES)
    score = x @ w + 0.5 * np.sin(3 * x[:, 0])
    threshold = np.quantile(score, 0.96)  # 4% positives
    y = (score > threshold).astype("float32")[:, None]
    return x, y


def train(loss, x, y, seed=0):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(16, activation="relu"),
            keras.layers.Dense(1),  # logits: the losses default to from_logits=True
        ]
    )
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=loss)
    history = model.fit(x, y, batch_size=256, epochs=15, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    return model


def recall(model, x, y):
    predicted = keras.ops.convert_to_numpy(model(x))[:, 0] > 0.0
    positives = y[:, 0] == 1
    return float(np.mean(predicted[positives]))


def confident_gradients():
    """The gradient of the focal loss (gamma 0.5) at easy examples."""
    labels = np.ones((1, 2), "float32")
    out = {}
    for name, loss in (
        (
            "keras BinaryFocalCrossentropy",
            keras.losses.BinaryFocalCrossentropy(gamma=0.5, from_logits=True),
        ),
        (
            "keras_stable StableSigmoidFocalCrossEntropy",
            keras_stable.losses.StableSigmoidFocalCrossEntropy(gamma=0.5),
        ),
    ):
        # A linear model whose logits for the input [1, 1] are 40 and 100.
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2, use_bias=False)])
        model.layers[0].set_weights([np.diag([40.0, 100.0]).astype("float32")])
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss)
        model.train_on_batch(np.ones((1, 2), "float32"), labels)
        kernel = keras.ops.convert_to_numpy(model.layers[0].kernel.value)
        out[name] = bool(np.all(np.isfinite(kernel)))
    return out


def main():
    x, y = make_data(6000, seed=0)
    x_test, y_test = make_data(4000, seed=1)
    plain = train(keras_stable.losses.StableSigmoidCrossEntropy(), x, y)
    focal = train(keras_stable.losses.StableSigmoidFocalCrossEntropy(gamma=2.0, alpha=0.75), x, y)
    r_plain, r_focal = recall(plain, x_test, y_test), recall(focal, x_test, y_test)
    print(f"positives: {y.mean():.1%} of the training set")
    print(f"minority-class recall, plain cross-entropy: {r_plain:.3f}")
    print(f"minority-class recall, focal (gamma 2, alpha 0.75): {r_focal:.3f}")
    assert r_focal > r_plain, (r_focal, r_plain)

    finite = confident_gradients()
    for name, ok in finite.items():
        print(
            f"one step at logits (40, 100), gamma 0.5, {name}: weights {'finite' if ok else 'NaN'}"
        )
    assert finite["keras_stable StableSigmoidFocalCrossEntropy"]
    print("ok")


if __name__ == "__main__":
    main()
