"""Shared validation and dtype helpers for `keras_stable.ops` (private)."""

import keras
from keras import ops

_HALF = ("float16", "bfloat16")


def is_float(dtype):
    return dtype in _HALF or dtype.startswith("float")


def dtype_of(x):
    return keras.backend.standardize_dtype(x.dtype)


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
    if dtype in _HALF:
        return ops.cast(x, "float32"), dtype
    if not dtype.startswith("float"):
        return ops.cast(x, "float32"), "float32"
    return x, dtype


def compute_dtype_of(*dtypes):
    """The dtype two float inputs are computed in (float32 at least)."""
    result = keras.backend.result_type(*dtypes)
    if result in _HALF or not is_float(result):
        return "float32"
    return result


def result_float_dtype(*dtypes):
    """The dtype a result of several inputs is returned in.

    The promoted float dtype (so float16 + float16 stays float16), or float32
    when the inputs are integers or booleans.
    """
    result = keras.backend.result_type(*dtypes)
    return result if is_float(result) else "float32"


def static_shape(x):
    return tuple(x.shape)


def canonical_axis(axis, rank, name="axis"):
    """Returns `axis` as a non-negative int, or raises a `ValueError`."""
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise ValueError(
            f"`{name}` must be an int, got {axis!r} of type "
            f"{type(axis).__name__}."
        )
    if not -rank <= axis < rank:
        raise ValueError(
            f"Invalid `{name}`={axis} for an input of rank {rank}: expected "
            f"an integer in [{-rank}, {rank - 1}]."
        )
    return axis % rank


def canonical_axes(axis, rank, name="axis"):
    """`None`, an int, or a tuple/list of ints → sorted tuple of axes."""
    if axis is None:
        return tuple(range(rank))
    if isinstance(axis, (tuple, list)):
        axes = tuple(canonical_axis(a, rank, name) for a in axis)
        if len(set(axes)) != len(axes):
            raise ValueError(f"`{name}`={axis!r} repeats an axis.")
        return tuple(sorted(axes))
    return (canonical_axis(axis, rank, name),)


def broadcast_shape(shape_a, shape_b, name_a, name_b):
    """Static broadcast of two shapes (unknown dims allowed), else ValueError."""
    a, b = list(shape_a), list(shape_b)
    n = max(len(a), len(b))
    a = [1] * (n - len(a)) + a
    b = [1] * (n - len(b)) + b
    out = []
    for da, db in zip(a, b):
        if da == 1:
            out.append(db)
        elif db == 1 or db is None:
            out.append(da)
        elif da is None:
            out.append(db)
        elif da == db:
            out.append(da)
        else:
            raise ValueError(
                f"`{name_a}` of shape {tuple(shape_a)} and `{name_b}` of shape "
                f"{tuple(shape_b)} do not broadcast together."
            )
    return tuple(out)


def prepare_mask(mask, x, name="mask"):
    """Validates that `mask` broadcasts to `x` (without changing x's shape).

    Returns a boolean tensor broadcast to `x`'s shape, or `None`. A float
    mask is read as "entry counts where mask > 0".
    """
    if mask is None:
        return None
    mask = ops.convert_to_tensor(mask)
    x_shape = static_shape(x)
    m_shape = static_shape(mask)
    if len(m_shape) > len(x_shape):
        raise ValueError(
            f"`{name}` of shape {m_shape} has a higher rank than the input of "
            f"shape {x_shape}; it must broadcast to the input's shape."
        )
    error = ValueError(
        f"`{name}` of shape {m_shape} does not broadcast to the input's "
        f"shape {x_shape}."
    )
    try:
        full = broadcast_shape(x_shape, m_shape, "x", name)
    except ValueError:
        raise error from None
    if tuple(full) != tuple(x_shape) and None not in x_shape:
        raise error
    if dtype_of(mask) != "bool":
        mask = ops.greater(mask, 0)
    return ops.broadcast_to(mask, ops.shape(x))


def valid_entries(x, mask):
    """Entries that take part in a softmax-type reduction: unmasked, not -inf."""
    valid = ops.not_equal(x, float("-inf"))
    if mask is not None:
        valid = ops.logical_and(valid, mask)
    return valid
