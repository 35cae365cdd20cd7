"""The one reduction of per-example values, shared by losses and metrics.

`keras.losses.Loss.__call__` reads the Keras mask of `y_pred`, converts
`y_true` to the loss dtype and reduces `values * sample_weight * mask`.
keras_stable's losses and metrics follow the same semantics through
`reduce_losses` and `weighted_sum_and_count` below, with three differences
that keep them NaN-free and exact:

- `y_true` is not converted here (integer labels above 2048 are not exact in
  float16, NaN-marked missing labels must not be multiplied by masks): each
  loss reads its own labels;
- the library's own validity masks (`valid`: NaN labels, `ignore_class`,
  inactive tasks) count exactly like a Keras mask;
- an entry whose weight is 0 contributes exactly 0, even where its value is
  `inf` or NaN (Keras computes `0 * inf = NaN`).
"""

import keras
from keras import ops

from keras_stable.common.checks import check_reduction
from keras_stable.common.dtypes import dtype_of
from keras_stable.common.dtypes import static_shape
from keras_stable.common.keras_internals import keras_mask


def keras_mask_of(x):
    """The Keras mask carried by `x` (e.g. a model output), or None.

    `Embedding(mask_zero=True)` and `Masking` attach a `(batch, time)`
    boolean mask to their outputs and Keras propagates it through the
    layers that support masking; `keras.losses.Loss` reads it from
    `y_pred`; `keras_internals.keras_mask` reads it (on the tensor, or in
    Keras's registry for a JAX tracer).
    """
    return keras_mask(x)


def align_weights(weights, values, name="sample_weight"):
    """Broadcasts `weights` onto `values`, aligning their leading axes.

    A trailing axis of size 1 is squeezed (Keras's `(batch, 1)` weights for
    `(batch,)` losses); a lower-rank weight is expanded at the end, so a
    `(batch,)` weight weights every entry of its example. Any other mismatch
    raises a `ValueError` naming `name` (never a silent broadcast along the
    wrong axis).
    """
    weights = ops.convert_to_tensor(weights)
    w_shape, v_shape = static_shape(weights), static_shape(values)
    if len(w_shape) == len(v_shape) + 1 and w_shape[-1] == 1:
        weights = ops.squeeze(weights, axis=-1)
        w_shape = w_shape[:-1]
    if len(w_shape) > len(v_shape):
        raise ValueError(
            f"`{name}` of shape {w_shape} has a higher rank than the "
            f"per-example losses of shape {v_shape}."
        )
    for i, (dw, dv) in enumerate(zip(w_shape, v_shape)):
        if dw not in (1, None) and dv is not None and dw != dv:
            raise ValueError(
                f"`{name}` of shape {w_shape} does not match the per-example "
                f"losses of shape {v_shape} (axis {i}: {dw} vs {dv})."
            )
    for _ in range(len(v_shape) - len(w_shape)):
        weights = ops.expand_dims(weights, -1)
    return ops.broadcast_to(weights, ops.shape(values))


def weighted(values, weights):
    """`values * weights`, exactly 0 where the weight is 0 (even for inf)."""
    if weights is None:
        return values
    return ops.where(ops.equal(weights, 0), ops.zeros_like(values), values * weights)


def combine_weights(values, sample_weight=None, mask=None, valid=None):
    """The weight of each entry of `values`, or None when all are 1.

    Args:
        values: per-example values (losses), float.
        sample_weight: optional weights, aligned on the leading axes of
            `values` (`(batch,)` weights every entry of an example).
        mask: optional Keras mask (boolean or 0/1), aligned like
            `sample_weight`; False entries get weight 0.
        valid: optional boolean tensor of `values`' shape; False entries get
            weight 0 (the loss's own validity mask).

    Returns:
        `(weights, counted)`: float weights of `values`' shape and dtype (or
        None), and the boolean entries that count in a mean (or None when
        all do).
    """
    dtype = dtype_of(values)
    weights = None
    if sample_weight is not None:
        weights = ops.cast(align_weights(sample_weight, values), dtype)
    counted = None
    if mask is not None:
        mask = align_weights(mask, values, name="mask")
        if dtype_of(mask) != "bool":
            mask = ops.greater(mask, 0)
        counted = mask
    if valid is not None:
        counted = valid if counted is None else ops.logical_and(counted, valid)
    if counted is not None:
        counted_f = ops.cast(counted, dtype)
        weights = counted_f if weights is None else weights * counted_f
    return weights, counted


def _scale_for_distribution(loss):
    # Keras divides a mean loss by the number of replicas under
    # `tf.distribute` (gradients are then summed across replicas). Imported
    # lazily: keras_stable never imports TensorFlow at module load.
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        replicas = tf.distribute.get_strategy().num_replicas_in_sync
        if replicas > 1:
            loss = loss * ops.cast(1.0 / replicas, loss.dtype)
    return loss


def reduce_losses(
    values,
    sample_weight=None,
    mask=None,
    valid=None,
    reduction="sum_over_batch_size",
    dtype="float32",
):
    """Keras's loss reduction over `values`, with masks that count exactly.

    Args:
        values: per-example losses.
        sample_weight: optional weights (see `combine_weights`).
        mask: optional Keras mask of `y_pred` (see `keras_mask_of`).
        valid: optional boolean entries that count (the loss's own mask).
        reduction: `"sum_over_batch_size"` and `"mean"` divide the weighted
            sum by the number of counted entries (all entries when there is
            no mask), `"mean_with_sample_weight"` by the sum of the weights,
            `"sum"` returns the weighted sum, `"none"`/None the weighted
            values (0 where not counted).
        dtype: the dtype of the result.

    Returns:
        The reduced loss in `dtype`. A batch where nothing counts gives 0
        (and zero gradients), not NaN.
    """
    check_reduction(reduction)
    values = ops.cast(values, dtype)
    weights, counted = combine_weights(values, sample_weight, mask, valid)
    values = weighted(values, weights)
    if reduction in (None, "none") or static_shape(values) == ():
        return values
    total = ops.sum(values)
    if reduction == "sum":
        return total
    if reduction == "mean_with_sample_weight" and weights is not None:
        divisor = ops.sum(weights)
    elif counted is not None:
        divisor = ops.sum(ops.cast(counted, dtype))
    else:
        # Not `ops.size`: Keras 3.16 gives None for a symbolic tensor of
        # unknown batch size.
        divisor = ops.sum(ops.ones_like(values))
    return _scale_for_distribution(ops.divide_no_nan(total, divisor))


def weighted_sum_and_count(values, sample_weight=None, mask=None, valid=None, dtype="float32"):
    """`(sum(w * values), sum(w))`: the update of a streaming weighted mean.

    The weights `w` are those of `reduce_losses` (sample weights, Keras mask,
    validity mask; 1 by default), so a metric's result over several batches
    is the weighted mean over their concatenation, and
    `reduction="mean_with_sample_weight"` of the twin loss on one batch.
    """
    values = ops.cast(values, dtype)
    weights, _ = combine_weights(values, sample_weight, mask, valid)
    if weights is None:
        weights = ops.ones_like(values)
    return ops.sum(weighted(values, weights)), ops.sum(weights)
