"""Pairwise distances and standard deviations with clean gradients."""

from keras import ops

from keras_stable.common.checks import check_axis
from keras_stable.common.checks import check_bool
from keras_stable.common.dtypes import compute_dtype_of
from keras_stable.common.dtypes import dtype_of
from keras_stable.common.dtypes import result_float_dtype
from keras_stable.common.dtypes import static_shape
from keras_stable.common.dtypes import to_compute
from keras_stable.ops.norms import moderate_scale
from keras_stable.ops.norms import safe_sqrt
from keras_stable.ops.norms import scaled_by

# Features per step of the exact (forward-only) distance loop: the loop
# holds one `[n, m, _CHUNK]` block at a time, never `[n, m, dim]`.
_CHUNK = 16


def _check_rows(x, name):
    shape = static_shape(x)
    if len(shape) != 2:
        raise ValueError(
            f"`{name}` must be a 2-D tensor of shape (rows, features), got {name}.shape={shape}."
        )
    if shape[1] is None:
        raise ValueError(f"`{name}` needs a static number of features, got {name}.shape={shape}.")
    return shape


def _centre_and_scale(z):
    """A per-feature centre and a scalar scale of the finite entries of `z`.

    Distances do not change when every row is shifted by the same vector,
    and scale with a common factor, so both are held constant (no
    gradient). The centre is the midrange of each feature, `hi/2 + lo/2`
    (no overflow), which minimises the largest centred entry; the scale is
    that largest entry where it is out of the moderate range (so the
    centred, scaled entries lie in [-1, 1]), else 1: neither the squares nor
    the Gram matrix can overflow, and the expansion `|a|^2 + |b|^2 - 2 a.b`
    loses no digits to a common offset.
    Non-finite entries take no part (they stay visible in their own rows).
    """
    finite = ops.isfinite(z)
    inf = ops.full_like(z, float("inf"))
    hi = ops.max(ops.where(finite, z, -inf), axis=0, keepdims=True)
    lo = ops.min(ops.where(finite, z, inf), axis=0, keepdims=True)
    seen = ops.greater_equal(hi, lo)  # some finite entry in the feature
    centre = ops.where(seen, 0.5 * hi + 0.5 * lo, ops.zeros_like(hi))
    centre = ops.stop_gradient(centre)
    dev = ops.where(finite, ops.abs(z - centre), ops.zeros_like(z))
    return centre, moderate_scale(ops.max(dev))


