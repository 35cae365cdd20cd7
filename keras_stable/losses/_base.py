"""The base class of keras_stable's losses and its reduction (private).

`keras.losses.Loss.__call__` converts `y_true` to the loss dtype (float32 by
default, float16 under some policies): integer labels above 2048 are no
longer exact in float16 and NaN-marked missing labels would be multiplied by
masks. `StableLoss.__call__` therefore converts nothing itself: each loss
reads its inputs in `compute_per_example`, and the reduction below follows
Keras's semantics (`"sum_over_batch_size"`, `"sum"`, `"mean"`,
`"mean_with_sample_weight"`, `"none"`) with one difference: an entry whose
weight is 0 contributes exactly 0, even where its loss is `inf` (Keras
computes `0 * inf = NaN`).
"""

import keras
from keras import ops

from keras_stable.ops._utils import dtype_of
from keras_stable.ops._utils import static_shape

_REDUCTIONS = (
    "sum_over_batch_size",
    "sum",
    "mean",
    "mean_with_sample_weight",
    "none",
    None,
)


def check_reduction(reduction):
    if reduction not in _REDUCTIONS:
        raise ValueError(
            f"Invalid `reduction`={reduction!r}: expected one of "
            f"{list(_REDUCTIONS)}."
        )
    return reduction


def check_bool(value, name):
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be a bool, got {value!r}.")
    return value


def to_float32(x):
    """Half precision (and integers) → float32, exactly; float32/64 as is.

    The ops return half-precision results for half-precision inputs; a loss
    returns float32, so it hands the ops float32 inputs (the cast is exact)
    rather than rounding each per-example loss to float16.
    """
    x = ops.convert_to_tensor(x)
    if dtype_of(x) in ("float32", "float64"):
        return x
    return ops.cast(x, "float32")


def align_weights(weights, values, name="sample_weight"):
    """Broadcasts `weights` onto `values`, aligning their leading axes.

    A trailing axis of size 1 is squeezed (Keras's `(batch, 1)` weights for
    `(batch,)` losses); a lower-rank weight is expanded at the end, so a
    `(batch,)` weight weights every entry of its example. Any other mismatch
    raises a `ValueError` (never a silent broadcast along the wrong axis).
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
    return ops.where(
        ops.equal(weights, 0), ops.zeros_like(values), values * weights
    )


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


def reduce_losses(values, sample_weight, valid, reduction, dtype):
    """Keras's loss reduction, with `valid` marking the entries that count.

    `valid` (boolean, the shape of `values`, or None) plays the role of a
    Keras mask: `"sum_over_batch_size"` and `"mean"` divide by the number of
    valid entries (0 when none is valid: an empty batch gives 0, not NaN),
    `"mean_with_sample_weight"` by the sum of their weights.
    """
    values = ops.cast(values, dtype)
    weights = None
    if sample_weight is not None:
        weights = ops.cast(align_weights(sample_weight, values), dtype)
    if valid is not None:
        valid_f = ops.cast(valid, dtype)
        weights = valid_f if weights is None else weights * valid_f
    values = weighted(values, weights)
    if reduction in (None, "none") or static_shape(values) == ():
        return values
    total = ops.sum(values)
    if reduction == "sum":
        return total
    if reduction == "mean_with_sample_weight" and weights is not None:
        divisor = ops.sum(weights)
    elif valid is not None:
        divisor = ops.sum(ops.cast(valid, dtype))
    else:
        divisor = ops.cast(ops.size(values), dtype)
    return _scale_for_distribution(ops.divide_no_nan(total, divisor))


class StableLoss(keras.losses.Loss):
    """Base of keras_stable's losses: Keras reductions without casting labels.

    Subclasses implement `compute_per_example(y_true, y_pred, sample_weight)`
    returning `(values, weights, valid)`: the per-example losses, the weights
    still to apply to them (usually `sample_weight`, or None when the loss
    used them itself) and the boolean entries that count in a mean (or None).
    """

    def __init__(self, name=None, reduction="sum_over_batch_size", dtype=None):
        super().__init__(
            name=name, reduction=check_reduction(reduction), dtype=dtype
        )

    def __call__(self, y_true, y_pred, sample_weight=None):
        values, weights, valid = self.compute_per_example(
            y_true, y_pred, sample_weight
        )
        return reduce_losses(
            values, weights, valid, self.reduction, self.dtype
        )

    def call(self, y_true, y_pred):
        """The per-example losses (no weights, no reduction)."""
        values, _, valid = self.compute_per_example(y_true, y_pred, None)
        if valid is not None:
            values = weighted(values, ops.cast(valid, values.dtype))
        return ops.cast(values, self.dtype)

    def compute_per_example(self, y_true, y_pred, sample_weight):
        raise NotImplementedError

    def get_config(self):
        config = super().get_config()
        config["dtype"] = self._dtype_policy.name
        return config
