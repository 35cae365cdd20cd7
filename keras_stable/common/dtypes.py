"""Dtype helpers: which dtype a computation runs in, which it returns.

The rule of the library: float16/bfloat16 (and integer) inputs are computed
in float32 and returned in the input's float dtype; losses and metrics
return float32.
"""

import functools

import keras
import numpy as np
from keras import ops

HALF = ("float16", "bfloat16")


def is_float(dtype):
    return dtype in HALF or dtype.startswith("float")


def dtype_of(x):
    """The standardized dtype name of a tensor (`"float32"`, `"int64"`...)."""
    return keras.backend.standardize_dtype(x.dtype)


def static_shape(x):
    """The static shape of a tensor as a tuple (`None` for unknown dims)."""
    return tuple(x.shape)


def axis_length(x, axis):
    """The length of `axis` of `x`: an int where it is known, else the
    backend's dynamic size, else (a KerasTensor with an unknown batch) an
    int32 scalar tensor counting the entries, so symbolic calls go on."""
    size = ops.shape(x)[axis]
    if size is not None:
        return size
    return ops.max(ops.sum(ops.ones_like(x, "int32"), axis=axis))


def to_compute(x):
    """Converts `x` to a tensor and returns `(x_compute, out_dtype)`.

    Half precision (float16, bfloat16) and integer inputs are computed in
    float32: the sum of squares of float16 `[300] * 4` is 360000, above
    float16's maximum of 65504, and `exp` overflows float16 past 11. The
    result is cast back to `out_dtype` (the input dtype for floats, float32
    for integers and booleans).
    """
    x = ops.convert_to_tensor(x)
    dtype = dtype_of(x)
    if dtype in HALF:
        return ops.cast(x, "float32"), dtype
    if not dtype.startswith("float"):
        return ops.cast(x, "float32"), "float32"
    return x, dtype


def to_float32(x):
    """Half precision (and integers) -> float32, exactly; float32/64 as is.

    The ops return half-precision results for half-precision inputs; a loss
    returns float32, so it hands the ops float32 inputs (the cast is exact)
    rather than rounding each per-example loss to float16.
    """
    x = ops.convert_to_tensor(x)
    if dtype_of(x) in ("float32", "float64"):
        return x
    return ops.cast(x, "float32")


def compute_dtype_of(*dtypes):
    """The dtype several float inputs are computed in (float32 at least).

    float64 wherever an input is float64: Keras's promotion rule follows
    JAX's default and gives float32 for float64 on the JAX and torch
    backends, which would round a float64 computation to float32 (a
    float64 array exists on JAX only under `jax.enable_x64`).
    """
    return _promoted(dtypes)[0]


def result_float_dtype(*dtypes):
    """The dtype a result of several inputs is returned in.

    The promoted float dtype (so float16 + float16 stays float16), or float32
    when the inputs are integers or booleans.
    """
    return _promoted(dtypes)[1]


def _promoted(dtypes):
    """`(compute dtype, result dtype)` of `dtypes`; dtype names (what
    `dtype_of` gives) are looked up once: Keras's promotion costs an eager
    op several microseconds per call."""
    if all(isinstance(d, str) for d in dtypes):
        return _promoted_names(dtypes)
    return _promote(dtypes)


@functools.lru_cache(maxsize=256)
def _promoted_names(dtypes):
    return _promote(dtypes)


def _promote(dtypes):
    if _has_float64(dtypes):
        return "float64", "float64"
    result = keras.backend.result_type(*dtypes)
    compute = "float32" if result in HALF or not is_float(result) else result
    return compute, result if is_float(result) else "float32"


def _has_float64(dtypes):
    return "float64" in (keras.backend.standardize_dtype(d) for d in dtypes)


def _keeps_float64(*args, backends=("jax", "torch")):
    """Whether an op of `args` must be kept in float64 by hand on this
    backend: Keras's torch and JAX backends follow JAX's default promotion
    (64-bit to 32-bit), so `maximum` and `minimum` of float64 give float32
    on torch, `mean` averages float64 in float32 on both, and `tanh` is
    float32 on JAX."""
    if keras.backend.backend() not in backends:
        return False
    return _has_float64(a.dtype for a in args if hasattr(a, "dtype"))


