"""`GaussianSampling`: the reparameterised sample of a VAE, in float32."""

import keras
from keras import ops

from keras_stable.common.checks import check_same_shape
from keras_stable.common.dtypes import compute_dtype_of
from keras_stable.common.dtypes import dtype_of
from keras_stable.common.serialization import register


def _check_seed(seed):
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ValueError(f"`seed` must be an int or None, got {seed!r}.")
    return seed


@register
class GaussianSampling(keras.layers.Layer):
    """Draws `mean + exp(log_variance / 2) * eps`, `eps ~ N(0, 1)`.

    The reparameterisation trick of a variational autoencoder: the
    replacement of the keras-io VAE's `Sampling` layer, called the same
    way on `[mean, log_variance]`, with `eps` from a
    `keras.random.SeedGenerator`. Like that layer it samples at every call,
    in training and in inference.

    Args:
        seed: int or None, the seed of the layer's `SeedGenerator` (the
            keras-io layer uses 1337; None draws one at random).
        **kwargs: base layer keyword arguments, such as `name` and `dtype`.
            `autocast` is always `False` (see Numerical stability).

    Call arguments:
        inputs: a list `[mean, log_variance]` of two float tensors of the
            same shape; `ValueError` naming both shapes otherwise.

    Returns:
        A sample of `mean`'s shape, in the layer's compute dtype.

    Numerical stability:
        `exp(log_variance / 2)`, `eps` and the sample are computed in
        float32 (float64 for float64 inputs) and only the sample is cast to
        the compute dtype. The keras-io layer computes them in the compute
        dtype: under `mixed_float16`, `exp(lv / 2)` is `inf` from
        `lv` = 22.2, so every sample is `inf` or NaN (`inf * 0`) and every
        gradient NaN; here a sample is `inf` only where its own value is
        beyond float16 (at `lv = 24` the standard deviation is 162755, so
        the samples with `|eps| > 0.4` are), and the gradients, computed in
        float32, are finite. Inputs are not autocast first, so float32
        means and log-variances stay float32.

    Examples:
        >>> import keras
        >>> import numpy as np
        >>> from keras_stable.layers import GaussianSampling
        >>> mean = keras.Input((2,))
        >>> log_variance = keras.Input((2,))
        >>> z = GaussianSampling(seed=1337)([mean, log_variance])
        >>> tuple(z.shape)
        (None, 2)

        Under `mixed_float16`, computed in float32, returned in float16:

        >>> layer = GaussianSampling(seed=1, dtype="mixed_float16")
        >>> mean = np.zeros((2, 3), "float32")
        >>> z = keras.ops.convert_to_numpy(layer([mean, np.full((2, 3), -100.0, "float32")]))
        >>> z.dtype, float(np.abs(z).max())
        (dtype('float16'), 0.0)
    """

    def __init__(self, seed=None, **kwargs):
        kwargs["autocast"] = False
        super().__init__(**kwargs)
        self.seed = _check_seed(seed)
        self.seed_generator = keras.random.SeedGenerator(self.seed)
        self.built = True

    def _split(self, inputs):
        if not isinstance(inputs, (list, tuple)) or len(inputs) != 2:
            raise ValueError(
                f"Layer '{self.name}' must be called on a list `[mean, log_variance]` "
                f"of two tensors, got {type(inputs).__name__}"
                + (f" of length {len(inputs)}." if isinstance(inputs, (list, tuple)) else ".")
            )
        return inputs

    def call(self, inputs):
        mean, log_variance = (ops.convert_to_tensor(x) for x in self._split(inputs))
        check_same_shape(mean, log_variance, "mean", "log_variance")
        compute = compute_dtype_of(dtype_of(mean), dtype_of(log_variance))
        mean = ops.cast(mean, compute)
        log_variance = ops.cast(log_variance, compute)
        eps = keras.random.normal(ops.shape(mean), dtype=compute, seed=self.seed_generator)
        return ops.cast(mean + ops.exp(0.5 * log_variance) * eps, self.compute_dtype)

    def compute_output_shape(self, input_shape):
        mean_shape, log_variance_shape = self._split(input_shape)
        if tuple(mean_shape) != tuple(log_variance_shape):
            raise ValueError(
                "`mean` and `log_variance` must have the same shape, got "
                f"mean.shape={tuple(mean_shape)} and "
                f"log_variance.shape={tuple(log_variance_shape)}."
            )
        return tuple(mean_shape)

    def get_config(self):
        config = super().get_config()
        config.update({"seed": self.seed})
        return config
