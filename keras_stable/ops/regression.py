"""Regression losses: Poisson and Gaussian likelihoods, masked errors.

Elementwise negative log-likelihoods and errors; the classes in
`keras_stable.losses` average them over the last axis.
"""

import math

import numpy as np
from keras import ops

from keras_stable.common.checks import broadcast_shape
from keras_stable.common.checks import check_bool
from keras_stable.common.checks import check_positive
from keras_stable.common.checks import check_same_shape
from keras_stable.common.dtypes import compute_dtype_of
from keras_stable.common.dtypes import dtype_of
from keras_stable.common.dtypes import nan_where
from keras_stable.common.dtypes import result_float_dtype
from keras_stable.common.dtypes import static_shape
from keras_stable.common.dtypes import to_compute
from keras_stable.ops.logarithms import safe_log

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
# Stirling's series for lgamma(z), used at z >= _SHIFT (error < 1e-10 there).
_SHIFT = 7
_STIRLING = (1.0 / 12.0, -1.0 / 360.0, 1.0 / 1260.0, -1.0 / 1680.0)


def _lgamma(x):
    """`log(Gamma(x))` for `x > 0` with `keras.ops` only (NaN for `x <= 0`).

    `keras.ops` has no `lgamma`. Below `_SHIFT` the recurrence
    `lgamma(x) = lgamma(x + 7) - log(x (x + 1) ... (x + 6))` moves the
    argument to where Stirling's series is exact to float64 precision; the
    product of seven factors below 14 cannot overflow. `lgamma(1) =
    lgamma(2) = 0` (the counts 0 and 1) are returned exactly.
    """
    positive = ops.greater(x, 0)
    x = ops.where(positive, x, ops.ones_like(x))
    small = ops.less(x, _SHIFT)
    x_small = ops.where(small, x, ops.ones_like(x))
    product = ops.ones_like(x)
    for k in range(_SHIFT):
        product = product * (x_small + k)
    shift = ops.where(small, ops.log(product), ops.zeros_like(x))
    z = ops.where(small, x + _SHIFT, x)
    inv = 1.0 / z
    inv2 = inv * inv
    series = inv * (
        _STIRLING[0] + inv2 * (_STIRLING[1] + inv2 * (_STIRLING[2] + inv2 * _STIRLING[3]))
    )
    out = (z - 0.5) * ops.log(z) - z + _HALF_LOG_2PI + series - shift
    exact_zero = ops.logical_or(ops.equal(x, 1), ops.equal(x, 2))
    out = ops.where(exact_zero, ops.zeros_like(out), out)
    return ops.where(positive, out, nan_where(ops.logical_not(positive), out))


