"""Float64 NumPy references of the log-space kit (`xlogy`, `logaddexp`,
`log1mexp`, `logsubexp`, `log_ndtr`, `softplus_inverse`, `entropy`,
`sparsemax`, `gaussian_kl`, `mixture_nll`), written from their
definitions; the rest are in `tests/reference.py`."""

import math

import numpy as np

from tests.reference import NEG_INF
from tests.reference import _f64
from tests.reference import _valid
from tests.reference import log_softmax
from tests.reference import logsumexp
from tests.reference import softmax

# --- log space (`keras_stable.ops.log_space`) ------------------------------------------


def xlogy(x, y):
    x, y = np.broadcast_arrays(_f64(x), _f64(y))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(x != 0, x * np.log(np.where(x != 0, y, 1.0)), 0.0)


def logaddexp(x1, x2):
    """`log(exp(x1) + exp(x2))`; equal infinities give themselves."""
    x1, x2 = np.broadcast_arrays(_f64(x1), _f64(x2))
    big, small = np.maximum(x1, x2), np.minimum(x1, x2)
    same = big == small
    with np.errstate(invalid="ignore"):
        return np.where(same, big + math.log(2.0), big + np.log1p(np.exp(small - big)))


def logaddexp_grad(x1, x2):
    """`(d/dx1, d/dx2)`: the softmax weights, `(0.5, 0.5)` at a tie."""
    x1, x2 = np.broadcast_arrays(_f64(x1), _f64(x2))
    g1 = 1.0 / (1.0 + np.exp(x2 - x1))
    return g1, 1.0 - g1


