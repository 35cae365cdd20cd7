"""Euclidean distance of a multi-task regression, with masked tasks and labels."""

import numpy as np
from keras import ops

from keras_stable import ops as stable_ops
from keras_stable.common.arguments import Arg
from keras_stable.common.arguments import flag
from keras_stable.common.dtypes import static_shape
from keras_stable.common.serialization import register
from keras_stable.losses._base import PerExample
from keras_stable.losses._base import StableLoss

_PERS = ("sample", "task")


def check_per(per):
    if per not in _PERS:
        raise ValueError(
            f"Invalid `per`={per!r}: expected 'sample' (a distance across "
            "the tasks of each sample) or 'task' (a distance across the "
            "batch for each task)."
        )
    return per


def check_task_mask(task_mask):
    """A constant 1-D sequence of bools (or 0/1) → list of bools, or None."""
    if task_mask is None:
        return None
    values = np.asarray(task_mask)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(
            "`task_mask` must be a non-empty 1-D sequence with one entry per "
            f"task, got shape {values.shape}."
        )
    if values.dtype != bool and not np.isin(values, (0, 1)).all():
        raise ValueError(f"`task_mask` must hold booleans (or 0/1), got {values.tolist()}.")
    return [bool(v) for v in values]


def check_task_weights(task_weights):
    """A constant 1-D sequence of finite weights >= 0 → list of floats."""
    if task_weights is None:
        return None
    try:
        values = np.asarray(task_weights, dtype="float64")
    except (TypeError, ValueError):
        raise ValueError(
            f"`task_weights` must be a 1-D sequence of numbers, got {task_weights!r}."
        ) from None
    if values.ndim != 1 or values.size == 0:
        raise ValueError(
            "`task_weights` must be a non-empty 1-D sequence with one entry "
            f"per task, got shape {values.shape}."
        )
    if not (np.isfinite(values).all() and (values >= 0).all()):
        raise ValueError(f"`task_weights` must be finite and >= 0, got {values.tolist()}.")
    return [float(v) for v in values]


def prepare_task_inputs(
    y_true, y_pred, sample_weight, per, task_mask, task_weights=None, mask=None
):
    """Validates shapes and builds the weights used inside the distance.

    `mask` is the Keras mask of `y_pred` (`(batch,)` or `(batch, tasks)`):
    a masked entry counts for nothing, as a missing label. Single-task
    labels of shape `(batch,)` are accepted for `(batch, 1)` predictions, as
    Keras losses accept them.

    Returns `(y_true, y_pred, inside, outside, observed)`: float32 labels
    and predictions of shape `(batch, tasks)`; `inside`, the float weight of
    each entry's squared difference (None when all are 1); `outside`, a
    `(batch,)` sample weight still to apply per sample (per="sample" only);
    `observed`, the boolean entries that take part (label not NaN, weight
    > 0).
    """
    y_true = ops.convert_to_tensor(y_true)
    y_pred = ops.convert_to_tensor(y_pred)
    t_shape, p_shape = static_shape(y_true), static_shape(y_pred)
    if len(t_shape) == 1 and len(p_shape) == 2 and p_shape[1] == 1:
        y_true = ops.expand_dims(y_true, -1)
        t_shape = static_shape(y_true)
    if len(p_shape) != 2 or t_shape != p_shape:
        raise ValueError(
            "`y_true` and `y_pred` must both have shape (batch, tasks), got "
            f"y_true.shape={t_shape} and y_pred.shape={p_shape}."
        )
    tasks = p_shape[1]
    for name, values in (("task_mask", task_mask), ("task_weights", task_weights)):
        if values is not None and tasks is not None and len(values) != tasks:
            raise ValueError(
                f"`{name}` has {len(values)} entries but the inputs of shape "
                f"{p_shape} have {tasks} tasks."
            )
    y_true = ops.cast(y_true, "float32")
    y_pred = ops.cast(y_pred, "float32")

    inside = None

    def times(weights):
        return weights if inside is None else inside * weights

    outside = None
    if sample_weight is not None:
        sw = ops.cast(ops.convert_to_tensor(sample_weight), "float32")
        s_shape = static_shape(sw)
        if len(s_shape) == 2 and s_shape[1] == 1:
            sw = ops.squeeze(sw, axis=1)
            s_shape = s_shape[:1]
        ok_batch = s_shape[:1] in ((p_shape[0],), (None,)) or p_shape[0] is None
        if len(s_shape) == 2 and ok_batch and s_shape[1] in (tasks, None):
            inside = times(sw)
        elif len(s_shape) == 1 and ok_batch:
            if per == "task":
                inside = times(ops.expand_dims(sw, 1))
            else:
                outside = sw
        else:
            raise ValueError(
                f"`sample_weight` of shape {tuple(static_shape(sample_weight))} "
                f"does not fit inputs of shape {p_shape}: expected (batch,), "
                "(batch, 1) or (batch, tasks)."
            )
    if task_mask is not None:
        inside = times(ops.convert_to_tensor(np.asarray(task_mask, "float32")))
    if task_weights is not None and per == "sample":
        inside = times(ops.convert_to_tensor(np.asarray(task_weights, "float32")))
    if mask is not None:
        mask = ops.convert_to_tensor(mask)
        m_shape = static_shape(mask)
        if m_shape not in ((p_shape[0],), p_shape) and None not in m_shape:
            raise ValueError(
                f"The Keras `mask` of `y_pred` has shape {m_shape}; expected "
                f"(batch,) or (batch, tasks) for `y_pred` of shape {p_shape}."
            )
        if len(m_shape) == 1:
            mask = ops.expand_dims(mask, 1)
        inside = times(ops.cast(mask, "float32"))
    observed = ops.logical_not(ops.isnan(y_true))
    if inside is not None:
        inside = ops.broadcast_to(inside, ops.shape(y_true))
        observed = ops.logical_and(observed, ops.greater(inside, 0))
    return y_true, y_pred, inside, outside, observed


