"""Dtype helpers: which dtype a computation runs in, which it returns.

The rule of the library: float16/bfloat16 (and integer) inputs are computed
in float32 and returned in the input's float dtype; losses and metrics
return float32.
"""

import keras
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
    """The dtype several float inputs are computed in (float32 at least)."""
    result = keras.backend.result_type(*dtypes)
    if result in HALF or not is_float(result):
        return "float32"
    return result


def result_float_dtype(*dtypes):
    """The dtype a result of several inputs is returned in.

    The promoted float dtype (so float16 + float16 stays float16), or float32
    when the inputs are integers or booleans.
    """
    result = keras.backend.result_type(*dtypes)
    return result if is_float(result) else "float32"
