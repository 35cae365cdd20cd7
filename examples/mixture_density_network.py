"""A mixture density network whose targets lie far from its first guesses.

The targets are bimodal: `y = +-(40 + 5 x)` plus noise, so a freshly
initialised network (means near 0, scales near 1) puts them 30 to 50
standard deviations away from every component. The hand-written mixture
likelihood `-log(sum(pi * N(y)))` forms the densities, which underflow to 0
there (`exp(-800)`): the loss is `inf` and its gradient NaN, and one step
turns every weight NaN. `keras_stable.losses.MixtureDensityNLL` computes
the same likelihood in log space (`logsumexp` over the components of
`log pi + log N`): finite from the first step, its loss goes down from
the first epoch (the exact values: 800.919 at 40 standard deviations).

    KERAS_BACKEND=jax python examples/mixture_density_network.py
"""

import math

import keras
import numpy as np
from keras import ops

import keras_stable

M = 2  # components; one-dimensional targets (D = 1)


def make_data(n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.0, 1.0, size=(n, 1)).astype("float32")
    branch = rng.choice([-1.0, 1.0], size=(n, 1))
    y = branch * (40.0 + 5.0 * x) + 0.5 * rng.normal(size=(n, 1))
    return x, y.astype("float32")


def naive_mixture_nll(y_true, y_pred):
    """`-log(sum(pi * N(y)))` over the same `[logits | means | log-scales]` head."""
    pi = ops.softmax(y_pred[:, :M])
    mean, sigma = y_pred[:, M : 2 * M], ops.exp(y_pred[:, 2 * M :])
    z = (y_true - mean) / sigma
    density = ops.exp(-0.5 * z * z) / (sigma * math.sqrt(2 * math.pi))
    return -ops.log(ops.sum(pi * density, axis=-1))


def build_model():
    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [
            keras.Input((1,)),
            keras.layers.Dense(32, activation="tanh"),
            keras.layers.Dense(M * 3),  # M logits, M means, M log-scales
        ]
    )


def train(loss, x, y, epochs):
    model = build_model()
    model.compile(
        optimizer=keras.optimizers.Adam(0.05),
        loss=loss,
        jit_compile=keras.config.backend() != "torch",
    )
    history = model.fit(x, y, batch_size=64, epochs=epochs, verbose=0).history["loss"]
    return model, history


def main():
    x, y = make_data(512)
    naive_model, naive = train(naive_mixture_nll, x, y, epochs=1)
    weights_nan = any(
        np.isnan(keras.ops.convert_to_numpy(w.value)).any() for w in naive_model.weights
    )
    print(f"hand-written -log(sum(pi * N)): loss {naive[0]}, weights NaN: {weights_nan}")

    model, history = train(keras_stable.losses.MixtureDensityNLL(M), x, y, epochs=5)
    print("MixtureDensityNLL, loss per epoch:", [round(v, 2) for v in history])
    assert not np.isfinite(naive[0]) and weights_nan
    assert np.all(np.isfinite(history)) and history[-1] < history[0]
    for w in model.weights:
        assert np.all(np.isfinite(keras.ops.convert_to_numpy(w.value)))
    print("ok")


if __name__ == "__main__":
    main()