def _exact_squared_distances(a, b):
    """`sum((a_i - b_j)**2)` by explicit differences, `_CHUNK` features at a
    time (no gradient: the caller differentiates the expansion instead).

    This is the value: exact to float rounding for any pair, exactly 0 for
    coincident rows (the difference is 0 entry by entry), which the
    expansion `|a|^2 + |b|^2 - 2 a.b` is not (its rounding error is
    `~eps * (|a|^2 + |b|^2)`: where the squared norms and the Gram matrix
    are summed in different orders, two equal rows can come out at
    `+-1e-7`, a distance of `3e-4` instead of 0).
    """
    a = ops.stop_gradient(a)
    b = ops.stop_gradient(b)
    features = static_shape(a)[1]
    blocks = -(-features // _CHUNK)
    pad = blocks * _CHUNK - features
    if pad:
        # Zero features add nothing to a squared difference.
        a = ops.pad(a, [[0, 0], [0, pad]])
        b = ops.pad(b, [[0, 0], [0, pad]])
    a = ops.reshape(a, (-1, blocks, _CHUNK))
    b = ops.reshape(b, (-1, blocks, _CHUNK))

    def body(i, total):
        a_i = ops.take(a, i, axis=1)  # [n, _CHUNK]
        b_i = ops.take(b, i, axis=1)  # [m, _CHUNK]
        diff = ops.expand_dims(a_i, 1) - ops.expand_dims(b_i, 0)
        return total + ops.sum(ops.square(diff), axis=-1)

    first = body(0, 0.0)
    if blocks == 1:
        return first
    return ops.fori_loop(1, blocks, body, first)


def pairwise_distance(x, y=None, squared=False):
    """Euclidean distances between the rows of `x` and the rows of `y`.

    `out[i, j] = ||x[i] - y[j]||` (squared with `squared=True`); `y=None`
    means `y = x`, as in TF Addons' `pairwise_distance(feature, squared)`.

    Args:
        x: tensor of shape `(n, features)`.
        y: optional tensor of shape `(m, features)`; `None` uses `x`.
        squared: return squared distances.

    Returns:
        A tensor of shape `(n, m)` in the promoted float dtype of the
        inputs.

    Numerical stability:
        The plain formulations fail in two ways. `sqrt(sum((x_i - y_j)**2))`
        (`keras.ops.cdist`-style broadcasting) builds an `[n, m, features]`
        tensor and, for coincident rows - the whole diagonal of
        `pairwise_distance(x)` - differentiates `sqrt` at 0: a NaN
        gradient. The expansion `|x_i|^2 + |y_j|^2 - 2 x_i.y_j` (TF
        Addons) needs only matrix products, but loses digits to
        cancellation, `~eps * (|x_i|^2 + |y_j|^2)`: two rows `1e-3` apart
        (entries around 3) are 38% off, an offset common to all rows
        (`1e4 + noise`) swamps the distances, and coincident rows can come
        out at `sqrt(round-off)` instead of 0.

        Here the rows are first centred and scaled by constants (distances
        are translation invariant and homogeneous; the constants carry no
        gradient), so nothing overflows - inputs around `1e30` give their
        exact distances - and the expansion keeps its digits. The value
        is the exact sum of squared differences, computed a few features
        at a time (memory `O(n m)`, no `[n, m, features]` tensor) without
        gradient; the gradient is that of the expansion (matrix products
        again, memory `O(n m)`). Negative round-off is clamped at 0, and
        the square root goes through the double-where pattern: coincident
        rows (the diagonal of `pairwise_distance(x)` included) get
        exactly 0 and a gradient of exactly 0. float16/bfloat16 are
        computed in float32. A NaN entry gives NaN in its own row (or
        column) of the output, an infinite entry `inf` or NaN; gradients
        are only promised for finite inputs.

    Example:

    >>> import numpy as np
    >>> from keras_stable import ops
    >>> x = np.array([[0.0, 0.0], [3.0, 4.0], [3.0, 4.0]], "float32")
    >>> np.asarray(ops.pairwise_distance(x))
    array([[0., 5., 5.],
           [5., 0., 0.],
           [5., 0., 0.]], dtype=float32)
    >>> np.asarray(ops.pairwise_distance(x[:1], x, squared=True))
    array([[ 0., 25., 25.]], dtype=float32)
    """
    squared = check_bool(squared, "squared")
    x = ops.convert_to_tensor(x)
    x_shape = _check_rows(x, "x")
    if y is None:
        x, out_dtype = to_compute(x)
        a = b = x
        both = x
    else:
        y = ops.convert_to_tensor(y)
        y_shape = _check_rows(y, "y")
        if x_shape[1] != y_shape[1]:
            raise ValueError(
                "`x` and `y` must have the same number of features, got "
                f"x.shape={x_shape} and y.shape={y_shape}."
            )
        out_dtype = result_float_dtype(dtype_of(x), dtype_of(y))
        compute = compute_dtype_of(dtype_of(x), dtype_of(y))
        a = ops.cast(x, compute)
        b = ops.cast(y, compute)
        both = ops.concatenate([a, b], axis=0)
    if x_shape[1] == 0:
        return ops.zeros((ops.shape(a)[0], ops.shape(b)[0]), out_dtype)
    centre, scale = _centre_and_scale(both)
    a_c = scaled_by(a - centre, scale)
    b_c = a_c if y is None else scaled_by(b - centre, scale)
    # The differentiable expansion (matrix products only, on the centred
    # rows) ...
    gram = ops.matmul(a_c, ops.transpose(b_c))
    a_sq = ops.sum(ops.square(a_c), axis=1, keepdims=True)
    b_sq = a_sq if y is None else ops.sum(ops.square(b_c), axis=1, keepdims=True)
    expanded = a_sq + ops.transpose(b_sq) - 2.0 * gram
    # ... carries the exact value: value(expanded + c) = exact and
    # d(expanded + c) = d(expanded) with c = stop_gradient(exact - expanded).
    # The exact differences are taken on the rows as given (one rounding
    # per difference; the centring would add one), scaled like the rest.
    a_s = scaled_by(a, scale)
    b_s = a_s if y is None else scaled_by(b, scale)
    exact = _exact_squared_distances(a_s, b_s)
    finite = ops.logical_and(ops.isfinite(expanded), ops.isfinite(exact))
    corrected = expanded + ops.stop_gradient(
        ops.where(finite, exact - expanded, ops.zeros_like(exact))
    )
    sq = ops.where(finite, corrected, ops.stop_gradient(exact))
    if squared:
        # Clamp round-off at 0 (NaN stays NaN); the gradient there is 0.
        positive = ops.greater(sq, 0)
        keep = ops.logical_or(positive, ops.isnan(sq))
        # Two products: `scale**2` itself overflows for scales above 1.8e19
        # (and 0 * inf = NaN), while a true squared distance below the
        # float32 maximum never does.
        out = (ops.where(keep, sq, ops.zeros_like(sq)) * scale) * scale
    else:
        out = safe_sqrt(sq) * scale
    return ops.cast(out, out_dtype)


def safe_std(x, axis=None, keepdims=False):
    """Standard deviation over `axis`, with a gradient of 0 on a constant slice.

    The signature and value of `keras.ops.std` (the population standard
    deviation, `sqrt(mean((x - mean(x))**2))`).

    Args:
        x: tensor.
        axis: `None` (all axes), an int, or a tuple/list of ints.
        keepdims: keep the reduced axes with size 1.

    Returns:
        The standard deviation, in the (float) dtype of `x`.

    Numerical stability:
        The derivative of `sqrt(v)` is infinite at `v = 0`, so
        `keras.ops.std` (TensorFlow, JAX) has a NaN gradient wherever the
        slice is constant (a dead feature, a constant prediction in a
        Pearson-correlation loss). Here the square root goes through the
        double-where pattern (`safe_sqrt`): the value is exactly 0 and the
        gradient exactly 0 there, and elsewhere the gradient is the exact
        `(x - mean) / (n std)`. The mean is computed first and the
        deviations squared after (two passes, no `E[x^2] - E[x]^2`
        cancellation); a slice with entries above `2**50` (or all below
        `2**-50`) is scaled by its largest magnitude first (a constant
        without gradient), so entries near the float32 maximum give their
        exact standard deviation instead of `inf`.
        float16/bfloat16 are computed in float32. NaN gives NaN; an
        infinite entry gives NaN.

    Example:

    >>> import numpy as np
    >>> from keras_stable import ops
    >>> x = np.array([[1.0, 3.0], [2.0, 2.0]], "float32")
    >>> np.asarray(ops.safe_std(x, axis=1))
    array([1., 0.], dtype=float32)
    """
    x, out_dtype = to_compute(x)
    axes = check_axis(axis, len(static_shape(x)), multiple=True)
    if not axes:
        # Each entry is a slice of its own: its deviation is 0 (NaN stays).
        return ops.cast(x - x, out_dtype)
    abs_x = ops.where(ops.isfinite(x), ops.abs(x), ops.zeros_like(x))
    scale = moderate_scale(ops.max(abs_x, axis=axes, keepdims=True))
    t = scaled_by(x, scale)
    dev = t - ops.mean(t, axis=axes, keepdims=True)
    variance = ops.mean(ops.square(dev), axis=axes, keepdims=True)
    std = safe_sqrt(variance) * scale
    if not keepdims:
        std = ops.squeeze(std, axis=axes)
    return ops.cast(std, out_dtype)
