"""Square roots, vector norms and normalisation with clean gradients."""

import numbers

from keras import ops

from keras_stable.common.checks import broadcast_shape
from keras_stable.common.checks import check_axis
from keras_stable.common.dtypes import compute_dtype_of
from keras_stable.common.dtypes import dtype_of
from keras_stable.common.dtypes import inf_where
from keras_stable.common.dtypes import is_pos_inf
from keras_stable.common.dtypes import result_float_dtype
from keras_stable.common.dtypes import static_shape
from keras_stable.common.dtypes import to_compute
from keras_stable.ops import _kernels
from keras_stable.ops._vector_norms import _norm_kind
from keras_stable.ops._vector_norms import _vector_norm

# Squares of magnitudes in [2**-50, 2**50] are normal float32 numbers whose
# sums cannot overflow; inputs in that range are not scaled at all (so their
# results carry no scaling round-off), others are scaled into it.
_LARGE = 2.0**50
_SMALL = 2.0**-50


def moderate_scale(largest):
    """A scale (no gradient) bringing magnitudes up to `largest` into range.

    1 where `largest` is already moderate (or 0, or not finite), else
    `largest` itself.
    """
    out_of_range = ops.logical_or(
        ops.greater(largest, _LARGE),
        ops.logical_and(ops.less(largest, _SMALL), ops.greater(largest, 0)),
    )
    usable = ops.logical_and(out_of_range, ops.isfinite(largest))
    return ops.stop_gradient(ops.where(usable, largest, ops.ones_like(largest)))


def scaled_by(x, scale):
    """`x / scale` for a positive finite `scale`, as `(x * r) * r`.

    `r = 1 / sqrt(scale)` is a normal number for every finite positive
    float32 scale, whereas `1 / scale` is subnormal above ~8.5e37, and XLA
    on CPU (which divides by multiplying with the reciprocal) flushes
    subnormals to 0: `3e38 / 3e38` gives 0 there.
    """
    r = 1.0 / ops.sqrt(scale)
    return (x * r) * r


def rescaled(x, axis=-1):
    """`x` over a per-vector constant that brings its magnitudes into range.

    For scale-invariant functions of a vector (normalisation, cosine): a
    vector whose largest magnitude lies outside `[2**-50, 2**50]` is divided
    by that magnitude (a constant without gradient); every other vector is
    returned as it is, bit for bit. The derivative of `x / ||x||` involves
    `1 / ||x||**2`, which underflows to `1/0` for `||x|| < 1e-19` and gives
    NaN gradients on JAX (`[0, 1e-30]` included) although the true
    gradient, `1e30`, is a float32 number.
    """
    abs_x = ops.where(ops.isfinite(x), ops.abs(x), ops.zeros_like(x))
    scale = moderate_scale(ops.max(abs_x, axis=axis, keepdims=True))
    return scaled_by(x, scale)


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

    Examples:
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


def _norm(x, axes, keepdims, rescue=True):
    """Euclidean norm of a float tensor over the non-empty `axes`.

    The fused kernel (`_kernels.norm_kernel`) unless disabled;
    `rescue=False` (float16 inputs, whose squares cannot leave the float32
    range) skips its overflow/underflow rescue.
    """
    if not _kernels.kernels_enabled():
        return _reference_norm(x, axes, keepdims)
    norm = _kernels.norm_kernel(x, axes, rescue)
    return norm if keepdims else ops.squeeze(norm, axis=axes)


def _reference_norm(x, axes, keepdims):
    """The portable Euclidean norm, computed in x's dtype, plain autodiff:
    the fallback and the reference of `_kernels.norm_kernel`."""
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
    # An infinite entry: the norm is inf (x / inf would give NaN above),
    # unless NaN is there too (the sum is NaN): NaN wins, as in the kernel
    # and the other orders.
    infinite = ops.logical_and(is_pos_inf(largest), ops.logical_not(ops.isnan(sum_sq)))
    norm = ops.where(infinite, inf_where(infinite, norm), norm)
    if not keepdims:
        norm = ops.squeeze(norm, axis=axes)
    return norm


