"""Arithmetic in log space: `x log y`, `log(e^a + e^b)`, `log(1 - e^x)`,
`log(e^a - e^b)`, the log of the normal CDF and the inverse softplus.

Each is exact where the naive formula rounds to `0`, `1` or `inf` first,
and gives its contract infinities (built from the data, never as a
constant) with finite gradients.
"""

import math

from keras import ops

from keras_stable.common.checks import broadcast_shape
from keras_stable.common.dtypes import compute_dtype_of
from keras_stable.common.dtypes import dtype_of
from keras_stable.common.dtypes import inf_where
from keras_stable.common.dtypes import is_neg_inf
from keras_stable.common.dtypes import is_pos_inf
from keras_stable.common.dtypes import nan_where
from keras_stable.common.dtypes import result_float_dtype
from keras_stable.common.dtypes import static_shape
from keras_stable.common.dtypes import to_compute
from keras_stable.ops._erfc import erfc32
from keras_stable.ops._erfc import log1p32

_LOG2 = math.log(2.0)
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_SQRT1_2 = math.sqrt(0.5)
# Below this `x`, `log_ndtr` is the asymptotic series (TFP's thresholds):
# the series of order 3 is exact to round-off there, and `erfc(-x / sqrt 2)`
# would soon underflow.
_LOG_NDTR_LOWER = {"float32": -10.0, "float64": -20.0}
# `softplus_inverse` above this `x`: `x + log(-expm1(-x))` (`expm1(x)`
# overflows float32 past 88.7).
_SOFTPLUS_INVERSE_SWITCH = 1.0


def _pair(x1, x2, name1, name2):
    """Both arguments as tensors of their compute dtype and of one rank
    (leading axes of length 1 added: JAX's `rank_promotion="raise"` then
    holds), checked to broadcast, and the dtype of the result."""
    x1, x2 = ops.convert_to_tensor(x1), ops.convert_to_tensor(x2)
    broadcast_shape(static_shape(x1), static_shape(x2), name1, name2)
    dtypes = (dtype_of(x1), dtype_of(x2))
    compute = compute_dtype_of(*dtypes)
    x1, x2 = ops.cast(x1, compute), ops.cast(x2, compute)
    for _ in range(len(x2.shape) - len(x1.shape)):
        x1 = ops.expand_dims(x1, 0)
    for _ in range(len(x1.shape) - len(x2.shape)):
        x2 = ops.expand_dims(x2, 0)
    return x1, x2, result_float_dtype(*dtypes)


def xlogy(x, y):
    """`x * log(y)`, and 0 where `x == 0`, whatever `y`.

    Args:
        x: tensor.
        y: tensor, broadcastable with `x` (as in `keras.ops`).

    Returns:
        The broadcast product, in the promoted float dtype of `x` and `y`
        (float32 for integers).

    Numerical stability:
        The plain product is `0 * -inf = NaN` at `x = 0, y = 0` (the
        entropy term `p log p` of a zero probability), and `0 * inf` at
        `y = inf`; its gradient with respect to `y`, `x / y`, is `0 / 0`
        there. The double where `where(x != 0, x * log(where(x != 0, y, 1)), 0)`
        gives exactly 0 where `x == 0` with a zero gradient for both
        arguments, and the exact value elsewhere (`y = 0` with `x != 0` is
        `-inf` times the sign of `x`, `y < 0` NaN). float16/bfloat16 are
        computed in float32. NaN propagates.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> x = np.array([0.0, 0.0, 2.0], "float32")
        >>> y = np.array([0.0, np.inf, np.e], "float32")
        >>> np.round(np.asarray(ops.xlogy(x, y)), 5)
        array([0., 0., 2.], dtype=float32)
    """
    x, y, out_dtype = _pair(x, y, "x", "y")
    nonzero = ops.not_equal(x, 0)
    product = x * ops.log(ops.where(nonzero, y, ops.ones_like(y)))
    return ops.cast(ops.where(nonzero, product, ops.zeros_like(product)), out_dtype)


