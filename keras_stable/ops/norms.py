"""Square roots, Euclidean norms and normalisation with clean gradients."""

from keras import ops

from keras_stable.common.checks import broadcast_shape
from keras_stable.common.checks import check_axis
from keras_stable.common.dtypes import compute_dtype_of
from keras_stable.common.dtypes import dtype_of
from keras_stable.common.dtypes import result_float_dtype
from keras_stable.common.dtypes import static_shape
from keras_stable.common.dtypes import to_compute


def safe_sqrt(x):
    """Square root that is exact for `x > 0` and 0, with gradient 0, elsewhere.

    `safe_sqrt(x) = sqrt(max(x, 0))`.

    Args:
        x: tensor.

    Returns:
        A tensor of the shape and (float) dtype of `x`.

    Numerical stability:
        `d sqrt(x)/dx = 1 / (2 sqrt(x))` is `inf` at 0, and `0 * inf` gives
        NaN in the backward pass of anything built on it. The double-where
        pattern `where(x > 0, sqrt(where(x > 0, x, 1)), 0)` keeps the exact
        value for `x > 0` and a gradient of exactly 0 for `x <= 0` (slightly
        negative round-off such as `-1e-9` included). float16/bfloat16 are
        computed in float32 and returned in the input dtype. `+inf` gives
        `inf` (gradient 0); NaN gives NaN.

    Example:

    >>> import numpy as np
    >>> from keras_stable import ops
    >>> np.asarray(ops.safe_sqrt(np.array([4.0, 0.0, -1e-9], "float32")))
    array([2., 0., 0.], dtype=float32)
    """
    x, out_dtype = to_compute(x)
    positive = ops.greater(x, 0)
    root = ops.sqrt(ops.where(positive, x, ops.ones_like(x)))
    # NaN is neither > 0 nor <= 0: keep it visible instead of mapping it to 0.
    fallback = ops.where(ops.isnan(x), x, ops.zeros_like(x))
    return ops.cast(ops.where(positive, root, fallback), out_dtype)


def _norm(x, axes, keepdims):
    """Euclidean norm of a float tensor over `axes`, computed in x's dtype."""
    # Scale by the largest magnitude so the sum of squares cannot overflow
    # when the norm itself is representable (bfloat16 and float32 inputs
    # above ~1.8e19). ||x|| = m * ||x / m|| for any m > 0, so the scale
    # carries no gradient and is held constant. NaN is skipped by the max,
    # so the same reduction also tells whether an entry is infinite (one
    # pass over x fewer than a separate `any(isinf(x))`).
    abs_x = ops.where(ops.isnan(x), ops.zeros_like(x), ops.abs(x))
    largest = ops.stop_gradient(ops.max(abs_x, axis=axes, keepdims=True))
    usable = ops.logical_and(ops.greater(largest, 0), ops.isfinite(largest))
    scale = ops.where(usable, largest, ops.ones_like(largest))
    # Infinite entries leave the sum (the outer where below returns inf):
    # `square(inf)` would meet a zero cotangent there, 0 * inf = NaN.
    finite_x = ops.where(ops.isinf(x), ops.zeros_like(x), x)
    sum_sq = ops.sum(ops.square(finite_x / scale), axis=axes, keepdims=True)
    # sum_sq == 0 only for the zero vector (NaN compares unequal and flows on).
    nonzero = ops.not_equal(sum_sq, 0)
    root = ops.sqrt(ops.where(nonzero, sum_sq, ops.ones_like(sum_sq)))
    norm = ops.where(nonzero, scale * root, ops.zeros_like(sum_sq))
    # An infinite entry: the norm is inf (x / inf would give NaN above).
    norm = ops.where(
        ops.equal(largest, float("inf")),
        ops.full_like(norm, float("inf")),
        norm,
    )
    if not keepdims:
        norm = ops.squeeze(norm, axis=axes)
    return norm


