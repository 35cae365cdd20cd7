"""Shared by the regression losses: Keras's rank alignment and last-axis mean.

Keras's regression losses (`MeanSquaredError`, `Huber`, `Poisson`...)
compute an elementwise loss and average it over the last axis; these
helpers do the same, with a mean that can count only observed entries.
"""

from keras import ops

from keras_stable import ops as stable_ops
from keras_stable.common.dtypes import static_shape
from keras_stable.common.dtypes import to_float32


def align_ranks(y_true, y_pred, what="y_pred"):
    """Keras's rank alignment, then a `ValueError` unless the shapes match.

    Where the ranks differ by one and the longer side ends in a size-1 axis,
    a rank-1 shorter side is expanded (`(batch,)` labels for `(batch, 1)`
    predictions) and otherwise the size-1 axis is squeezed, as Keras's
    regression losses do. `what` names the predictions in the message.
    """
    t, p = static_shape(y_true), static_shape(y_pred)
    if len(p) == len(t) + 1 and p[-1] == 1:
        if len(t) == 1:
            y_true = ops.expand_dims(y_true, -1)
        else:
            y_pred = ops.squeeze(y_pred, -1)
    elif len(t) == len(p) + 1 and t[-1] == 1:
        if len(p) == 1:
            y_pred = ops.expand_dims(y_pred, -1)
        else:
            y_true = ops.squeeze(y_true, -1)
    if static_shape(y_true) != static_shape(y_pred):
        raise ValueError(
            f"`y_true` and `{what}` must have the same shape, got "
            f"y_true.shape={t} and {what}.shape={p}."
        )
    return y_true, y_pred


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
        return (ops.mean(values, axis=-1) if rank >= 2 else values), None
    if rank < 2:
        return values, observed
    count = ops.sum(ops.cast(observed, values.dtype), axis=-1)
    total = ops.sum(values, axis=-1)
    return stable_ops.safe_divide(total, count), ops.greater(count, 0)


def mean_over_observed(error_fn, y_true, y_pred):
    """`(values, valid)` of a masked elementwise error, averaged over the
    observed entries of the last axis (NaN in `y_true` marks a missing
    label). Inputs are read in float32 (exact for half precision)."""
    y_true, y_pred = align_ranks(to_float32(y_true), to_float32(y_pred))
    values = error_fn(y_true, y_pred)
    return mean_over_last_axis(values, ops.logical_not(ops.isnan(y_true)))