def maximum(x, y):
    """`keras.ops.maximum`, in float64 when an input is float64 (a tie
    sends the gradient to `x`, a NaN in either input propagates)."""
    if not _keeps_float64(x, y):
        return ops.maximum(x, y)
    x, y = ops.convert_to_tensor(x, "float64"), ops.convert_to_tensor(y, "float64")
    return ops.where(ops.logical_or(ops.greater_equal(x, y), ops.isnan(x)), x, y)


def minimum(x, y):
    """`keras.ops.minimum`, in float64 when an input is float64 (as
    `maximum`)."""
    if not _keeps_float64(x, y):
        return ops.minimum(x, y)
    x, y = ops.convert_to_tensor(x, "float64"), ops.convert_to_tensor(y, "float64")
    return ops.where(ops.logical_or(ops.less_equal(x, y), ops.isnan(x)), x, y)


def mean(x, axis=None, keepdims=False):
    """`keras.ops.mean`, in float64 for float64 `x`: Keras's torch and JAX
    backends average float64 in float32 and cast the result back."""
    if not _keeps_float64(x):
        return ops.mean(x, axis=axis, keepdims=keepdims)
    axes = range(len(x.shape)) if axis is None else axis
    axes = (axes,) if isinstance(axes, int) else tuple(axes)
    count = 1
    for a in axes:
        count *= x.shape[a]
    return ops.sum(x, axis=axis, keepdims=keepdims) / count


def tanh(x):
    """`keras.ops.tanh`, in float64 for float64 `x` (Keras's JAX backend
    computes it in float32): `-e / (e + 2)` with `e = expm1(-2|x|)`, and
    the sign of `x`, exact to round-off near 0 and 1 far out; selected
    with `where`, not multiplied by `sign(x)`, so the derivative at 0 is 1."""
    if not _keeps_float64(x, backends=("jax",)):
        return ops.tanh(x)
    nonnegative = ops.greater_equal(x, 0)
    e = ops.expm1(ops.where(nonnegative, -2.0 * x, 2.0 * x))
    t = -e / (e + 2.0)
    return ops.where(nonnegative, t, -t)


def is_neg_inf(x):
    """`x == -inf`, elementwise, without an infinite constant (TF's
    `enable_check_numerics` flags the constant itself; NaN gives False)."""
    return ops.logical_and(ops.isinf(x), ops.less(x, 0))


def is_pos_inf(x):
    """`x == +inf`, elementwise, without an infinite constant: `x` above
    the dtype's largest finite value (NaN gives False). A comparison, not
    `isinf`: under `jax.jit` on compile-time constants XLA's folding of
    `isinf` broke the norms' overflow rescue."""
    return ops.greater(x, highest_like(x))


def inf_where(cond, like, negative=False):
    """`+inf` (`-inf` with `negative`) where `cond` holds and 0 elsewhere,
    shaped and typed like `like`: the infinite value a contract gives
    (an impossible label, an empty row), built from the data as `-log(0)`
    so that it exists only where `cond` holds. A `full_like(x, inf)`
    constant is an infinite intermediate whatever it selects, which
    `jax_debug_infs` and TF's `enable_check_numerics` flag on valid
    inputs. Carries no gradient."""
    zeros = ops.zeros_like(like)
    out = ops.log(ops.where(cond, zeros, ops.ones_like(like)))
    # `0 - log(1)` is +0 (`-log(1)` would be -0).
    return out if negative else zeros - out


def nan_where(cond, like):
    """NaN where `cond` holds and 0 elsewhere (`log(-1)`), shaped and
    typed like `like`: the NaN of an invalid argument, without a NaN
    constant for the NaN tools to flag on valid inputs (see `inf_where`)."""
    ones = ops.ones_like(like)
    return ops.log(ops.where(cond, -ones, ones))


def lowest_like(x):
    """The lowest finite value of `x`'s dtype, broadcast to `x`: the
    finite sentinel of a masked maximum (an `-inf` one would be an
    infinite intermediate for `jax_debug_infs` and TF's check_numerics)."""
    return ops.full_like(x, float(np.finfo(_numpy_dtype(dtype_of(x))).min))


def highest_like(x):
    """The largest finite value of `x`'s dtype, broadcast to `x`: the
    finite sentinel of a masked minimum (see `lowest_like`)."""
    return ops.full_like(x, float(np.finfo(_numpy_dtype(dtype_of(x))).max))


def _numpy_dtype(name):
    if name == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(name)
