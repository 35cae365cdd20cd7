"""`erfc` and `log1p` in float32 to within 1 unit in the last place, from
`keras.ops`: the float32 kernels of `log_ndtr`.

`keras.ops.erfc` in float32 is XLA's under compilation (TF's
`jit_compile`, JAX): `exp(-z^2) * P(1/z^2)` with `z^2` rounded first,
which costs `2 z^2` units in the last place (up to 63 below `z = 9`); TF's
eager kernel is 7 units off. Even the classic repair (fdlibm's, `z^2`
split in two) rounds five or six times: 2 to 4 units.

Here the value is rounded once. `a = |z|` is `a_h + d`, `a_h` the nearest
multiple of 1/256 and `|d| <= 1/512`; `erfc(a_h)` comes from a table as a
float32 pair `(high, low)` (48 bits), and `erfc(a_h + d) = erfc(a_h) -
g(a_h) d S(d)`, `g = 2/sqrt(pi) exp(-a^2)` (tabulated too) and `S` the
Taylor series `sum_n (-1)^n H_n(a_h) d^n / (n + 1)!` (Hermite
polynomials `H_n`; order 4 leaves 1e-9 of the correction, itself below
4% of the value). The result `high + (low - g d S)` is rounded once, the
correction's own rounding errors scaled down by its 4%: within 1 unit in
the last place for `|z| <= 10` (0 beyond, as float32's `erfc` is there).
No transcendental function is called, so no backend's `exp` or `log`
enters the result.
"""

import math

import numpy as np
from keras import ops

# erfc(a) is tabulated at a = k / 256 for 0 <= k <= 2560; erfc(10) =
# 2.1e-45 rounds to the smallest subnormal float32, 0 beyond.
_STEPS_PER_UNIT = 256.0
_TOP = 10.0
# The tables hold erfc and its slope times 2^64, and the result is scaled
# back last (exactly): below 1e-19 the low parts and the correction would
# otherwise be subnormal, which XLA flushes to 0 (2% of the value lost at
# erfc = 1e-37).
_SCALE_EXPONENT = 64


def _tables():
    a = np.arange(int(_TOP * _STEPS_PER_UNIT) + 1) / _STEPS_PER_UNIT
    scale = math.ldexp(1.0, _SCALE_EXPONENT)
    erfc = np.array([math.erfc(v) for v in a]) * scale
    high = erfc.astype("float32")
    low = (erfc - high.astype("float64")).astype("float32")
    slope = (2.0 / math.sqrt(math.pi) * scale * np.exp(-a * a)).astype("float32")
    return high, low, slope


_ERFC_HIGH, _ERFC_LOW, _SLOPE = _tables()


def erfc32(z, z_low=None):
    """`erfc(z + z_low)` for float32 tensors, within 1 unit in the last place.

    Args:
        z: float32 tensor.
        z_low: optional float32 tensor, a correction far below the last
            place of `z` (the rounding error of a computed `z`).

    Returns:
        A float32 tensor of the shape of `z`. `erfc(-a) = 2 - erfc(a)`;
        `|z| > 10` gives 0 (or 2), `+-inf` 0 and 2, NaN NaN. Table indices
        are computed from a clamped, NaN-free `|z|`. Not differentiable as
        written (a table look-up): callers take the gradient from
        `keras.ops.erfc`.
    """
    negative = ops.less(z, 0.0)
    a = ops.abs(z)
    nan = ops.isnan(a)
    a_clamped = ops.where(nan, ops.zeros_like(a), ops.minimum(a, _TOP))
    steps = ops.round(a_clamped * _STEPS_PER_UNIT)
    index = ops.cast(steps, "int32")
    # Both exact: a_h has at most 12 significant bits, d is a difference
    # of floats within a factor of 2 of each other (or d = a).
    a_h = steps / _STEPS_PER_UNIT
    d = a_clamped - a_h
    if z_low is not None:
        d = d + ops.where(negative, -z_low, z_low)
    high = ops.take(ops.convert_to_tensor(_ERFC_HIGH), index)
    low = ops.take(ops.convert_to_tensor(_ERFC_LOW), index)
    slope = ops.take(ops.convert_to_tensor(_SLOPE), index)
    # S(d) = 1 - a d + (2a^2 - 1)/3 d^2 + a(3 - 2a^2)/6 d^3
    #        + (4a^4 - 12a^2 + 3)/30 d^4, at a = a_h.
    a2 = a_h * a_h
    series = (4.0 * a2 - 12.0) * a2 + 3.0
    series = a_h * (3.0 - 2.0 * a2) / 6.0 + d * series / 30.0
    series = (2.0 * a2 - 1.0) / 3.0 + d * series
    series = 1.0 + d * (-a_h + d * series)
    out = (high + (low - slope * d * series)) * math.ldexp(1.0, -_SCALE_EXPONENT)
    out = ops.where(ops.greater(a, _TOP), ops.zeros_like(out), out)
    out = ops.where(negative, 2.0 - out, out)
    return ops.where(nan, z, out)


# R(y) = (log1p(y) - y) / y^2 on [-1/2, 0]: a least-squares fit to the
# float64 function, reweighted toward minimax (Lawson), rounded to float32;
# within 1e-9 relative.
_LOG1P_REST = (
    -0.5,
    0.3333331048488617,
    -0.2500183582305908,
    0.19944414496421814,
    -0.17522470653057098,
    0.06688211113214493,
    -0.5386393070220947,
    -1.2996877431869507,
    -3.0654749870300293,
    -3.479849338531494,
    -2.0532169342041016,
)


def log1p32(y):
    """`log1p(y)` for a float32 tensor with `-1/2 <= y <= 0`, within 1 unit
    in the last place: `y + y^2 R(y)`, the second term at most 28% of the
    value. TF's eager `log1p` (Eigen's `y log(1 + y) / ((1 + y) - 1)`) is 3
    units off there. Not differentiable as written (callers take the
    gradient from `keras.ops.log1p`)."""
    rest = ops.full_like(y, _LOG1P_REST[-1])
    for c in reversed(_LOG1P_REST[:-1]):
        rest = rest * y + c
    return y + (y * y) * rest