def _any_norm(x, axes, kind, keepdims, rescue=True):
    """`kind`'s norm of a float tensor over the (canonical) `axes`."""
    if not axes:
        # A 0-d input, or axis=(): each entry is a vector of its own. A
        # size-1 axis stands for it (an empty tuple would mean "every axis"
        # to torch's reductions).
        x = ops.expand_dims(x, -1)
        axes = (len(static_shape(x)) - 1,)
        keepdims = False
    if kind == "euclidean":
        return _norm(x, axes, keepdims, rescue)
    return _vector_norm(x, axes, kind, keepdims)


def safe_norm(x, axis=None, keepdims=False, ord=None):
    """The norm of `x` over `axis`, exact, with a finite gradient everywhere.

    The signature of `keras.ops.norm` (the keyword order differs:
    `safe_norm(x, axis, keepdims, ord)`), with its vector orders and the
    Frobenius matrix norm.

    Args:
        x: tensor.
        axis: `None` (all axes), an int, or a tuple/list of ints.
        keepdims: keep the reduced axes with size 1.
        ord: the order of the norm, as in `keras.ops.norm`:

            - `None`: Euclidean `sqrt(sum(x**2))`, over any axes (for two
              axes this is the Frobenius norm, as in `keras.ops.norm`).
            - `"fro"`: Frobenius, i.e. Euclidean, over exactly 2 axes.
            - Over 1 axis (an int `axis`, or `axis=None` on a 1-D input),
              a vector norm: `2` (Euclidean), `1` (`sum(|x|)`), `inf`
              (`max(|x|)`), `-inf` (`min(|x|)`), `0` (the number of nonzero
              entries), or any other real `p`: `sum(|x|**p)**(1/p)`
              (negative `p` included; a vector with a zero entry then has
              norm 0, as in NumPy).

            `inf` is the float `float("inf")`/`np.inf`, not a string. The
            other matrix norms of `keras.ops.norm` (`"nuc"`, and 1, -1, 2,
            -2, inf, -inf over 2 axes, including `axis=None` on a 2-D
            input) are not supported, nor is an `ord` other than `None`
            over 3 or more axes (`keras.ops.norm` rejects that too): they
            raise a `ValueError` naming `ord`.

    Returns:
        The norm, in the (float) dtype of `x`.

    Numerical stability:
        The gradient is `x / ||x||`, which is 0/0 = NaN at the zero vector
        for `tf.norm`, `keras.ops.norm` and `jnp.linalg.norm`. Here the
        square root is taken through the double-where pattern, so the value
        at the zero vector is exactly 0 and its gradient exactly 0, with no
        epsilon biasing the value anywhere else (`sqrt(sum(x**2) + 1e-12)` is
        1e-6 at zero and NaN again in float16, where 1e-12 rounds to 0).
        float16/bfloat16 are computed in float32, so float16
        `[300, 300, 300, 300]` gives 600, not `inf`; where the sum of
        squares leaves the float32 range (entries above ~1e19 or below
        ~1e-19, as in bfloat16), the vector is summed again scaled by an
        exact power of two (`||x|| = ||c x|| / c`), so the norm is exact
        whenever it is representable. An infinite entry gives `inf` (with
        a zero gradient); NaN gives NaN, also next to an infinite entry.
        The Euclidean norm runs as one fused kernel (forward pass and the
        closed-form gradient `g * x / ||x||`, also differentiable again):
        see "Fused kernels" in `docs/design.md`.

        The other orders follow the same rules: exact values, a finite
        gradient everywhere and exactly 0 where the derivative does not
        exist (the zero vector; a zero entry for `ord=1`, `inf`, `-inf`
        and `p < 1`, where `|x|**p` has an infinite slope at 0; any
        vector with a zero entry for `p < 0`). A general `p` is computed as
        `m * sum((|x|/m)**p)**(1/p)` with `m` the largest (`p > 0`) or
        smallest (`p < 0`) magnitude, so neither the powers nor the root
        overflow, and no `pow` ever sees 0 or `inf`. `ord=0` counts the
        nonzero entries (NaN counts, as in NumPy) and has a zero gradient.
        For the other orders an infinite entry gives `inf` (for `p < 0`
        it drops out, as `|inf|**p = 0`) and NaN gives NaN. For
        `0 < p < 1` the derivative `(||x|| / |x_i|)**(1 - p)` grows without
        bound as an entry nears 0: an entry some 30 orders of magnitude
        below the largest (float32) can get a gradient that overflows.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> float(ops.safe_norm(np.array([3.0, 4.0], "float32")))
        5.0
        >>> float(ops.safe_norm(np.zeros(4, "float32")))
        0.0
        >>> float(ops.safe_norm(np.full(4, 300.0, "float16")))
        600.0
        >>> x = np.array([3.0, -4.0, 0.0], "float32")
        >>> tuple(float(ops.safe_norm(x, ord=o)) for o in (1, np.inf, -np.inf, 0))
        (7.0, 4.0, 0.0, 2.0)
        >>> round(float(ops.safe_norm(x, ord=3)), 5)
        4.49794
        >>> float(ops.safe_norm(np.ones((2, 2), "float32"), axis=(0, 1), ord="fro"))
        2.0
    """
    x, out_dtype = to_compute(x)
    axes = check_axis(axis, len(static_shape(x)), multiple=True)
    kind = _norm_kind(ord, len(axes))
    if not axes and kind == "euclidean":  # rank-0 input (or axis=())
        return ops.cast(ops.abs(x), out_dtype)
    rescue = out_dtype != "float16"
    return ops.cast(_any_norm(x, axes, kind, keepdims, rescue), out_dtype)