@register
class MaskedMultiTaskDistance(StableLoss):
    """Euclidean distance of a multi-task regression, over observed labels.

    `y_true` and `y_pred` have shape `(batch, tasks)`. An entry `(b, t)`
    takes part when its label is not NaN (NaN marks a missing label), its
    task is on in `task_mask`, and its weight is positive. Its weight `w` is
    the product of the `(batch, tasks)` `sample_weight` (or, for
    `per="task"`, the `(batch,)` one), the task mask and, for
    `per="sample"`, `task_weights`:

    - `per="sample"`: `d_b = sqrt(sum_t w_bt (y_true - y_pred)_bt**2)`, the
      distance across tasks of each sample; a `(batch,)` `sample_weight`
      multiplies each `d_b`, as in Keras. The units are the samples.
    - `per="task"`: `d_t = sqrt(sum_b w_bt (y_true - y_pred)_bt**2)`, the
      distance across the batch of each task (the formulation
      `norm(y_true - y_pred, axis=0)` of the multi-task bug report), each
      multiplied by its `task_weights` entry. The units are the tasks.

    `squared=True` drops the square root. Normalisation: a unit is *active*
    when at least one of its entries takes part, and the Keras `reduction`
    counts only active units: `"sum_over_batch_size"` and `"mean"` divide
    the (weighted) sum of the distances by the number of active units,
    `"mean_with_sample_weight"` by the sum of their weights, `"sum"` adds
    them, `"none"` returns each unit's weighted distance (0 for inactive
    units). So switching tasks off, or missing labels, never dilutes the
    loss with zeros, and a batch where nothing is active gives 0 with zero
    gradients. The distance itself is a sum over entries, not a mean (with
    `per="task"` it grows with the batch size, like `norm(..., axis=0)`).

    This is the thin class over `keras_stable.ops.masked_task_distance`.

    Args:
        per: `"sample"` (default) or `"task"`.
        squared: use the squared distance.
        task_weights: optional sequence of `tasks` finite weights >= 0.
        task_mask: optional constant sequence of `tasks` booleans; `False`
            switches a task off (for a mask that changes from batch to batch,
            pass a `(batch, tasks)` `sample_weight` or NaN labels).
        reduction: a Keras reduction, `"sum_over_batch_size"` by default.
        name: optional name of the loss.
        dtype: dtype of the result, float32 by default.

    Call arguments:
        y_true: labels of shape `(batch, tasks)`, NaN where missing.
        y_pred: predictions, same shape.
        sample_weight: optional, `(batch,)`, `(batch, 1)` or
            `(batch, tasks)`, >= 0 (0 = masked).

    Numerical stability:
        A masked entry's label never reaches arithmetic: the double-where
        pattern removes it first, so its gradient is exactly 0 even when the
        label is NaN (`0 * NaN` would leak NaN into the gradient). The
        distance is `keras_stable.ops.safe_norm`: at distance 0 (a task
        switched off in the whole batch, a perfect fit) the gradient is 0,
        not `0/0 = NaN` as with `keras.ops.norm` under XLA or JAX, and no
        epsilon biases the value. Computed in float32 (also for float16
        predictions), returned in the loss dtype.

    Examples:
        >>> import numpy as np
        >>> import keras_stable
        >>> loss = keras_stable.losses.MaskedMultiTaskDistance(per="task")
        >>> y_true = np.array([[3.0, np.nan], [4.0, 1.0]], "float32")
        >>> y_pred = np.zeros((2, 2), "float32")
        >>> print(float(loss(y_true, y_pred)))  # (5 + 1) / 2 active tasks
        3.0
        >>> mask = np.array([[1.0, 0.0], [1.0, 0.0]], "float32")
        >>> print(float(loss(y_true, y_pred, sample_weight=mask)))  # 1 active
        5.0
    """

    args = (
        Arg("per", "sample", check_per),
        flag("squared", False),
        Arg("task_weights", None, check_task_weights),
        Arg("task_mask", None, check_task_mask),
    )

    def check_arguments(self):
        if (
            self.task_weights is not None
            and self.task_mask is not None
            and len(self.task_weights) != len(self.task_mask)
        ):
            raise ValueError(
                f"`task_weights` has {len(self.task_weights)} entries and "
                f"`task_mask` {len(self.task_mask)}: both need one per task."
            )

    def per_example(self, y_true, y_pred, sample_weight=None, mask=None):
        # The weights and the Keras mask act inside the distance, so they
        # are consumed here; the reduction counts only the active units.
        y_true, y_pred, inside, outside, observed = prepare_task_inputs(
            y_true,
            y_pred,
            sample_weight,
            self.per,
            self.task_mask,
            self.task_weights,
            mask,
        )
        axis = -1 if self.per == "sample" else 0
        values = stable_ops.masked_task_distance(
            y_true, y_pred, mask=inside, axis=axis, squared=self.squared
        )
        active = ops.any(observed, axis=axis)
        weights = outside
        if self.per == "task" and self.task_weights is not None:
            weights = ops.convert_to_tensor(np.asarray(self.task_weights, "float32"))
        return PerExample(values, weights, None, active)

    def losses_and_valid(self, y_true, y_pred):
        out = self.per_example(y_true, y_pred)
        return out.values, out.valid