def logaddexp(x1, x2):
    """`log(exp(x1) + exp(x2))`, elementwise, as `keras.ops.logaddexp`.

    Args:
        x1: tensor.
        x2: tensor, broadcastable with `x1`.

    Returns:
        The broadcast result, in the promoted float dtype of `x1` and `x2`
        (float32 for integers).

    Numerical stability:
        Computed as `max + log1p(exp(min - max))`: exact for any difference
        (`exp` never overflows), and the gradient `(1 - s, s)` with
        `s = sigmoid(min - max)` is `(0.5, 0.5)` at a tie on every backend
        (Keras's TensorFlow backend gives `(1, 0)`). Two equal infinities
        give that infinity (`(-inf, -inf)` is `-inf`, not the NaN of
        `-inf - -inf`) with a zero gradient; `(inf, x)` gives `inf` with
        the gradient `(1, 0)`. float16/bfloat16 are computed in float32.
        NaN propagates.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> x1 = np.array([0.0, 100.0, -np.inf], "float32")
        >>> x2 = np.array([0.0, -100.0, -np.inf], "float32")
        >>> np.round(np.asarray(ops.logaddexp(x1, x2)), 5)
        array([  0.69315, 100.     ,      -inf], dtype=float32)
    """
    x1, x2, out_dtype = _pair(x1, x2, "x1", "x2")
    first = ops.greater_equal(x1, x2)
    big = ops.where(first, x1, x2)
    small = ops.where(first, x2, x1)
    # Both -inf or both +inf: `small - big` would be NaN.
    same_inf = ops.logical_or(is_neg_inf(big), is_pos_inf(small))
    zeros = ops.zeros_like(big)
    safe_big = ops.where(same_inf, zeros, big)
    safe_small = ops.where(same_inf, zeros, small)
    out = safe_big + ops.log1p(ops.exp(safe_small - safe_big))
    return ops.cast(ops.where(same_inf, ops.stop_gradient(big), out), out_dtype)


def _log1mexp(x):
    """`log1mexp` of a compute-dtype tensor (no cast)."""
    negative = ops.less(x, 0)
    near = ops.logical_and(ops.greater(x, -_LOG2), negative)
    far = ops.less_equal(x, -_LOG2)
    # Each branch sees only its own inputs: -expm1(0) = 0 and exp(0) = 1
    # would put log(0) and its infinite derivative into the gradient.
    x_near = ops.where(near, x, ops.full_like(x, -0.5))
    x_far = ops.where(far, x, ops.full_like(x, -1.0))
    out = ops.where(near, ops.log(-ops.expm1(x_near)), ops.log1p(-ops.exp(x_far)))
    zero = ops.equal(x, 0)
    out = ops.where(zero, inf_where(zero, x, negative=True), out)
    invalid = ops.logical_not(ops.less_equal(x, 0))  # positive or NaN
    return ops.where(invalid, nan_where(invalid, x), out)


def log1mexp(x):
    """`log(1 - exp(x))` for `x <= 0`.

    Args:
        x: tensor of non-positive values.

    Returns:
        A tensor of the shape and float dtype of `x` (float32 for integers).

    Numerical stability:
        Maechler's switch at `-log 2`: `log(-expm1(x))` above it,
        `log1p(-exp(x))` below, each exact where the other cancels. The
        plain formula gives `-inf` from `x = -3e-8` in float32 (`exp(x)`
        rounds to 1): `log1mexp(-1e-8)` is `-18.4207`, and the value is exact
        down to `x = -1e-30` (`-69.0776`). `x = 0` gives `-inf` and
        `x = -inf` gives 0, both with a zero gradient; the gradient
        `-1 / expm1(-x)` is finite everywhere else below 0 (`-1e30` at
        `-1e-30`). `x > 0` gives NaN (`1 - exp(x)` is negative), with a zero
        gradient; NaN gives NaN. float16/bfloat16 are computed in float32.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> x = np.array([-1e-8, -1.0, -50.0, 0.0], "float32")
        >>> np.round(np.asarray(ops.log1mexp(x)), 4)
        array([-18.4207,  -0.4587,  -0.    ,     -inf], dtype=float32)
    """
    x, out_dtype = to_compute(x)
    return ops.cast(_log1mexp(x), out_dtype)


def logsubexp(x1, x2):
    """`log(exp(x1) - exp(x2))` for `x1 >= x2`.

    Args:
        x1: tensor.
        x2: tensor, broadcastable with `x1`, not above it.

    Returns:
        The broadcast result, in the promoted float dtype of `x1` and `x2`
        (float32 for integers).

    Numerical stability:
        Computed as `x1 + log1mexp(x2 - x1)` (see `log1mexp`): exact where
        the difference of exponentials overflows (`x1 = 1000`) or cancels
        (`x2` within `1e-6` of `x1`). `x1 == x2` gives `-inf` (both `-inf`
        included) with a finite gradient (1 for `x1`, 0 for `x2`);
        `x2 = -inf` gives `x1`. `x1 < x2` gives NaN, as do two `+inf`
        (`inf - inf`). float16/bfloat16
        are computed in float32. NaN propagates.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> x1 = np.array([1000.0, 1.0, 2.0], "float32")
        >>> x2 = np.array([999.0, 1.0, -np.inf], "float32")
        >>> np.round(np.asarray(ops.logsubexp(x1, x2)), 4)
        array([999.5413,     -inf,    2.    ], dtype=float32)
    """
    x1, x2, out_dtype = _pair(x1, x2, "x1", "x2")
    same = ops.equal(x1, x2)
    # `-inf - -inf` is NaN: equal arguments (infinite ones too) differ by 0.
    zeros = ops.zeros_like(ops.where(same, x1, x2))
    diff = ops.where(same, zeros, x2) - ops.where(same, zeros, x1)
    return ops.cast(x1 + _log1mexp(diff), out_dtype)