def _check_order(order):
    """`order` of `l2_normalize`: an int >= 1, as `keras.ops.normalize`."""
    if isinstance(order, bool) or not isinstance(order, numbers.Integral) or order < 1:
        raise ValueError(
            f"`order` must be an int >= 1 (as in `keras.ops.normalize`), "
            f"got {order!r} of type {type(order).__name__}."
        )
    return int(order)


def _check_epsilon(epsilon):
    if epsilon is None:
        return None
    if (
        isinstance(epsilon, bool)
        or not isinstance(epsilon, numbers.Real)
        or not float(epsilon) >= 0
    ):
        raise ValueError(f"`epsilon` must be None or a float >= 0, got {epsilon!r}.")
    return float(epsilon)


def l2_normalize(x, axis=-1, order=2, epsilon=None):
    """`x / ||x||` along `axis`; the zero vector maps to the zero vector.

    The signature of `keras.ops.normalize`.

    Args:
        x: tensor.
        axis: int (default -1), a tuple/list of ints, or `None` (all axes):
            the axes holding each vector.
        order: int >= 1, the order of the norm (as `keras.ops.normalize`):
            2 (the default) is Euclidean over any axes; any other order
            divides by `safe_norm(x, axis, ord=order)`, a vector norm, so
            it needs a single axis.
        epsilon: `None` (the default) or a float >= 0. `None` divides by
            the norm itself, with no epsilon: every nonzero vector gets
            norm 1. A number gives `keras.ops.normalize`'s value
            `x / max(||x||, epsilon)` exactly (so vectors with a norm below
            `epsilon` are shrunk, not scaled up to norm 1), with the zero
            vector still mapping to zeros with a finite gradient (`1 /
            epsilon`, the true derivative of `x / epsilon` there; 0 when
            `epsilon=0`). Note `keras.ops.normalize` defaults to
            `epsilon=keras.config.epsilon()` (1e-7); pass that to get its
            value for tiny vectors too.

    Returns:
        A tensor of the shape and (float) dtype of `x`.

    Numerical stability:
        The norm is `safe_norm` (rescaled where its sum of squares leaves
        the range, computed in float32 for float16/bfloat16), so float16
        `[300] * 4` gives `0.5` each rather than zeros, and no epsilon is
        added: `x / max(||x||, eps)` has a gradient of `1/eps` (1e12) at
        zero. The division goes through the double-where pattern: a zero
        vector gives zeros with a gradient of exactly 0 (the derivative
        does not exist there). An infinite entry gives NaN at that entry, 0
        elsewhere, and a zero gradient (with `order=2`); NaN gives NaN.
        With `order=2` and no `epsilon` it runs as one fused kernel (the
        gradient `(g - u * sum(g * u)) / ||x||`), which also normalises a
        vector whose norm overflows float32 (3e38 * [1, 1]) exactly.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> np.asarray(ops.l2_normalize(np.array([[3.0, 4.0], [0.0, 0.0]], "float32")))
        array([[0.6, 0.8],
               [0. , 0. ]], dtype=float32)
        >>> np.asarray(ops.l2_normalize(np.array([[3.0, -1.0], [0.0, 0.0]], "float32"), order=1))
        array([[ 0.75, -0.25],
               [ 0.  ,  0.  ]], dtype=float32)
        >>> np.asarray(ops.l2_normalize(np.array([3e-6, 4e-6], "float32"), epsilon=1e-5))
        array([0.3, 0.4], dtype=float32)
    """
    x, out_dtype = to_compute(x)
    axes = check_axis(axis, len(static_shape(x)), multiple=True)
    order = _check_order(order)
    epsilon = _check_epsilon(epsilon)
    rescue = out_dtype != "float16"
    if order == 2 and epsilon is None and axes and _kernels.kernels_enabled():
        out = _kernels.l2_normalize_kernel(x, axes, rescue)
    else:
        out = _reference_l2_normalize(x, axes, order, epsilon, rescue)
    return ops.cast(out, out_dtype)


