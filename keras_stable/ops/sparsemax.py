"""Sparsemax (Martins and Astudillo, 2016): a softmax with exact zeros."""

from keras import ops

from keras_stable.common.checks import check_axis
from keras_stable.common.checks import prepare_mask
from keras_stable.common.dtypes import is_neg_inf
from keras_stable.common.dtypes import is_pos_inf
from keras_stable.common.dtypes import lowest_like
from keras_stable.common.dtypes import maximum
from keras_stable.common.dtypes import nan_where
from keras_stable.common.dtypes import static_shape
from keras_stable.common.dtypes import to_compute


def sparsemax(x, axis=-1, mask=None):
    """The Euclidean projection of `x` onto the probability simplex.

    `sparsemax(x)_i = max(x_i - tau, 0)`, with the threshold `tau` such
    that the output sums to 1 (Martins and Astudillo, 2016).

    Args:
        x: tensor of logits.
        axis: int (default -1), a tuple/list of ints projected over
            together, or `None` (all axes).
        mask: optional boolean tensor broadcastable to `x`; `False` entries
            get 0 and are left out of the projection.

    Returns:
        Probabilities of the shape and (float) dtype of `x`, summing to 1
        along `axis`, many of them exactly 0.

    Numerical stability:
        The largest valid entry is subtracted first (sparsemax is
        shift-invariant), so large logits lose no digits; half precision
        is computed in float32. The support `S` is found by sorting (no
        data-dependent shape: XLA-safe) and held constant, and
        `tau = (sum_S x - 1) / |S|` is differentiated: the gradient is the
        exact Jacobian product, `g_i - mean_S(g)` on `S` and 0 elsewhere.
        `[0, 0.5, 1]` gives `[0, 0.25, 0.75]`, where Keras 3.15's
        `keras.ops.sparsemax` gives `[0, 0, 0.25]` (not a distribution).
        Masked and `-inf` entries give 0 with a zero gradient, NaN under
        the mask included; an entry more than 1 below the maximum is never
        in the support (it is not read, so `-1e38` next to `1e38` cannot
        overflow a sum). A row with nothing left (all masked or all
        `-inf`) gives all zeros and a zero gradient, as `softmax` does, not
        a uniform row. A `+inf` entry gives NaN there and 0 elsewhere in
        its row, as `softmax`; a NaN entry gives a NaN row.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> x = np.array([[0.0, 0.5, 1.0], [0.0, 1.0, -np.inf], [-np.inf] * 3], "float32")
        >>> np.asarray(ops.sparsemax(x))
        array([[0.  , 0.25, 0.75],
               [0.  , 1.  , 0.  ],
               [0.  , 0.  , 0.  ]], dtype=float32)
    """
    x, out_dtype = to_compute(x)
    rank = len(static_shape(x))
    axes = check_axis(axis, rank, multiple=True)
    mask = prepare_mask(mask, x)
    if mask is not None:
        mask = ops.broadcast_to(mask, ops.shape(x))
    if not axes:
        # Each entry alone: the projection of one number is 1 (0 if
        # invalid); computed as a size-1 axis.
        x = ops.expand_dims(x, -1)
        mask = None if mask is None else ops.expand_dims(mask, -1)
        return ops.cast(ops.squeeze(_sparsemax_last(x, mask), axis=-1), out_dtype)
    # The axes go last, flattened into one: the projection is over all of
    # them together.
    ends = tuple(range(rank - len(axes), rank))
    x = ops.moveaxis(x, axes, ends)
    moved = static_shape(x)
    x = _flatten_tail(x, len(axes))
    if mask is not None:
        mask = _flatten_tail(ops.moveaxis(mask, axes, ends), len(axes))
    out = _sparsemax_last(x, mask)
    out = ops.reshape(out, _shape_spec(out, moved[: -len(axes)], moved[-len(axes) :]))
    return ops.cast(ops.moveaxis(out, ends, axes), out_dtype)


def _shape_spec(x, lead, tail):
    """A reshape target: `lead` (its one unknown size as -1, or the
    dynamic sizes of `x` where several are unknown), then `tail`."""
    if sum(d is None for d in lead) <= 1:
        return tuple(-1 if d is None else d for d in lead) + tuple(tail)
    shape = ops.shape(x)
    return tuple(shape[i] for i in range(len(lead))) + tuple(tail)


def _flatten_tail(x, count):
    """`x` with its last `count` axes (of known sizes) made one."""
    shape = static_shape(x)
    if count == 1:
        return x
    size = 1
    for d in shape[-count:]:
        size *= d
    return ops.reshape(x, _shape_spec(x, shape[:-count], (size,)))


def _sparsemax_last(x, mask):
    """Sparsemax along the last axis of a float32/float64 `x`."""
    valid = ops.logical_not(is_neg_inf(x))
    if mask is not None:
        valid = ops.logical_and(valid, ops.broadcast_to(mask, ops.shape(x)))
    finite = ops.logical_and(valid, ops.isfinite(x))
    lowest = lowest_like(x)
    row_max = ops.max(ops.where(finite, x, lowest), axis=-1, keepdims=True)
    row_max = ops.stop_gradient(row_max)
    z = ops.where(finite, x - row_max, ops.zeros_like(x))
    # Entries 1 or more below the maximum are never in the support (tau >=
    # max - 1); they and the invalid entries become -2, a finite sentinel
    # that keeps them out of it without summing anything large.
    near = ops.logical_and(finite, ops.greater(z, -1.0))
    sentinel = ops.full_like(z, -2.0)
    zc = ops.where(near, z, sentinel)
    # The support from the sorted values (no gradient: it is locally
    # constant): the largest k with 1 + k z_(k) > sum_{j<=k} z_(j).
    ranked = ops.stop_gradient(ops.flip(ops.sort(zc, axis=-1), axis=-1))
    # 1, 2, ..., n along the axis, of `ranked`'s own shape (symbolic
    # calls and unknown sizes included).
    ks = ops.cumsum(ops.ones_like(ranked), axis=-1)
    in_support = ops.greater(1.0 + ks * ranked, ops.cumsum(ranked, axis=-1))
    k = ops.sum(ops.cast(in_support, x.dtype), axis=-1, keepdims=True)
    kth = ops.min(ops.where(in_support, ranked, ops.ones_like(ranked)), axis=-1, keepdims=True)
    # In the original order: the entries at or above the k-th value (ties
    # enter the support together).
    support = ops.logical_and(near, ops.greater_equal(zc, kth))
    zero = ops.zeros_like(z)
    tau = (ops.sum(ops.where(support, z, zero), axis=-1, keepdims=True) - 1.0) / k
    out = ops.where(support, maximum(z - tau, zero), zero)
    nonempty = ops.any(finite, axis=-1, keepdims=True)
    out = ops.where(nonempty, out, zero)
    # +inf: NaN there and 0 elsewhere (as softmax); NaN: a NaN row.
    top = ops.logical_and(valid, is_pos_inf(x))
    row_top = ops.any(top, axis=-1, keepdims=True)
    out = ops.where(row_top, nan_where(top, out), out)
    nan_row = ops.any(ops.logical_and(valid, ops.isnan(x)), axis=-1, keepdims=True)
    out = ops.where(nan_row, nan_where(nan_row, out), out)
    return out
