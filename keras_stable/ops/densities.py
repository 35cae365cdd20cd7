"""Densities in log space: the Gaussian KL of a VAE, mixture likelihoods.

Both are computed in float32 at least and returned in float32 (float64
for float64 inputs), like a loss: a KL of 49351.6 or a likelihood 400
standard deviations out is near or past float16's maximum of 65504.
"""

import math

import numpy as np
from keras import ops

from keras_stable.common.checks import check_axis
from keras_stable.common.checks import check_same_shape
from keras_stable.common.dtypes import compute_dtype_of
from keras_stable.common.dtypes import dtype_of
from keras_stable.common.dtypes import static_shape
from keras_stable.ops.regression import gaussian_nll
from keras_stable.ops.softmax import log_softmax
from keras_stable.ops.softmax import logsumexp

_LOG_2 = math.log(2.0)
# `expm1(x) - x` by its Taylor series below this |x|: the subtraction
# cancels there (x = 1e-4: 5e-9 left of 1e-4).
_SERIES_BELOW = 0.5
# The terms x**k / k! from k = 2 up to: the first one left out is below
# 2e-9 (float32) and 1e-20 (float64) of the sum at |x| = 0.5.
_SERIES_LAST = {"float32": 11, "float64": 17}


def _expm1_minus_x_half(lv, compute):
    """`0.5 * (exp(lv) - 1 - lv)`, exact to round-off and finite wherever
    it is representable, with a gradient finite wherever the value is.

    Three regions, selected by double where (each branch sees only its own
    inputs, so no unselected `inf` reaches a gradient):

    - `|lv| < 0.5`: the Taylor series of `expm1(lv) - lv` (no cancellation);
    - up to `log(max) - 8`: `expm1(lv) - lv`;
    - above: `expm1(lv - log 2) + 1`: `0.5 * exp(lv)` is finite up to
      `log(max) + log 2` (89.41 in float32), past `exp(lv)` itself
      (88.72), and so is its gradient `exp(lv - log 2)`. Rounding `lv - log 2`
      costs at most half an ulp of `lv` (4e-6 relative at 89 in float32),
      what rounding `lv` itself costs `exp`.
    """
    big_from = math.log(float(np.finfo(compute).max)) - 8.0
    small = ops.less(ops.abs(lv), _SERIES_BELOW)
    big = ops.greater(lv, big_from)
    zeros = ops.zeros_like(lv)
    x = ops.where(small, lv, zeros)
    # Horner: x**2 * (1/2! + x * (1/3! + x * (...))).
    last = _SERIES_LAST.get(compute, _SERIES_LAST["float64"])
    series = ops.full_like(lv, 1.0 / math.factorial(last))
    for k in range(last - 1, 1, -1):
        series = series * x + 1.0 / math.factorial(k)
    series = series * (x * x)
    # One `expm1` for both other regions: of `lv` in the middle, of
    # `lv - log 2` above (`expm1(lv - log 2) + 1 = 0.5 * exp(lv)`).
    arg = ops.where(big, lv - _LOG_2, ops.where(small, zeros, lv))
    e = ops.expm1(arg)
    large = (e + 1.0) - 0.5 * (1.0 + lv)
    middle = 0.5 * (e - lv)
    return ops.where(small, 0.5 * series, ops.where(big, large, middle))


def gaussian_kl(mean, log_variance, axis=-1):
    """`KL(N(mean, exp(log_variance)) || N(0, 1))`, summed over `axis`.

    `0.5 * sum(mean**2 + expm1(log_variance) - log_variance, axis)`: the
    KL term of a variational autoencoder whose encoder predicts a diagonal
    Gaussian (the keras-io VAE's
    `-0.5 * sum(1 + lv - mean**2 - exp(lv))`).

    Args:
        mean: the predicted means.
        log_variance: the predicted log-variances (natural log), same
            shape as `mean`.
        axis: the latent axis or axes summed over: an int (default -1), a
            tuple of ints, or `None` (every axis).

    Returns:
        The KL divergence, in float32 for float16, bfloat16 and float32
        inputs (float64 for float64 inputs), with `axis` removed.

    Numerical stability:
        Computed in float32 whatever the input dtype and returned in
        float32: float16 `log_variance = 11.5` gives 49351.6, where the
        naive `exp(lv)` in float16 is `inf` past 11.09. `expm1(lv) - lv`
        is its Taylor series for `|lv| < 0.5` (no cancellation near the
        prior), `0.5 * mean**2` is `(0.5 * mean) * mean` and
        `0.5 * exp(lv)` is `expm1(lv - log 2) + 1` above
        `log(max) - 8`, so the value is finite exactly where the true KL is
        representable: up to `lv` = 89.41 in float32 (`lv = 89` gives
        2.245e38, where `exp(89)` alone is `inf`) and for `|mean|` up to
        2.6e19. The gradient, `mean` and `0.5 * expm1(lv)`, is finite
        wherever the value is. Past that the value is `+inf`, the true KL
        being beyond float32, and so is the gradient with respect to that
        log-variance (`+inf` for a positive cotangent: the true derivative
        is beyond float32 too); the mean's gradient stays `mean`.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> mean = np.array([[0.0, 1.0], [0.0, 0.0]], "float16")
        >>> log_variance = np.array([[0.0, 0.0], [11.5, 0.0]], "float16")
        >>> [round(float(v), 1) for v in ops.gaussian_kl(mean, log_variance)]
        [0.5, 49351.6]
    """
    mean = ops.convert_to_tensor(mean)
    log_variance = ops.convert_to_tensor(log_variance)
    check_same_shape(mean, log_variance, "mean", "log_variance")
    axes = check_axis(axis, len(static_shape(mean)), multiple=True)
    compute = compute_dtype_of(dtype_of(mean), dtype_of(log_variance))
    mean = ops.cast(mean, compute)
    log_variance = ops.cast(log_variance, compute)
    terms = (0.5 * mean) * mean + _expm1_minus_x_half(log_variance, compute)
    if not axes:
        return terms
    return ops.sum(terms, axis=axes)


