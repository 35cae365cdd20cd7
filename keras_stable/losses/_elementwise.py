"""Shared by the elementwise losses: Keras's rank alignment and last-axis mean.

Keras's regression losses (`MeanSquaredError`, `Huber`, `Poisson`...) and
its binary cross-entropies compute an elementwise loss and average it over
the last axis (or `axis`); these helpers do the same, with a mean that can
count only observed entries.
"""

from keras import ops

from keras_stable import ops as stable_ops
from keras_stable.common.checks import align_ranks
from keras_stable.common.checks import check_axis
from keras_stable.common.dtypes import mean
from keras_stable.common.dtypes import static_shape
from keras_stable.common.dtypes import to_float32


def mean_over_last_axis(values, observed=None):
    """`(values, valid)`: the mean over the last axis of rank >= 2 values.

    Without `observed`, Keras's `mean(values, axis=-1)` (a rank-1 input holds
    one value per example and is returned as is). With `observed` (boolean,
    `values`' shape), the mean counts only observed entries (unobserved ones
    must hold 0), and `valid` marks the examples with at least one: an
    example with none gives 0 with a zero gradient and does not count in the
    reduction.
    """
    rank = len(static_shape(values))
    if observed is None:
        return (mean(values, axis=-1) if rank >= 2 else values), None
    if rank < 2:
        return values, observed
    count = ops.sum(ops.cast(observed, values.dtype), axis=-1)
    total = ops.sum(values, axis=-1)
    return stable_ops.safe_divide(total, count), ops.greater(count, 0)


def mean_over_observed_axis(values, observed, axis=-1):
    """`(values, valid)`: `mean(values, axis)` over the observed entries.

    For values of rank >= 2 (a rank-1 input holds one value per example and
    is returned as is, with `valid = observed`). `observed` is boolean, of
    `values`' shape; unobserved entries must hold 0 (and have a zero
    gradient). A slice with every entry observed gives `ops.mean` itself,
    bit for bit, so a batch without missing labels gives the number the
    loss gave before missing labels were handled; a slice with some missing
    gives the sum over its observed entries divided by their count; a
    slice with none gives 0 with a zero gradient, and `valid` (the slices
    with at least one observed entry) leaves it out of the reduction.
    """
    rank = len(static_shape(values))
    if rank < 2:
        return values, observed
    axis = check_axis(axis, rank)
    count = ops.sum(ops.cast(observed, values.dtype), axis=axis)
    partial = stable_ops.safe_divide(ops.sum(values, axis=axis), count)
    complete = ops.all(observed, axis=axis)
    return ops.where(complete, mean(values, axis=axis), partial), ops.greater(count, 0)


def mean_over_observed(error_fn, y_true, y_pred):
    """`(values, valid)` of a masked elementwise error, averaged over the
    observed entries of the last axis (NaN in `y_true` marks a missing
    label). Inputs are read in float32 (exact for half precision)."""
    y_true, y_pred = align_ranks(to_float32(y_true), to_float32(y_pred))
    values = error_fn(y_true, y_pred)
    return mean_over_last_axis(values, ops.logical_not(ops.isnan(y_true)))