def safe_norm(x, axis=None, keepdims=False):
    """Euclidean norm `sqrt(sum(x**2, axis))`, exact, with a finite gradient.

    Args:
        x: tensor.
        axis: `None` (all axes), an int, or a tuple of ints.
        keepdims: keep the reduced axes with size 1.

    Returns:
        The norm, in the (float) dtype of `x`.

    Numerical stability:
        The gradient is `x / ||x||`, which is 0/0 = NaN at the zero vector
        for `tf.norm`, `keras.ops.norm` and `jnp.linalg.norm`. Here the
        square root is taken through the double-where pattern, so the value
        at the zero vector is exactly 0 and its gradient exactly 0, with no
        epsilon biasing the value anywhere else (`sqrt(sum(x**2) + 1e-12)` is
        1e-6 at zero and NaN again in float16, where 1e-12 rounds to 0). The
        vector is scaled by its largest magnitude before squaring (the
        scale carries no gradient: the norm is homogeneous), and
        float16/bfloat16 are computed in float32, so float16
        `[300, 300, 300, 300]` gives 600, not `inf`. An infinite entry gives
        `inf`; NaN gives NaN.

    Example:

    >>> import numpy as np
    >>> from keras_stable import ops
    >>> float(ops.safe_norm(np.array([3.0, 4.0], "float32")))
    5.0
    >>> float(ops.safe_norm(np.zeros(4, "float32")))
    0.0
    >>> float(ops.safe_norm(np.full(4, 300.0, "float16")))
    600.0
    """
    x, out_dtype = to_compute(x)
    axes = check_axis(axis, len(static_shape(x)), multiple=True)
    if not axes:  # rank-0 input
        return ops.cast(ops.abs(x), out_dtype)
    return ops.cast(_norm(x, axes, keepdims), out_dtype)


def l2_normalize(x, axis=-1):
    """`x / ||x||` along `axis`; the zero vector maps to the zero vector.

    Args:
        x: tensor.
        axis: int, the axis to normalise along.

    Returns:
        A tensor of the shape and (float) dtype of `x`.

    Numerical stability:
        The norm is `safe_norm` (scaled, computed in float32 for
        float16/bfloat16), so float16 `[300] * 4` gives `0.5` each rather
        than zeros, and no epsilon is added: `x / max(||x||, eps)` has a
        gradient of `1/eps` (1e12) at zero. The division goes through the
        double-where pattern: a zero vector gives zeros with a gradient of
        exactly 0 (the derivative does not exist there). An infinite entry
        gives NaN at that entry, 0 elsewhere, and a zero gradient; NaN gives
        NaN.

    Example:

    >>> import numpy as np
    >>> from keras_stable import ops
    >>> np.asarray(ops.l2_normalize(np.array([[3.0, 4.0], [0.0, 0.0]], "float32")))
    array([[0.6, 0.8],
           [0. , 0. ]], dtype=float32)
    """
    x, out_dtype = to_compute(x)
    axis = check_axis(axis, len(static_shape(x)))
    norm = _norm(x, (axis,), keepdims=True)
    nonzero = ops.not_equal(norm, 0)
    safe = ops.where(nonzero, norm, ops.ones_like(norm))
    out = ops.where(nonzero, x / safe, ops.zeros_like(x))
    return ops.cast(out, out_dtype)


def cosine_similarity(x1, x2, axis=-1):
    """Cosine of the angle between `x1` and `x2` along `axis`, in [-1, 1].

    `sum(x1 * x2, axis) / (||x1|| * ||x2||)`, and 0 when either is zero.

    Args:
        x1: tensor.
        x2: tensor broadcastable with `x1`.
        axis: int, the axis holding the vectors.

    Returns:
        The similarity, `axis` reduced, in the result dtype of the inputs.

    Numerical stability:
        Computed as the dot product of the two `l2_normalize`d vectors, so a
        zero vector gives 0 with a finite (zero) gradient instead of the
        `1/eps`-sized or NaN gradients of the built-ins. Each vector is
        normalised on its own, so products of large norms cannot overflow;
        the result is clipped to [-1, 1] against round-off. float16/bfloat16
        are computed in float32.

    Example:

    >>> import numpy as np
    >>> from keras_stable import ops
    >>> a = np.array([[1.0, 0.0], [1.0, 1.0]], "float32")
    >>> b = np.array([[0.0, 0.0], [2.0, 2.0]], "float32")
    >>> np.round(np.asarray(ops.cosine_similarity(a, b)), 6)
    array([0., 1.], dtype=float32)
    """
    x1 = ops.convert_to_tensor(x1)
    x2 = ops.convert_to_tensor(x2)
    shape = broadcast_shape(static_shape(x1), static_shape(x2), "x1", "x2")
    axis = check_axis(axis, len(shape))
    out_dtype = result_float_dtype(dtype_of(x1), dtype_of(x2))
    compute = compute_dtype_of(dtype_of(x1), dtype_of(x2))
    x1 = ops.cast(x1, compute)
    x2 = ops.cast(x2, compute)
    if static_shape(x1) != shape or static_shape(x2) != shape:
        x1, x2 = x1 + ops.zeros_like(x2), x2 + ops.zeros_like(x1)
    u1 = l2_normalize(x1, axis=axis)
    u2 = l2_normalize(x2, axis=axis)
    cos = ops.clip(ops.sum(u1 * u2, axis=axis), -1.0, 1.0)
    return ops.cast(cos, out_dtype)