def log1mexp(x):
    """`log(1 - exp(x))` from the definition, with `1 - exp(x)` as
    `-expm1(x)` (float64's `1 - exp(x)` cancels for `|x| < 1e-8`)."""
    x = _f64(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(-np.expm1(x))


def log1mexp_grad(x):
    x = _f64(x)
    with np.errstate(divide="ignore", over="ignore"):
        return -1.0 / np.expm1(-x)


def logsubexp(x1, x2):
    x1, x2 = np.broadcast_arrays(_f64(x1), _f64(x2))
    with np.errstate(divide="ignore", invalid="ignore"):
        return x1 + log1mexp(np.where(x1 == x2, 0.0, x2 - x1))


def _log_ndtr_scalar(x):
    if x > -30.0:
        if x > 0:
            return math.log1p(-0.5 * math.erfc(x / math.sqrt(2.0)))
        return math.log(0.5 * math.erfc(-x / math.sqrt(2.0)))
    # Far in the tail (erfc underflows from x = -38 in float64): the
    # asymptotic expansion, 12 terms (its error below 25!!/30**26, 1e-26).
    series, term = 1.0, 1.0
    for n in range(1, 13):
        term *= -(2 * n - 1) / (x * x)
        series += term
    return -0.5 * x * x - math.log(-x) - 0.5 * math.log(2.0 * math.pi) + math.log(series)


def log_ndtr(x):
    """`log Phi(x)` in float64: `erfc` down to `x = -30`, the asymptotic
    expansion of `Phi` below."""
    x = _f64(x)
    out = np.vectorize(_log_ndtr_scalar, otypes=["float64"])(np.where(np.isfinite(x), x, 0.0))
    return np.where(np.isfinite(x), out, np.where(x > 0, 0.0, np.where(x < 0, NEG_INF, x)))


def log_ndtr_grad(x):
    """`pdf(x) / Phi(x)` as `exp(log_pdf - log_ndtr)`."""
    x = _f64(x)
    return np.exp(-0.5 * x * x - 0.5 * math.log(2.0 * math.pi) - log_ndtr(x))


def softplus_inverse(x):
    """`log(exp(x) - 1)` as `log(expm1(x))`, and `x + log(-expm1(-x))`
    where `expm1(x)` overflows float64 (x > 700)."""
    x = _f64(x)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.where(x > 700.0, x + np.log(-np.expm1(-x)), np.log(np.expm1(x)))


def softplus_inverse_grad(x):
    x = _f64(x)
    with np.errstate(divide="ignore", over="ignore"):
        return -1.0 / np.expm1(-x)


# --- entropy and sparsemax ---------------------------------------------------------


def entropy(x, axis=-1, mask=None):
    """`-sum(p log p)` of `p = softmax(x)` (0 log 0 = 0; an empty row: 0)."""
    p = softmax(x, axis=axis, mask=mask)
    logp = log_softmax(x, axis=axis, mask=mask)
    return -np.sum(np.where(p > 0, p * np.where(p > 0, logp, 0.0), 0.0), axis=axis)


def entropy_grad(x, g, axis=-1, mask=None):
    """`-p (log p + H) g` (0 where p = 0)."""
    p = softmax(x, axis=axis, mask=mask)
    logp = np.where(p > 0, log_softmax(x, axis=axis, mask=mask), 0.0)
    h = np.expand_dims(entropy(x, axis=axis, mask=mask), axis)
    return -p * (logp + h) * np.expand_dims(_f64(g), axis)


def sparsemax(x, axis=-1, mask=None):
    """The Euclidean projection onto the simplex of the valid entries of
    each slice along `axis` (an int or a tuple: projected together;
    Martins and Astudillo, 2016); an empty slice: 0."""
    x = _f64(x)
    axes = tuple(a % x.ndim for a in np.atleast_1d(axis))
    ends = tuple(range(x.ndim - len(axes), x.ndim))
    valid = np.moveaxis(_valid(x, mask), axes, ends)
    x = np.moveaxis(x, axes, ends)
    moved = x.shape
    flat = x.reshape(moved[: x.ndim - len(axes)] + (-1,))
    valid = valid.reshape(flat.shape)
    out = np.zeros_like(flat)
    for idx in np.ndindex(flat.shape[:-1]):
        row = flat[idx][valid[idx]]
        if row.size == 0:
            continue
        z = np.sort(row)[::-1]
        k = np.arange(1, z.size + 1)
        kz = k[1 + k * z > np.cumsum(z)][-1]
        tau = (np.cumsum(z)[kz - 1] - 1) / kz
        out[idx] = np.where(valid[idx], np.maximum(flat[idx] - tau, 0.0), 0.0)
    return np.moveaxis(out.reshape(moved), ends, axes)


def sparsemax_grad(x, g, axis=-1, mask=None):
    """The Jacobian product: `g_i - mean_S(g)` on the support `S`, else 0."""
    support = sparsemax(x, axis=axis, mask=mask) > 0
    g = np.broadcast_to(_f64(g), support.shape)
    count = np.maximum(np.sum(support, axis=axis, keepdims=True), 1)
    mean = np.sum(np.where(support, g, 0.0), axis=axis, keepdims=True) / count
    return np.where(support, g - mean, 0.0)


# --- densities: the Gaussian KL of a VAE, mixture likelihoods -----------------


def gaussian_kl(mean, log_variance, axis=-1):
    """`0.5 * sum(mean**2 + exp(lv) - 1 - lv)` from the definition (float64
    `expm1` keeps the small-`lv` terms exact enough)."""
    mean, lv = _f64(mean), _f64(log_variance)
    with np.errstate(over="ignore"):
        return 0.5 * np.sum(mean**2 + np.expm1(lv) - lv, axis=axis)


def gaussian_kl_grad(mean, log_variance, g):
    """The gradients of `gaussian_kl` (axis -1) for the cotangent `g`."""
    g = _f64(g)[..., None]
    with np.errstate(over="ignore"):
        return g * _f64(mean), g * 0.5 * np.expm1(_f64(log_variance))


def mixture_nll(y, logits, mean, log_scale, axis=-1):
    """`-log(sum_m pi_m prod_d N(y_d; mean_md, exp(log_scale_md)))` with the
    mixture weights `pi = softmax(logits, axis)`; `mean` and `log_scale` are
    `logits.shape + (D,)`, `y` is `logits.shape` without `axis`, plus D."""
    logits = _f64(logits)
    axis = axis % logits.ndim
    y = np.expand_dims(_f64(y), axis)
    mean, log_scale = _f64(mean), _f64(log_scale)
    z = (y - mean) / np.exp(log_scale)
    log_density = np.sum(-0.5 * z**2 - log_scale - 0.5 * np.log(2 * np.pi), axis=-1)
    log_weights = log_softmax(logits, axis=axis)
    return -logsumexp(log_weights + log_density, axis=axis)
