"""Pairwise distances and standard deviations with clean gradients."""

import keras
from keras import ops

from keras_stable.common.checks import check_axis
from keras_stable.common.checks import check_bool
from keras_stable.common.dtypes import compute_dtype_of
from keras_stable.common.dtypes import dtype_of
from keras_stable.common.dtypes import highest_like
from keras_stable.common.dtypes import lowest_like
from keras_stable.common.dtypes import maximum
from keras_stable.common.dtypes import mean
from keras_stable.common.dtypes import result_float_dtype
from keras_stable.common.dtypes import static_shape
from keras_stable.common.dtypes import to_compute
from keras_stable.ops import _kernels
from keras_stable.ops.norms import moderate_scale
from keras_stable.ops.norms import safe_norm
from keras_stable.ops.norms import safe_sqrt
from keras_stable.ops.norms import scaled_by


def _check_rows(x, name):
    shape = static_shape(x)
    if len(shape) != 2:
        raise ValueError(
            f"`{name}` must be a 2-D tensor of shape (rows, features), got {name}.shape={shape}."
        )
    if shape[1] is None:
        raise ValueError(f"`{name}` needs a static number of features, got {name}.shape={shape}.")
    return shape


def _reference_pairwise(a, b, squared):
    """The portable `pairwise_distance` of float rows (`b=None`: `a`), plain
    autodiff: the fallback (`KERAS_STABLE_PORTABLE`, JAX's forward mode)
    and the reference of `_kernels.pairwise_kernel`. It holds the
    `[n, m, features]` differences: `safe_norm` of each difference vector
    (exact, scaled by its largest entry, a zero gradient where the rows
    coincide), or the sum of their squares."""
    b = a if b is None else b
    diff = ops.expand_dims(a, 1) - ops.expand_dims(b, 0)
    if squared:
        # Gradient 2 d, 0 for coincident rows; no square root.
        return ops.sum(ops.square(diff), axis=-1)
    return safe_norm(diff, axis=-1)


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

        Here every distance is summed over the explicit differences
        `x_i - y_j` (one rounding each), a few features at a time (memory
        `O(n m)`, no `[n, m, features]` tensor), and a pair whose sum of
        squares overflowed or underflowed is summed again scaled by an
        exact power of two of its own (`||d|| = ||c d|| / c`, a second
        pass that runs only when some pair needs it): every distance is
        exact wherever it is representable, whatever the other rows hold
        (rows around `1e20` next to ordinary ones, `1e-30` next to `1e30`),
        and exactly 0 for coincident rows. The gradient is the closed form
        `sum_j (x_i - y_j) g_ij / ||x_i - y_j||`, by explicit differences
        again (memory `O(n m)`): exact to float32 round-off also for
        near-coincident rows, where the expansion's gradient cancels
        (`eps * |x| / ||x_i - y_j||`), and exactly 0 for coincident rows
        (the diagonal of `pairwise_distance(x)` included). It runs as a
        fused kernel (see "Fused kernels" in `docs/design.md`).
        float16/bfloat16 are computed in float32. A NaN entry gives NaN in
        its own row (or column) of the output, an infinite entry `inf` or
        NaN; gradients are only promised for finite inputs.

    Examples:
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
        a, out_dtype = to_compute(x)
        b = None
        dtypes = (dtype_of(x),)
    else:
        y = ops.convert_to_tensor(y)
        y_shape = _check_rows(y, "y")
        if x_shape[1] != y_shape[1]:
            raise ValueError(
                "`x` and `y` must have the same number of features, got "
                f"x.shape={x_shape} and y.shape={y_shape}."
            )
        dtypes = (dtype_of(x), dtype_of(y))
        out_dtype = result_float_dtype(*dtypes)
        compute = compute_dtype_of(*dtypes)
        a = ops.cast(x, compute)
        b = ops.cast(y, compute)
    m = x_shape[0] if y is None else y_shape[0]
    if any(keras.utils.is_keras_tensor(t) for t in (x, y)):
        # A symbolic input (`keras.Input`): only the shape is asked for.
        return keras.KerasTensor((x_shape[0], m), dtype=out_dtype)
    if x_shape[1] == 0:
        rows = ops.shape(a)[0] if b is None else ops.shape(b)[0]
        return ops.zeros((ops.shape(a)[0], rows), out_dtype)
    if _kernels.kernels_enabled():
        # float16 rows: differences and their squares stay in range.
        rescue = any(dtype != "float16" for dtype in dtypes)
        out = _kernels.pairwise_kernel(a, b, squared, rescue)
    else:
        out = _reference_pairwise(a, b, squared)
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
        `(x - mean) / (n std)`. The slice is first centred at its
        midrange (a constant without gradient), so a constant slice has
        deviations of exactly 0 whatever its value (its computed mean can
        be a rounding off: -123.456 everywhere gave 7.6e-6), then the
        mean is computed and the deviations squared after (two passes, no
        `E[x^2] - E[x]^2` cancellation); a slice with entries above `2**50` (or all below
        `2**-50`) is scaled by its largest magnitude first (a constant
        without gradient), so entries near the float32 maximum give their
        exact standard deviation instead of `inf`.
        float16/bfloat16 are computed in float32. NaN gives NaN; an
        infinite entry gives NaN.

    Examples:
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
    # The finite entries' extremes: the scale (their largest magnitude) and
    # the centre (their midrange, `hi/2 + lo/2`, no overflow), constants
    # without gradient (the deviation is shift invariant). A constant
    # slice is its own midrange exactly, so its deviations are exactly 0,
    # whereas its computed mean can be off by a rounding (every entry
    # -123.456: 7.6e-6).
    finite = ops.isfinite(x)
    hi = ops.max(ops.where(finite, x, lowest_like(x)), axis=axes, keepdims=True)
    lo = ops.min(ops.where(finite, x, highest_like(x)), axis=axes, keepdims=True)
    seen = ops.greater_equal(hi, lo)  # some finite entry in the slice
    zeros = ops.zeros_like(hi)
    hi, lo = ops.where(seen, hi, zeros), ops.where(seen, lo, zeros)
    scale = moderate_scale(maximum(ops.abs(hi), ops.abs(lo)))
    t_hi, t_lo = scaled_by(hi, scale), scaled_by(lo, scale)
    centre = ops.stop_gradient(0.5 * t_hi + 0.5 * t_lo)
    t = scaled_by(x, scale) - centre
    dev = t - mean(t, axis=axes, keepdims=True)
    variance = mean(ops.square(dev), axis=axes, keepdims=True)
    std = safe_sqrt(variance) * scale
    if not keepdims:
        std = ops.squeeze(std, axis=axes)
    return ops.cast(std, out_dtype)