def _reference_l2_normalize(x, axes, order, epsilon, rescue=True):
    """The portable `l2_normalize` of a float tensor, plain autodiff: the
    fallback (another order, an epsilon) and the reference of
    `_kernels.l2_normalize_kernel`."""
    # order=2 is Euclidean over any axes (keras.ops.normalize sums the
    # squares over all of them); other orders are vector norms.
    kind = "euclidean" if order == 2 else _norm_kind(order, len(axes), "order")
    norm = _any_norm(x, axes, kind, keepdims=True, rescue=rescue)
    if epsilon is not None:
        # max(norm, epsilon) as a select (keras.ops.maximum computes
        # float64 in float32 on some backends); a NaN norm stays NaN.
        eps = ops.full_like(norm, epsilon)
        norm = ops.where(ops.less(norm, eps), eps, norm)
    nonzero = ops.not_equal(norm, 0)
    safe = ops.where(nonzero, norm, ops.ones_like(norm))
    return ops.where(nonzero, x / safe, ops.zeros_like(x))


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
        are computed in float32. Runs as one fused kernel: the gradient
        `g * (u2 - cos * u1) / ||x1||` (and symmetrically), 0 for a zero
        vector or one with an infinite entry; an infinite entry makes the
        value NaN.

    Examples:
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
    dtype_of_inputs = (dtype_of(x1), dtype_of(x2))
    out_dtype = result_float_dtype(*dtype_of_inputs)
    compute = compute_dtype_of(*dtype_of_inputs)
    x1 = ops.cast(x1, compute)
    x2 = ops.cast(x2, compute)
    if static_shape(x1) != shape or static_shape(x2) != shape:
        x1, x2 = x1 + ops.zeros_like(x2), x2 + ops.zeros_like(x1)
    # Two float16 inputs cannot leave the float32 range of the sums.
    rescue = dtype_of_inputs != ("float16", "float16")
    if _kernels.kernels_enabled():
        cos = ops.squeeze(_kernels.cosine_kernel(x1, x2, axis, rescue), axis=axis)
    else:
        cos = _reference_cosine_similarity(x1, x2, axis)
    return ops.cast(cos, out_dtype)


def _reference_cosine_similarity(x1, x2, axis):
    """The portable `cosine_similarity` of two float tensors of one shape,
    plain autodiff: the fallback and the reference of
    `_kernels.cosine_kernel`. Vectors out of the moderate range are first
    divided by their largest magnitude (`rescaled`: the cosine is scale
    invariant), so that the derivative of `x / ||x||`, which involves
    `1 / ||x||**2`, does not underflow; the kernel's own rescue does this
    exactly."""
    u1 = l2_normalize(rescaled(x1, axis), axis=axis)
    u2 = l2_normalize(rescaled(x2, axis), axis=axis)
    return ops.clip(ops.sum(u1 * u2, axis=axis), -1.0, 1.0)
