"""The benchmark rows of the density ops: the Gaussian KL of a VAE and the
mixture negative log-likelihood of a mixture density network, against the
formulas users write by hand (keras-io's VAE KL, `-log(sum(pi * N(y)))`).

Each is compiled like every row (`run.py --modes`); the hand-written forms
are written in `keras.ops`, as in the tutorials.
"""

import math

from case import Case
from case import K

# (batch, latent) for the KL; (batch, components, data dims) for the mixture.
KL_SIZES = {"S": (4096, 32), "M": (65536, 64), "L": (262144, 128)}
MIXTURE_SIZES = {"S": (4096, 8, 4), "M": (65536, 8, 4), "L": (262144, 16, 8)}


def build_latent(shape, dtype, rng):
    """Encoder outputs: means and log-variances near the prior."""
    mean = rng.standard_normal(shape).astype("float32")
    log_variance = (0.5 * rng.standard_normal(shape)).astype("float32")
    return [mean, log_variance], 1


def build_mixture(shape, dtype, rng):
    """Targets `(n, D)`, logits `(n, M)`, means and log-scales `(n, M, D)`;
    ordinary magnitudes, where the naive form is finite."""
    n, m, d = shape
    y = rng.standard_normal((n, d)).astype("float32")
    logits = rng.standard_normal((n, m)).astype("float32")
    mean = rng.standard_normal((n, m, d)).astype("float32")
    log_scale = (0.3 * rng.standard_normal((n, m, d))).astype("float32")
    return [y, logits, mean, log_scale], 2


def _keras_io_kl(m):
    """keras-io's VAE: `-0.5 * (1 + lv - mean**2 - exp(lv))`, summed, meaned."""
    o = K(m).ops

    def kl(mean, log_variance):
        terms = -0.5 * (1 + log_variance - o.square(mean) - o.exp(log_variance))
        return o.mean(o.sum(terms, axis=1))

    return kl


def _naive_mixture(m):
    """`-log(sum(pi * prod(N(y; mean, sigma))))`, meaned over the batch."""
    o = K(m).ops

    def nll(y, logits, mean, log_scale):
        pi = o.softmax(logits, axis=-1)
        sigma = o.exp(log_scale)
        z = (o.expand_dims(y, 1) - mean) / sigma
        density = o.prod(o.exp(-0.5 * z * z) / (sigma * math.sqrt(2 * math.pi)), axis=-1)
        return o.mean(-o.log(o.sum(pi * density, axis=-1)))

    return nll


def density_cases():
    """`gaussian_kl` and `mixture_nll` against their hand-written forms."""
    return [
        Case(
            "gaussian_kl",
            "op",
            "densities",
            KL_SIZES,
            build_latent,
            lambda m: lambda mean, lv: K(m).ops.mean(m.ks.ops.gaussian_kl(mean, lv)),
            {"keras-io VAE KL": _keras_io_kl},
        ),
        Case(
            "mixture_nll",
            "op",
            "densities",
            MIXTURE_SIZES,
            build_mixture,
            lambda m: lambda y, x, mu, s: K(m).ops.mean(m.ks.ops.mixture_nll(y, x, mu, s)),
            {"-log(sum(pi * N(y)))": _naive_mixture},
        ),
    ]
