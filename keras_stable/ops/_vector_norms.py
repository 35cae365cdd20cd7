"""The vector orders of `safe_norm` other than the Euclidean one (private to
`keras_stable.ops`): 1, inf, -inf, 0 and any real p, each with a zero-safe
gradient, and the check of `ord`."""

import math
import numbers

from keras import ops

from keras_stable.common.dtypes import dtype_of
from keras_stable.common.dtypes import highest_like
from keras_stable.common.dtypes import inf_where
from keras_stable.common.dtypes import is_pos_inf
from keras_stable.common.dtypes import nan_where

_INF = float("inf")

_SUPPORTED_ORDS = (
    "None (Euclidean, over any axes); 'fro' (Euclidean, over exactly 2 "
    "axes); over 1 axis (a vector norm): 2, 1, inf, -inf, 0 or any other "
    "real p != 0"
)


def _norm_kind(ord, num_axes, name="ord"):
    """Which norm `ord` asks for over `num_axes` axes, or a `ValueError`.

    Returns `"euclidean"`, `"count"` (ord 0), `"one"`, `"max"` (inf),
    `"min"` (-inf), or the float `p` of a general vector norm. As in
    `keras.ops.norm`, one axis (or a 0-d input) is a vector norm and two
    axes a matrix norm; only the Frobenius matrix norm is supported.
    """
    if ord is None:
        return "euclidean"
    if isinstance(ord, str):
        if ord == "fro" and num_axes == 2:
            return "euclidean"
        if ord in ("fro", "nuc") and num_axes != 2:
            raise ValueError(
                f"`{name}`={ord!r} is a matrix norm: it needs exactly 2 "
                f"axes, got {num_axes}. Supported values of `{name}`: "
                f"{_SUPPORTED_ORDS}."
            )
        if ord != "nuc":
            raise ValueError(
                f"Invalid `{name}`={ord!r}. Supported values of `{name}`: {_SUPPORTED_ORDS}."
            )
    elif isinstance(ord, bool) or not isinstance(ord, numbers.Real) or math.isnan(float(ord)):
        raise ValueError(
            f"Invalid `{name}`={ord!r} of type {type(ord).__name__}. "
            f"Supported values of `{name}`: {_SUPPORTED_ORDS}."
        )
    if num_axes == 2:
        raise ValueError(
            f"`{name}`={ord!r} over 2 axes is a matrix norm, which is not "
            f"supported (only the Frobenius norm is: `{name}`=None or "
            f"'fro'). Supported values of `{name}`: {_SUPPORTED_ORDS}."
        )
    if num_axes > 2:
        raise ValueError(
            f"`{name}`={ord!r} needs 1 axis (a vector norm), got {num_axes} "
            f"axes; only `{name}`=None reduces over any number of axes. "
            f"Supported values of `{name}`: {_SUPPORTED_ORDS}."
        )
    p = float(ord)
    return {2.0: "euclidean", 1.0: "one", 0.0: "count", _INF: "max"}.get(
        p, "min" if p == -_INF else p
    )


def _abs(x):
    """`|x|` with a gradient of exactly 0 at `x == 0` (JAX's `abs` has 1)."""
    nonzero = ops.not_equal(x, 0)  # NaN is nonzero: it stays NaN
    return ops.where(nonzero, ops.abs(x), ops.zeros_like(x))


def _pow(t, p):
    """`t**p` for a Python float `p`, exact in float64 too.

    A Python float exponent would be converted to float32 by some backends
    (torch), rounding 1/3 before a float64 power.
    """
    return ops.power(t, ops.convert_to_tensor(p, dtype=dtype_of(t)))


def _select_pow(ok, t, p):
    """`t**p` where `ok`, 0 elsewhere; `t` reaches `pow` only where `ok`."""
    safe = ops.where(ok, t, ops.ones_like(t))
    return ops.where(ok, _pow(safe, p), ops.zeros_like(t))


def _p_norm(abs_x, axes, p):
    """`sum(|x|**p)**(1/p)` over `axes` (keepdims) for a real `p != 0`.

    The entries are scaled before the power, by the largest magnitude for
    `p > 0` (so `t = |x|/m` is in [0, 1] and the sum in [1, n]) and by the
    smallest for `p < 0` (`t >= 1`, the sum again in [1, n]): neither the
    powers nor the root can overflow or underflow to 0 when the norm itself
    is representable, and `||x|| = m * ||x / m||` lets the scale be held
    constant (no gradient). Every `pow` sees only positive finite
    arguments (double-where), so nothing is `0**negative` or `0/0`.
    """
    if p > 0:
        # NaN is skipped by the max (the caller puts it back).
        m = ops.max(
            ops.where(ops.isnan(abs_x), ops.zeros_like(abs_x), abs_x),
            axis=axes,
            keepdims=True,
        )
    else:
        m = ops.min(
            ops.where(ops.isnan(abs_x), highest_like(abs_x), abs_x),
            axis=axes,
            keepdims=True,
        )
    m = ops.stop_gradient(m)
    usable = ops.logical_and(ops.greater(m, 0), ops.isfinite(m))
    scale = ops.where(usable, m, ops.ones_like(m))
    t = abs_x / scale
    if p > 0:
        # Zeros contribute 0 (and get a zero gradient, also for p < 1,
        # where the derivative at 0 is infinite); an unusable vector (all
        # zero, or with an infinite entry) takes no part at all.
        ok = ops.logical_and(usable, ops.greater(t, 0))
    else:
        # |inf|**p = 0 for p < 0; a zero entry makes the vector unusable.
        ok = ops.logical_and(usable, ops.isfinite(t))
    total = ops.sum(_select_pow(ok, t, p), axis=axes, keepdims=True)
    root = _pow(ops.where(usable, total, ops.ones_like(total)), 1.0 / p)
    # Unusable: m == 0 is the zero vector (p > 0) or a vector with a zero
    # entry (p < 0, |0|**p = inf): the norm is 0. m == inf is an infinite
    # entry (p > 0) or all entries infinite (p < 0): the norm is inf.
    fallback = inf_where(is_pos_inf(m), m)
    return ops.where(usable, scale * root, fallback)


def _vector_norm(x, axes, kind, keepdims):
    """The non-Euclidean vector norms of a float tensor over `axes`."""
    if kind == "count":
        # Counts entries != 0 (NaN included, as NumPy); no gradient.
        norm = ops.sum(ops.cast(ops.not_equal(x, 0), x.dtype), axis=axes, keepdims=True)
    else:
        abs_x = _abs(x)
        if kind == "one":
            # NaN flows through the sum; nothing here can overflow unless
            # the norm does.
            norm = ops.sum(abs_x, axis=axes, keepdims=True)
        else:
            if kind == "max":
                norm = ops.max(abs_x, axis=axes, keepdims=True)
            elif kind == "min":
                norm = ops.min(abs_x, axis=axes, keepdims=True)
            else:
                norm = _p_norm(abs_x, axes, kind)
            # NaN gives NaN (backends' max/min differ on NaN; _p_norm
            # skips it).
            has_nan = ops.any(ops.isnan(x), axis=axes, keepdims=True)
            norm = ops.where(has_nan, nan_where(has_nan, norm), norm)
    if not keepdims:
        norm = ops.squeeze(norm, axis=axes)
    return norm
