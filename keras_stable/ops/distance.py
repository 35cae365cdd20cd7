"""Euclidean distance over the observed, unmasked entries."""

from keras import ops

from keras_stable.common.checks import check_axis
from keras_stable.common.checks import check_same_shape
from keras_stable.common.checks import prepare_mask
from keras_stable.common.dtypes import compute_dtype_of
from keras_stable.common.dtypes import dtype_of
from keras_stable.common.dtypes import result_float_dtype
from keras_stable.common.dtypes import static_shape
from keras_stable.ops.norms import safe_norm
from keras_stable.ops.norms import safe_sqrt


def masked_task_distance(y_true, y_pred, mask=None, axis=-1, squared=False):
    """Euclidean (or squared) distance over `axis`, counting observed entries.

    `d = sqrt(sum(w * (y_true - y_pred)**2, axis))` where `w` is 1 (or the
    float weight in `mask`) on entries where `mask` is true (> 0) and
    `y_true` is not NaN, and 0 elsewhere.

    Args:
        y_true: targets; NaN marks a missing label.
        y_pred: predictions, same shape as `y_true`.
        mask: optional boolean mask, or non-negative float weights (0 =
            masked), broadcastable to `y_true`.
        axis: int, the axis the distance is taken over.
        squared: return the squared distance `sum(w * diff**2)`.

    Returns:
        The distance with `axis` reduced, in the promoted float dtype.

    Numerical stability:
        Masked and missing entries are removed with the double-where pattern
        before anything nonlinear touches them, so their gradient is exactly
        0 even when the label is NaN (`0 * NaN` and a single `where` both
        leak NaN into the gradient). The distance is `safe_norm`: a distance
        of 0 (all entries masked, or a perfect fit) has the gradient 0, not
        0/0 = NaN, with no epsilon in the value. float16/bfloat16 are
        computed in float32.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> y_true = np.array([[3.0, np.nan, 1.0]], "float32")
        >>> y_pred = np.array([[0.0, 5.0, 5.0]], "float32")
        >>> np.asarray(ops.masked_task_distance(y_true, y_pred, mask=[True, True, False]))
        array([3.], dtype=float32)
    """
    y_true = ops.convert_to_tensor(y_true)
    y_pred = ops.convert_to_tensor(y_pred)
    check_same_shape(y_true, y_pred, "y_true", "y_pred")
    axis = check_axis(axis, len(static_shape(y_pred)))
    out_dtype = result_float_dtype(dtype_of(y_true), dtype_of(y_pred))
    compute = compute_dtype_of(dtype_of(y_true), dtype_of(y_pred))
    y_true = ops.cast(y_true, compute)
    y_pred = ops.cast(y_pred, compute)

    valid = ops.logical_not(ops.isnan(y_true))
    weights = None
    if mask is not None:
        mask = ops.convert_to_tensor(mask)
        if dtype_of(mask) != "bool":
            weights = ops.cast(mask, compute)
        valid = ops.logical_and(valid, prepare_mask(mask, y_true))
    zeros = ops.zeros_like(y_true)
    diff = ops.where(valid, ops.where(valid, y_true, zeros) - y_pred, zeros)
    if weights is not None:
        weights = ops.broadcast_to(weights, ops.shape(y_true))
        diff = diff * safe_sqrt(ops.where(valid, weights, zeros))
    if squared:
        dist = ops.sum(ops.square(diff), axis=axis)
    else:
        dist = safe_norm(diff, axis=axis)
    return ops.cast(dist, out_dtype)
