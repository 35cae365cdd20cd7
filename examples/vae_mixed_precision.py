"""The keras-io VAE under mixed precision: its KL term overflows float16.

The keras-io variational autoencoder (examples/generative/vae.py) samples
with `z_mean + exp(0.5 * z_log_var) * eps` and adds the KL term
`-0.5 * sum(1 + z_log_var - z_mean**2 - exp(z_log_var))`. Under the
`mixed_float16` policy both run in float16, where `exp` overflows past
11.09: an encoder whose log-variance reaches 11.5 (here from its bias, so
that the trap is hit deterministically) makes the KL `inf` (its true value
is 49351.6 per latent dimension), and every step's gradients are `inf` or
NaN: the loss-scale optimizer skips every step and the model never trains.

The same small VAE (a dense encoder and decoder on synthetic data) with
`keras_stable.layers.GaussianSampling` and `keras_stable.ops.gaussian_kl`,
which compute in float32, has a finite loss from the first step; once the
loss scale has come down to what float16 gradients of a KL this large
allow, it trains (the loss goes down).

    KERAS_BACKEND=jax python examples/vae_mixed_precision.py
"""

import keras
import numpy as np
from keras import ops

import keras_stable

FEATURES, LATENT = 16, 2
# The encoder's log-variance starts at 11.5: exp(11.5) = 98715 > 65504.
LOG_VARIANCE_BIAS = 11.5


class KerasIOSampling(keras.layers.Layer):
    """The keras-io `Sampling` layer (`eps` drawn in the compute dtype:
    TensorFlow does not multiply float16 by the float32 `eps` it draws)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seed_generator = keras.random.SeedGenerator(1337)

    def call(self, inputs):
        z_mean, z_log_var = inputs
        batch = ops.shape(z_mean)[0]
        dim = ops.shape(z_mean)[1]
        epsilon = keras.random.normal(
            shape=(batch, dim), dtype=z_mean.dtype, seed=self.seed_generator
        )
        return z_mean + ops.exp(0.5 * z_log_var) * epsilon


def keras_io_kl(z_mean, z_log_var):
    kl_loss = -0.5 * (1 + z_log_var - ops.square(z_mean) - ops.exp(z_log_var))
    return ops.sum(kl_loss, axis=1)


class KLLoss(keras.layers.Layer):
    """Called on `[z, z_mean, z_log_var]`: adds the batch mean of
    `kl(z_mean, z_log_var)` to the model's losses and passes `z` on."""

    def __init__(self, kl, **kwargs):
        super().__init__(**kwargs)
        self.kl = kl

    def call(self, inputs):
        z, z_mean, z_log_var = inputs
        self.add_loss(ops.mean(ops.cast(self.kl(z_mean, z_log_var), "float32")))
        return z


def vae(sampling, kl):
    """Encoder -> sampling -> decoder; the KL term is an added loss, the
    reconstruction error the compiled one."""
    inputs = keras.Input((FEATURES,))
    hidden = keras.layers.Dense(32, activation="relu")(inputs)
    z_mean = keras.layers.Dense(LATENT)(hidden)
    z_log_var = keras.layers.Dense(
        LATENT,
        kernel_initializer="zeros",
        bias_initializer=keras.initializers.Constant(LOG_VARIANCE_BIAS),
    )(hidden)
    z = KLLoss(kl)([sampling([z_mean, z_log_var]), z_mean, z_log_var])
    decoded = keras.layers.Dense(32, activation="relu")(z)
    outputs = keras.layers.Dense(FEATURES, activation="sigmoid", dtype="float32")(decoded)
    return keras.Model(inputs, outputs)


def train(sampling, kl, data, steps=12, epochs=4):
    keras.utils.set_random_seed(0)
    model = vae(sampling, kl)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss="binary_crossentropy",
        jit_compile=keras.config.backend() != "torch",
    )
    history = model.fit(data, data, batch_size=len(data) // steps, epochs=epochs, verbose=0)
    return model, history.history["loss"]


def main():
    keras.config.set_dtype_policy("mixed_float16")
    data = np.random.default_rng(0).uniform(size=(12 * 16, FEATURES)).astype("float32")

    lv = ops.full((1, LATENT), LOG_VARIANCE_BIAS, "float16")
    mean = ops.zeros((1, LATENT), "float16")
    print(f"KL at float16 log-variance {LOG_VARIANCE_BIAS} (true 98703.3):")
    print("  keras-io formula:", float(keras_io_kl(mean, lv)[0]))
    print("  ops.gaussian_kl: ", float(keras_stable.ops.gaussian_kl(mean, lv)[0]))

    naive_model, naive_loss = train(KerasIOSampling(), keras_io_kl, data)
    stable_model, stable_loss = train(
        keras_stable.layers.GaussianSampling(seed=1337), keras_stable.ops.gaussian_kl, data
    )
    # The loss-scale optimizer skips the steps whose float16 gradients
    # overflow (the first ones here, from a loss scale of 2**15), then trains.
    print("loss per epoch (12 steps each):")
    print("  keras-io Sampling + KL:          ", [float(v) for v in naive_loss])
    print("  GaussianSampling + gaussian_kl:  ", [round(float(v), 1) for v in stable_loss])
    keras.config.set_dtype_policy("float32")
    assert not np.isfinite(naive_loss).any()
    assert np.isfinite(stable_loss).all() and stable_loss[-1] < stable_loss[0]
    for w in stable_model.weights:
        assert np.all(np.isfinite(keras.ops.convert_to_numpy(w.value)))
    print("ok")


if __name__ == "__main__":
    main()