def _log_ndtr_series(x):
    """The asymptotic series of `log Phi(x)` for `x << -1`, order 3
    (TFP's `_log_ndtr_lower`): `-x^2/2 - log(-x) - log(2 pi)/2 +
    log(1 - 1/x^2 + 3/x^4 - 15/x^6)`."""
    # Below -1e10 the series is 1 to round-off; clamped there, 1 / x^2 and
    # its derivative never meet an overflowed square.
    clamped = ops.where(ops.less(x, -1e10), ops.full_like(x, -1e10), x)
    inv_x2 = 1.0 / (clamped * clamped)
    series = 1.0 + inv_x2 * (-1.0 + inv_x2 * (3.0 - 15.0 * inv_x2))
    # `(-x / 2) * x`: past -2.6e19 the value overflows to -inf (float32),
    # and each factor's derivative stays finite.
    return (-0.5 * x) * x - ops.log(-x) - _HALF_LOG_2PI + ops.log(series)


# Veltkamp's split of a float into two halves whose products with a
# constant of `bits` significant bits are exact.
_SPLIT_BITS = {"float32": 12, "float64": 27}


def _erfc_of_scaled(u):
    """`erfc(u / sqrt 2)` for `|u| <= 64`, to round-off.

    Rounding `z = u / sqrt 2` alone moves `erfc(z)` by `2 z^2` units in the
    last place (25 at `u = 5`): the rounding error `d` of `z` is recovered
    (Dekker's exact product, with `1/sqrt 2` split into a short high part
    and a low part) and `erfc(z + d) = erfc(z) - d * 2/sqrt(pi) * exp(-z^2)`
    in float64; in float32 `erfc32(z, d)` takes it (`keras.ops.erfc` is
    not accurate enough there, see `_erfc`).
    """
    bits = _SPLIT_BITS["float64" if dtype_of(u) == "float64" else "float32"]
    c_high = math.ldexp(round(math.ldexp(_SQRT1_2, bits)), -bits)
    c_low = _SQRT1_2 - c_high
    z = u * _SQRT1_2
    # u = u_high + u_low, each short enough for an exact product with c_high.
    t = u * float(2**bits + 1)
    u_high = t - (t - u)
    u_low = u - u_high
    z_high = u * c_high
    exact_minus_z_high = ((u_high * c_high - z_high) + u_low * c_high) + u * c_low
    d = (z_high - z) + exact_minus_z_high
    if dtype_of(u) != "float64":
        # keras.ops.erfc in float32 is up to 63 units off under XLA: the
        # value is `erfc32`'s (a table look-up, one rounding), and the
        # derivatives (all orders) `keras.ops.erfc`'s, through `e - e`.
        erfc = ops.erfc(z)
        return ops.stop_gradient(erfc32(z, d)) + (erfc - ops.stop_gradient(erfc))
    # Round-off only: its derivative is not autodiff's business.
    correction = ops.stop_gradient(d * (2.0 / math.sqrt(math.pi)) * ops.exp(-ops.square(z)))
    return ops.erfc(z) - correction


