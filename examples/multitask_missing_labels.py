"""Multi-task regression with missing (NaN) labels and per-batch task masks.

Six regression targets per sample; about a quarter of the labels are missing
(stored as NaN), and each batch trains only some tasks (a (batch, tasks)
`sample_weight` of 0/1 switches the others off). With a plain
`MeanSquaredError` a single NaN label makes the loss NaN;
`keras_stable.losses.MaskedMultiTaskDistance` treats NaN as "missing" and a
weight of 0 as "masked", with exactly zero gradient for both, under
`jit_compile=True` too.

    KERAS_BACKEND=jax python examples/multitask_missing_labels.py
"""

import keras
import numpy as np

import keras_stable

TASKS = 6
FEATURES = 10


def make_data(n, seed=0):
    w = np.random.default_rng(42).normal(size=(FEATURES, TASKS))  # the tasks
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, FEATURES)).astype("float32")
    y = np.tanh(x @ w / 3.0) + 0.05 * rng.normal(size=(n, TASKS))
    y = y.astype("float32")
    y[rng.random(y.shape) < 0.25] = np.nan  # missing labels
    # Each sample trains a random subset of the tasks (0 = switched off).
    task_mask = (rng.random((n, TASKS)) < 0.7).astype("float32")
    return x, y, task_mask


def build_model():
    return keras.Sequential(
        [
            keras.Input((FEATURES,)),
            keras.layers.Dense(32, activation="relu"),
            keras.layers.Dense(TASKS),
        ]
    )


def main():
    keras.utils.set_random_seed(0)
    x, y, task_mask = make_data(2048)
    x_val, y_val, _ = make_data(512, seed=1)

    # The plain loss: one NaN label is enough.
    plain = keras.losses.MeanSquaredError()
    print("plain MSE on the first batch:", float(plain(y[:32], np.zeros_like(y[:32]))))

    model = build_model()
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=keras_stable.losses.MaskedMultiTaskDistance(squared=True),
        metrics=[keras_stable.metrics.MaskedMultiTaskDistance(name="distance")],
        # XLA on TensorFlow and JAX; torch.compile is too slow for a demo.
        jit_compile=keras.config.backend() != "torch",
    )
    history = model.fit(x, y, sample_weight=task_mask, batch_size=64, epochs=5, verbose=0)
    losses = history.history["loss"]
    print("training loss per epoch:", [round(v, 4) for v in losses])

    # Evaluate on every observed label (NaN still means missing).
    result = model.evaluate(x_val, y_val, verbose=0, return_dict=True)
    print("validation:", {k: round(v, 4) for k, v in result.items()})

    weights_finite = all(bool(keras.ops.all(keras.ops.isfinite(w.value))) for w in model.weights)
    if not (np.all(np.isfinite(losses)) and weights_finite):
        raise SystemExit("non-finite loss or weights")
    if not losses[-1] < losses[0]:
        raise SystemExit("the loss did not decrease")
    print("finite loss and weights, and the loss decreased")
    print("ok")


if __name__ == "__main__":
    main()