def _matches(shape, expected):
    return len(shape) == len(expected) and all(
        a == b or a is None or b is None for a, b in zip(shape, expected)
    )


def _check_mixture_shapes(y, logits, mean, log_scale, axis):
    """`ValueError` naming the argument and every shape, unless `mean` and
    `log_scale` are `logits.shape + (D,)` and `y` is `logits.shape` without
    `axis`, plus `(D,)`. Returns the non-negative `axis`."""
    shapes = {
        "y": static_shape(y),
        "logits": static_shape(logits),
        "mean": static_shape(mean),
        "log_scale": static_shape(log_scale),
    }
    described = ", ".join(f"{name}.shape={shape}" for name, shape in shapes.items())
    rank = len(shapes["logits"])
    if rank == 0:
        raise ValueError(f"`logits` must have a component axis, got {described}.")
    axis = check_axis(axis, rank)
    logits_shape = shapes["logits"]
    data = shapes["mean"][-1] if shapes["mean"] else None
    expected = {
        "mean": logits_shape + (data,),
        "log_scale": logits_shape + (data,),
        "y": logits_shape[:axis] + logits_shape[axis + 1 :] + (data,),
    }
    for name in ("mean", "log_scale", "y"):
        if not _matches(shapes[name], expected[name]):
            raise ValueError(
                f"`{name}` must have shape {expected[name]} (`mean` and "
                "`log_scale` are `logits.shape + (D,)`, `y` is `logits.shape` "
                f"without the component axis {axis}, plus `(D,)`), got {described}."
            )
    return axis


def mixture_nll(y, logits, mean, log_scale, axis=-1):
    """Negative log-likelihood of `y` under a mixture of diagonal Gaussians.

    `-log(sum_m softmax(logits)_m * prod_d N(y_d; mean_md, exp(log_scale_md)))`,
    computed in log space as
    `-logsumexp_m(log_softmax(logits)_m + sum_d log N(y_d; ...))`: the loss
    of a mixture density network.

    Args:
        y: the targets, `(..., D)`.
        logits: the unnormalised log mixture weights, `(..., M)`.
        mean: the component means, `(..., M, D)`: `logits.shape + (D,)`.
        log_scale: the log standard deviations (natural log), the shape of
            `mean`.
        axis: the component axis of `logits` (default -1). `mean` and
            `log_scale` carry it at the same position, followed by the data
            axis `D` (the last axis); `y` has `logits`'s shape without it,
            plus `D`. With the default, `logits` is `(..., M)`, `mean`
            `(..., M, D)` and `y` `(..., D)`.

    Returns:
        The negative log-likelihood, of `logits`'s shape without `axis`, in
        float32 (float64 for float64 inputs).

    Numerical stability:
        Never forms a density: each component's log-density is exact (the
        squared standardised error is scaled as in `gaussian_nll`, so
        neither `(y - mean)**2` nor `exp(-2 log_scale)` overflows on its
        own), and the mixture is a `logsumexp`. So a target 40 standard
        deviations away gives 800.919 with the gradient -40 with respect to
        the mean, where the naive `-log(sum(pi * N(y)))` gives `inf` (the
        densities underflow to 0) and a NaN gradient. A component with
        logit `-inf` takes no part: it gets exactly 0 gradient (its mean and
        log-scale too). Every logit `-inf` gives `+inf` with a zero
        gradient. Computed in float32 for float16 and bfloat16 inputs.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> y = np.array([[40.0]], "float32")
        >>> logits = np.zeros((1, 1), "float32")
        >>> mean = np.zeros((1, 1, 1), "float32")
        >>> np.asarray(ops.mixture_nll(y, logits, mean, mean))
        array([800.9189], dtype=float32)
    """
    y, logits, mean, log_scale = (ops.convert_to_tensor(a) for a in (y, logits, mean, log_scale))
    axis = _check_mixture_shapes(y, logits, mean, log_scale, axis)
    compute = compute_dtype_of(*(dtype_of(a) for a in (y, logits, mean, log_scale)))
    y, logits, mean, log_scale = (ops.cast(a, compute) for a in (y, logits, mean, log_scale))
    # `-log N(y; mean, exp(s))` is `gaussian_nll` with the log-variance 2 s.
    nll = gaussian_nll(ops.expand_dims(y, axis), mean, 2.0 * log_scale, full=True)
    component = log_softmax(logits, axis=axis) - ops.sum(nll, axis=-1)
    return -logsumexp(component, axis=axis)
