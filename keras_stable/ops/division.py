"""Division that is 0, with a zero gradient, where the denominator is 0."""

from keras import ops

from keras_stable.common.checks import broadcast_shape
from keras_stable.common.dtypes import compute_dtype_of
from keras_stable.common.dtypes import dtype_of
from keras_stable.common.dtypes import result_float_dtype
from keras_stable.common.dtypes import static_shape


def safe_divide(x, y):
    """`x / y` where `y != 0`, and 0 where `y == 0`.

    Args:
        x: numerator tensor.
        y: denominator tensor, broadcastable with `x`.

    Returns:
        The broadcast quotient, in the promoted float dtype of `x` and `y`.

    Numerical stability:
        The double-where pattern `where(y != 0, x / where(y != 0, y, 1), 0)`
        keeps `x / 0` (inf or NaN) out of both the value and the gradient:
        where `y == 0` the result is 0 and the gradients with respect to `x`
        and `y` are exactly 0. Elsewhere value and gradients are the exact
        quotient's. float16/bfloat16 are computed in float32. NaN in `x` or a
        nonzero `y` propagates; `y = NaN` gives NaN.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> np.asarray(ops.safe_divide(np.array([1.0, 1.0], "float32"), np.array([4.0, 0.0], "float32")))
        array([0.25, 0.  ], dtype=float32)
    """
    x = ops.convert_to_tensor(x)
    y = ops.convert_to_tensor(y)
    broadcast_shape(static_shape(x), static_shape(y), "x", "y")
    out_dtype = result_float_dtype(dtype_of(x), dtype_of(y))
    compute = compute_dtype_of(dtype_of(x), dtype_of(y))
    x = ops.cast(x, compute)
    y = ops.cast(y, compute)
    nonzero = ops.not_equal(y, 0)
    quotient = x / ops.where(nonzero, y, ops.ones_like(y))
    out = ops.where(nonzero, quotient, ops.zeros_like(quotient))
    return ops.cast(out, out_dtype)