def log_ndtr(x):
    """`log Phi(x)`, the log of the standard normal CDF.

    Args:
        x: tensor.

    Returns:
        A tensor of the shape and float dtype of `x` (float32 for integers).

    Numerical stability:
        `log(0.5 * erfc(-x / sqrt 2))` for `x <= 0`, and
        `log1p(-0.5 * erfc(x / sqrt 2))` above (no `1 - tiny` rounding to
        1), with the rounding error of `x / sqrt 2` corrected (it alone
        would cost 25 units in the last place at `x = 5`); below `x = -10`
        (`-20` in float64) the asymptotic series of order 3, as TensorFlow
        Probability's `log_ndtr`, exact to round-off there. In float32,
        on every backend, eager or compiled (TF's `jit_compile`, JAX's
        `jit`): within 1 unit in the last place of the exact value from
        `x = -10` to 11 (results down to 1e-28) and 2 in the series below.
        The float32 `erfc` and `log1p` there are the package's own, each
        within 1 unit (`erfc` from a table at multiples of 1/256 and a
        Taylor correction, rounded once): `keras.ops.erfc` is up to 63
        units off under XLA and TF's eager `log1p` 3, which cost up to 29
        units above 0. Derivatives are `keras.ops.erfc`'s and `log1p`'s.
        The plain `log(ndtr(x))` is `-inf` from `x = -14` in float32 (`Phi`
        underflows) with a NaN gradient; this is finite down to `x = -1e3`
        (`-500006.9`), and its gradient `exp(log_pdf(x) - log_ndtr(x))`
        (about `-x` far out) comes from the formulas, never as
        `pdf / Phi = 0 / 0`. Each branch sees only its own inputs (double
        where). `-inf` gives `-inf` and `+inf` gives 0, with a zero
        gradient. float16/bfloat16 are computed in float32 (a float16
        result below -65504 is `-inf`). NaN gives NaN.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> x = np.array([-40.0, 0.0, 5.0], "float32")
        >>> np.round(np.asarray(ops.log_ndtr(x), "float64"), 2).tolist()
        [-804.61, -0.69, -0.0]
    """
    x, out_dtype = to_compute(x)
    lower = _LOG_NDTR_LOWER["float64" if dtype_of(x) == "float64" else "float32"]
    finite = ops.isfinite(x)
    tail = ops.logical_and(ops.less_equal(x, lower), finite)
    positive = ops.greater(x, 0)
    middle = ops.logical_and(ops.logical_not(tail), ops.logical_not(positive))
    zeros = ops.zeros_like(x)
    x_tail = ops.where(tail, x, ops.full_like(x, lower))
    x_middle = ops.where(ops.logical_and(middle, finite), x, zeros)
    # erfc(64 / sqrt 2) is 0 in float64: beyond 64, as at 64.
    x_upper = ops.where(ops.logical_and(positive, ops.less(x, 64.0)), x, zeros)
    x_upper = ops.where(ops.greater_equal(x, 64.0), ops.full_like(x, 64.0), x_upper)
    from_series = _log_ndtr_series(x_tail)
    # One erfc for both branches, erfc(|x| / sqrt 2); each log sees only its
    # own branch's values (the upper erfc underflows to 0).
    erfc = _erfc_of_scaled(ops.where(positive, x_upper, -x_middle))
    from_lower_cdf = ops.log(0.5 * ops.where(positive, ops.ones_like(x), erfc))
    upper_tail = -0.5 * ops.where(positive, erfc, zeros)
    from_upper_cdf = ops.log1p(upper_tail)
    if dtype_of(x) != "float64":
        # TF's eager float32 log1p is 3 units off: the value is log1p32's,
        # the derivatives keras.ops.log1p's.
        accurate = ops.stop_gradient(log1p32(upper_tail))
        from_upper_cdf = accurate + (from_upper_cdf - ops.stop_gradient(from_upper_cdf))
    out = ops.where(tail, from_series, ops.where(positive, from_upper_cdf, from_lower_cdf))
    # -inf gives -inf, without gradient (NaN falls in the middle branch as
    # 0: put it back).
    neg_inf = is_neg_inf(x)
    out = ops.where(neg_inf, inf_where(neg_inf, x, negative=True), out)
    nan = ops.isnan(x)
    return ops.cast(ops.where(nan, nan_where(nan, x), out), out_dtype)


def softplus_inverse(x):
    """`log(exp(x) - 1)`, the inverse of `softplus`, for `x >= 0`.

    Args:
        x: tensor of non-negative values.

    Returns:
        A tensor of the shape and float dtype of `x` (float32 for integers).

    Numerical stability:
        `log(expm1(x))` up to `x = 1` (exact for small `x`, where
        `log(exp(x) - 1)` is `log(0) = -inf` below `x = 6e-8` in float32),
        `x + log(-expm1(-x))` above (where `exp(x)` overflows past 88.7): exact
        from `x = 1e-30` (`-69.0776`) to `1e4` and beyond. The gradient
        `1 / -expm1(-x)` is finite for every `x > 0`. `x = 0` gives `-inf`
        with a zero gradient, `x < 0` NaN (zero gradient), `+inf` gives
        `inf`. float16/bfloat16 are computed in float32. NaN gives NaN.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> x = np.array([1e-30, 1.0, 1e4], "float32")
        >>> np.round(np.asarray(ops.softplus_inverse(x), "float64"), 4).tolist()
        [-69.0776, 0.5413, 10000.0]
    """
    x, out_dtype = to_compute(x)
    positive = ops.greater(x, 0)
    small = ops.logical_and(positive, ops.less_equal(x, _SOFTPLUS_INVERSE_SWITCH))
    large = ops.greater(x, _SOFTPLUS_INVERSE_SWITCH)
    x_small = ops.where(small, x, ops.ones_like(x))
    x_large = ops.where(large, x, ops.full_like(x, 2.0))
    from_small = ops.log(ops.expm1(x_small))
    from_large = x_large + ops.log(-ops.expm1(-x_large))
    out = ops.where(large, from_large, from_small)
    zero = ops.equal(x, 0)
    out = ops.where(zero, inf_where(zero, x, negative=True), out)
    invalid = ops.logical_not(ops.greater_equal(x, 0))  # negative or NaN
    return ops.cast(ops.where(invalid, nan_where(invalid, x), out), out_dtype)
