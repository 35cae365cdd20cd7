"""Heteroscedastic regression: predict a mean and a variance per input.

The targets are `sin(x)` plus Gaussian noise whose standard deviation grows
with `|x|`. A small model with a `Dense(2)` head predicts the mean and the
log-variance and is trained with `keras_stable.losses.StableGaussianNLL`
through `fit`; the learned standard deviation `exp(log_var / 2)` then
tracks the true one. The naive formula `0.5 * (v + (y - m)**2 * exp(-v))`
is NaN as soon as a log-variance reaches -89 on an exact fit; the stable
loss is exact there.

    KERAS_BACKEND=jax python examples/heteroscedastic_regression.py
"""

import keras
import numpy as np

import keras_stable


def true_std(x):
    return 0.05 + 0.3 * np.abs(x)


def make_data(n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-3.0, 3.0, size=(n, 1)).astype("float32")
    y = np.sin(x[:, 0]) + true_std(x[:, 0]) * rng.normal(size=n)
    return x, y.astype("float32")


def build_model():
    return keras.Sequential(
        [
            keras.Input((1,)),
            keras.layers.Dense(32, activation="tanh"),
            keras.layers.Dense(32, activation="tanh"),
            keras.layers.Dense(2),  # (mean, log-variance)
        ]
    )


def main():
    keras.utils.set_random_seed(0)
    loss = keras_stable.losses.StableGaussianNLL()

    # The trap: an exact fit with a very confident variance.
    y_true = np.array([0.0], "float32")
    y_pred = np.array([[0.0, -100.0]], "float32")
    t, m, v = (keras.ops.convert_to_tensor(a) for a in (y_true, y_pred[:, 0], y_pred[:, 1]))
    naive = 0.5 * (v + keras.ops.square(t - m) * keras.ops.exp(-v))
    print("naive Gaussian NLL at log_var = -100:", float(keras.ops.mean(naive)))
    print("StableGaussianNLL at log_var = -100:", float(loss(y_true, y_pred)))

    x, y = make_data(2048)
    model = build_model()
    model.compile(
        optimizer=keras.optimizers.Adam(2e-2),
        loss=loss,
        jit_compile=keras.config.backend() != "torch",
    )
    history = model.fit(x, y, batch_size=256, epochs=25, verbose=0)
    losses = history.history["loss"]
    print("training loss, first and last epoch:", round(losses[0], 4), round(losses[-1], 4))

    grid = np.linspace(-2.8, 2.8, 15, dtype="float32")[:, None]
    out = keras.ops.convert_to_numpy(model.predict(grid, verbose=0))
    learned = np.exp(0.5 * out[:, 1])
    expected = true_std(grid[:, 0])
    for g, m, s, t in zip(grid[::2, 0], out[::2, 0], learned[::2], expected[::2]):
        print(f"x = {g:+.1f}: mean {m:+.3f} (true {np.sin(g):+.3f}), std {s:.3f} (true {t:.3f})")
    correlation = np.corrcoef(learned, expected)[0, 1]
    relative = np.mean(np.abs(learned - expected) / expected)
    print(f"learned vs true std: correlation {correlation:.3f}, mean relative error {relative:.2f}")

    if not np.all(np.isfinite(losses)) or not losses[-1] < losses[0]:
        raise SystemExit("the loss is not finite or did not decrease")
    if not (correlation > 0.9 and relative < 0.35):
        raise SystemExit("the learned variance does not track the true one")
    print("the learned variance tracks the true one")
    print("ok")


if __name__ == "__main__":
    main()