def poisson_nll(labels, log_rate, full=False, log_input=True):
    """Elementwise Poisson negative log-likelihood of counts `labels`.

    `exp(log_rate) - labels * log_rate`, plus `lgamma(labels + 1)` (the
    `log(labels!)` term, constant in the prediction) when `full=True`. With
    `log_input=False` the second argument holds the rate itself and the loss
    is `rate - labels * log(rate)`.

    Args:
        labels: observed counts (any real `labels >= 0`; `lgamma` needs
            `labels > -1`), same shape as `log_rate`.
        log_rate: the log of the Poisson rate (a model's linear output under
            a log link), or the rate with `log_input=False`.
        full: add `lgamma(labels + 1)`, the complete negative log-likelihood.
        log_input: whether `log_rate` holds log-rates (default) or rates.

    Returns:
        The elementwise loss, in the float dtype of `log_rate`.

    Numerical stability:
        No epsilon. From the log-rate the loss and its gradient
        `exp(log_rate) - labels` are exact for every `log_rate` whose `exp`
        is finite (below ~88.7 in float32); `log(exp(z) + 1e-7)` in
        `keras.losses.poisson` gives 16.1 instead of 20 at `z = -20`, `y = 1`,
        and a gradient of -0.02 instead of -1. With rates, `log(rate)`
        is `-inf` at `rate = 0` with a zero gradient (double where): a zero
        count there contributes exactly 0 (not `0 * -inf = NaN`) and a
        positive count gives `+inf`, the true value, with the finite
        gradient 1 (Keras: `1 - labels / 1e-7`, e.g. -1e7). A `log_rate` of
        `-inf` is read the same way. float16/bfloat16 are computed in
        float32 (`exp` overflows float16 past 11). Negative rates give NaN.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> labels = np.array([1.0, 0.0, 3.0], "float32")
        >>> log_rate = np.array([-20.0, -2.0, 1.0], "float32")
        >>> np.round(np.asarray(ops.poisson_nll(labels, log_rate)), 5)
        array([20.     ,  0.13534, -0.28172], dtype=float32)
        >>> np.asarray(ops.poisson_nll(labels, np.array([0.0, 0.0, 1.0], "float32"), log_input=False))
        array([inf,  0.,  1.], dtype=float32)
    """
    check_bool(full, "full")
    check_bool(log_input, "log_input")
    log_rate, out_dtype = to_compute(log_rate)
    labels = ops.convert_to_tensor(labels)
    check_same_shape(labels, log_rate, "labels", "log_rate")
    compute = compute_dtype_of(dtype_of(log_rate), dtype_of(labels))
    x = ops.cast(log_rate, compute)
    labels = ops.cast(labels, compute)
    if log_input:
        rate, log_x = ops.exp(x), x
    else:
        rate, log_x = x, safe_log(x)
    # A zero count times log(0) = -inf contributes 0, not NaN.
    zero_count = ops.equal(labels, 0)
    term = ops.where(zero_count, ops.zeros_like(x), labels * log_x)
    loss = rate - term
    if full:
        loss = loss + _lgamma(labels + 1.0)
    return ops.cast(loss, out_dtype)


def _scaled_error(diff, log_variance, compute):
    """`r` with `r**2 = diff**2 * exp(-log_variance)`, without overflow.

    `r = (diff * f) * f` with `f = exp(-log_variance / 4)`: a quarter of the
    exponent keeps `f` normal for `|log_variance|` up to ~347 in float32,
    where `diff**2` alone overflows past 1.8e19 and `exp(-log_variance)`
    past 88, and multiplying by `f` twice loses nothing to an intermediate
    overflow when the result is representable. Beyond that range nothing
    is left to compute: above it `r**2` is below the smallest normal number
    for every finite `diff` (`(3.4e38)**2 * exp(-347) = 2e-74` in float32),
    below it `r**2` overflows for every nonzero `diff` (the smallest
    denormal gives `2e-90 * exp(352) = 3e63`), and the same holds in
    float64. So the exponent is clamped to the range (its gradient is 0
    outside): `f` stays finite, `diff = 0` gives exactly 0 with a zero
    gradient, and no `0 * inf` reaches the gradient.
    """
    info = np.finfo(compute)
    # Where exp(quarter) is a normal, finite number (with half a unit of margin).
    low = math.log(float(info.tiny)) + 0.5
    high = math.log(float(info.max)) - 0.5
    f = ops.exp(ops.clip(-0.25 * log_variance, low, high))
    return (diff * f) * f


