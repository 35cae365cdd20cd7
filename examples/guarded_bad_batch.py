"""Training through one bad batch: `Guarded` skips it, Keras does not.

A small regression model is trained for two epochs on data where one batch
holds a NaN target (a corrupt record). With `keras.optimizers.Adam(
global_clipnorm=1.0)` that batch turns every weight NaN, and the rest of the
run is lost. With `keras_stable.optimizers.Guarded(Adam(), global_clipnorm=1.0)`
the step is skipped atomically (weights, Adam's moments and `iterations`
are left exactly as they were), `skipped_steps` counts it, and training
goes on. A batch with a finite but huge gradient (targets of 1e20) is
clipped to the clip norm, where Keras's clipping overflows.

    python examples/guarded_bad_batch.py
"""

import keras
import numpy as np

from keras_stable.optimizers import Guarded

BATCH = 16


def make_data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(256, 4)).astype("float32")
    y = (x @ np.array([1.0, -2.0, 0.5, 3.0], "float32"))[:, None]
    y[5 * BATCH + 3] = np.nan  # one corrupt record, in the sixth batch
    return x, y


def train(optimizer, x, y):
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=optimizer, loss="mse")
    model.fit(x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0)
    return model


def all_finite(model):
    return all(np.all(np.isfinite(w)) for w in model.get_weights())


def main():
    x, y = make_data()
    clean = np.all(np.isfinite(y), axis=1)

    keras_model = train(keras.optimizers.Adam(0.01, global_clipnorm=1.0), x, y)
    print("keras Adam(global_clipnorm=1): weights finite:", all_finite(keras_model))
    assert not all_finite(keras_model)

    guarded = train(Guarded(keras.optimizers.Adam(0.01), global_clipnorm=1.0), x, y)
    skipped = int(keras.ops.convert_to_numpy(guarded.optimizer.skipped_steps))
    mse = float(np.mean((guarded.predict(x[clean], verbose=0) - y[clean]) ** 2))
    print(
        f"Guarded(Adam, global_clipnorm=1): weights finite: {all_finite(guarded)}, "
        f"skipped steps: {skipped}, mse on clean data: {mse:.4f}"
    )
    assert all_finite(guarded) and skipped == 2  # the bad batch, once per epoch
    assert mse < float(np.var(y[clean]))

    # A finite gradient of ~1e20: Keras's squared norm overflows to inf.
    huge = np.full((BATCH, 1), 1e20, "float32")
    for optimizer in (
        keras.optimizers.Adam(0.01, global_clipnorm=1.0),
        Guarded(keras.optimizers.Adam(0.01), global_clipnorm=1.0),
    ):
        model = train(optimizer, x[clean], y[clean])
        model.train_on_batch(x[:BATCH], huge)
        print(f"{type(optimizer).__name__} after a 1e20 target: weights finite:", all_finite(model))
    assert all_finite(model)
    print("ok")


if __name__ == "__main__":
    main()