def gaussian_nll(labels, mean, log_variance, full=False):
    """Elementwise Gaussian negative log-likelihood with a predicted variance.

    `0.5 * (log_variance + (labels - mean)**2 * exp(-log_variance))`, plus
    `0.5 * log(2 pi)` when `full=True`: the loss of a heteroscedastic
    regression whose model predicts a mean and a log-variance per output.

    Args:
        labels: targets.
        mean: predicted means, same shape as `labels`.
        log_variance: predicted log-variances (natural log), broadcastable
            to `labels` NumPy-style, from the trailing axes (a scalar or a
            per-output variable of shape `labels.shape[-1:]` gives a
            homoscedastic model). One log-variance per sample is shaped
            `labels.shape[:-1] + (1,)`: `torch.nn.functional.gaussian_nll_loss`
            also reads a `var` of shape `input.shape[:-1]` that way, this
            op does not (it would align that shape with the trailing axes,
            as every `keras.ops` broadcast does): pass
            `log_variance[..., None]`.
        full: add the constant `0.5 * log(2 pi)`.

    Returns:
        The elementwise loss, in the promoted float dtype of `mean` and
        `log_variance`, with the broadcast shape.

    Numerical stability:
        The squared error is scaled as `(diff * f * f)**2` with
        `f = exp(-log_variance / 4)` (normal in float32 for `|log_variance|`
        up to ~347; beyond, the scaled error underflows to 0 or overflows
        to `inf` for every nonzero `diff`, and `f` is clamped); an exact fit
        (`diff = 0`) gives 0 for any `log_variance`. So the value is exact
        and finite for every finite `log_variance` wherever the true value
        is representable: at
        `log_variance = -100` and `diff = 0` the naive form computes
        `0 * exp(100) = 0 * inf = NaN` (true value -50); at
        `log_variance = 100` and `diff = 1e20` it computes
        `inf * 3.7e-44 = inf` (true value 50.00019). `exp(-log_variance)` is
        never formed as `1 / exp(log_variance)`. The gradients,
        `(mean - labels) * exp(-log_variance)` and
        `0.5 * (1 - diff**2 * exp(-log_variance))`, are finite wherever
        they are representable; the first can overflow while the value
        does not (e.g. `log_variance = -100`, `diff = 1e-3`: the value is
        1.3e37, the gradient 2.7e40 = `inf` in float32) - a predicted
        variance of `exp(-100)` is itself the problem there. float16 and
        bfloat16 are computed in float32.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> labels = np.array([0.0, 1e20, 1.0], "float32")
        >>> mean = np.zeros(3, "float32")
        >>> log_variance = np.array([-100.0, 100.0, 0.0], "float32")
        >>> np.asarray(ops.gaussian_nll(labels, mean, log_variance))
        array([-50.      ,  50.000187,   0.5     ], dtype=float32)
    """
    check_bool(full, "full")
    labels = ops.convert_to_tensor(labels)
    mean = ops.convert_to_tensor(mean)
    log_variance = ops.convert_to_tensor(log_variance)
    shape = broadcast_shape(static_shape(labels), static_shape(mean), "labels", "mean")
    try:
        broadcast_shape(shape, static_shape(log_variance), "labels and mean", "log_variance")
    except ValueError as error:
        if tuple(static_shape(log_variance)) == tuple(shape[:-1]):
            raise ValueError(
                f"{error} For one log-variance per sample (torch's "
                "`gaussian_nll_loss` reads a `var` of shape `input.shape[:-1]` "
                "that way), pass `log_variance[..., None]`."
            ) from None
        raise
    out_dtype = result_float_dtype(dtype_of(mean), dtype_of(log_variance))
    compute = compute_dtype_of(dtype_of(labels), dtype_of(mean), dtype_of(log_variance))
    labels = ops.cast(labels, compute)
    mean = ops.cast(mean, compute)
    log_variance = ops.cast(log_variance, compute)
    r = _scaled_error(mean - labels, log_variance, compute)
    loss = 0.5 * (log_variance + r * r)
    if full:
        loss = loss + _HALF_LOG_2PI
    return ops.cast(loss, out_dtype)


def _observed_error(labels, predictions):
    """`predictions - labels` where the label is observed, 0 where it is NaN.

    Returns `(error, out_dtype)`. The double where keeps a NaN label out of
    the arithmetic, so a missing entry has a zero gradient (`0 * NaN` and a
    single `where` both leak NaN into it).
    """
    labels = ops.convert_to_tensor(labels)
    predictions = ops.convert_to_tensor(predictions)
    check_same_shape(labels, predictions, "labels", "predictions")
    out_dtype = result_float_dtype(dtype_of(labels), dtype_of(predictions))
    compute = compute_dtype_of(dtype_of(labels), dtype_of(predictions))
    labels = ops.cast(labels, compute)
    predictions = ops.cast(predictions, compute)
    observed = ops.logical_not(ops.isnan(labels))
    zeros = ops.zeros_like(predictions)
    safe_labels = ops.where(observed, labels, zeros)
    error = ops.where(observed, predictions - safe_labels, zeros)
    return error, out_dtype


def masked_squared_error(labels, predictions):
    """Elementwise `(labels - predictions)**2`, 0 where the label is NaN.

    Args:
        labels: targets; NaN marks a missing label.
        predictions: predictions, same shape as `labels`.

    Returns:
        The elementwise squared error, in the promoted float dtype.

    Numerical stability:
        A missing (NaN) label gives exactly 0 and a zero gradient: the label
        is replaced by the double-where pattern before the subtraction.
        float16/bfloat16 are computed in float32 (an error of 300 squares to
        90000, above float16's maximum).

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> labels = np.array([1.0, np.nan, -1.0], "float32")
        >>> np.asarray(ops.masked_squared_error(labels, np.zeros(3, "float32")))
        array([1., 0., 1.], dtype=float32)
    """
    error, out_dtype = _observed_error(labels, predictions)
    return ops.cast(ops.square(error), out_dtype)


def masked_absolute_error(labels, predictions):
    """Elementwise `|labels - predictions|`, 0 where the label is NaN.

    Args:
        labels: targets; NaN marks a missing label.
        predictions: predictions, same shape as `labels`.

    Returns:
        The elementwise absolute error, in the promoted float dtype.

    Numerical stability:
        A missing (NaN) label gives exactly 0 and a zero gradient (double
        where). The gradient at a zero error is 0 on every backend (JAX's
        `abs` gives 1 there). float16/bfloat16 are computed in float32.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> labels = np.array([1.0, np.nan, -2.0], "float32")
        >>> np.asarray(ops.masked_absolute_error(labels, np.zeros(3, "float32")))
        array([1., 0., 2.], dtype=float32)
    """
    error, out_dtype = _observed_error(labels, predictions)
    # |e| as e * sign(e): the gradient at e = 0 is 0 on every backend
    # (JAX's abs gives 1 there, TensorFlow's and torch's 0).
    return ops.cast(error * ops.sign(error), out_dtype)


def masked_huber(labels, predictions, delta=1.0):
    """Elementwise Huber loss, 0 where the label is NaN.

    With `e = predictions - labels`: `0.5 * e**2` where `|e| <= delta`, else
    `delta * |e| - 0.5 * delta**2` (Keras's `keras.losses.huber`, before its
    mean over the last axis).

    Args:
        labels: targets; NaN marks a missing label.
        predictions: predictions, same shape as `labels`.
        delta: a finite float > 0, where the loss turns from quadratic to
            linear.

    Returns:
        The elementwise loss, in the promoted float dtype.

    Numerical stability:
        A missing (NaN) label gives exactly 0 and a zero gradient (double
        where). The gradient is `e` clipped to `[-delta, delta]`. float16 and
        bfloat16 are computed in float32.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> labels = np.array([0.5, np.nan, 3.0], "float32")
        >>> np.asarray(ops.masked_huber(labels, np.zeros(3, "float32")))
        array([0.125, 0.   , 2.5  ], dtype=float32)
    """
    delta = check_positive(delta, "delta")
    error, out_dtype = _observed_error(labels, predictions)
    abs_error = ops.abs(error)
    loss = ops.where(
        ops.less_equal(abs_error, delta),
        0.5 * ops.square(error),
        delta * abs_error - 0.5 * delta**2,
    )
    return ops.cast(loss, out_dtype)
