"""Mean multi-task Euclidean distance over observed labels, as a metric."""

import keras
from keras import ops

from keras_stable import losses
from keras_stable import ops as stable_ops
from keras_stable.common.reduction import keras_mask_of
from keras_stable.common.reduction import weighted_sum_and_count
from keras_stable.common.serialization import register
from keras_stable.losses.masked_multi_task_distance import prepare_task_inputs


@register(name="MaskedMultiTaskDistanceMetric")
class MaskedMultiTaskDistance(keras.metrics.Metric):
    """The masked multi-task distance over all batches seen.

    Entries, masks and weights are those of the loss
    `keras_stable.losses.MaskedMultiTaskDistance` (NaN labels are missing,
    `task_mask` switches tasks off, a `(batch, tasks)` `sample_weight` -
    and with `per="task"` a `(batch,)` one - weights each squared
    difference inside the distance):

    - `per="sample"`: the mean of the per-sample distances
      `d_b = sqrt(sum_t w_bt diff_bt**2)` over the active samples (those with
      at least one observed entry), weighted by a `(batch,)` `sample_weight`
      as Keras's mean metrics are: `sum_b s_b d_b / sum_b s_b`. The state is
      that sum and the sum of weights.
    - `per="task"`: the mean over the active tasks of
      `d_t = sqrt(sum_b w_bt diff_bt**2)`, where the sum runs over *every*
      sample seen since the last reset. The state is the per-task sum of
      weighted squared differences and the per-task count of observed
      entries, created at the first update (or at construction when
      `task_mask` gives the number of tasks).

    Either way the result after several batches equals the result over
    their concatenation, and the states add up across replicas.

    Args:
        per: `"sample"` (default) or `"task"`.
        squared: use the squared distance.
        task_mask: optional constant sequence of `tasks` booleans.
        name: optional name of the metric (registered as
            `keras_stable>MaskedMultiTaskDistanceMetric`, distinct from the
            loss).
        dtype: dtype of the state and result, float32 by default.

    Numerical stability:
        Missing and masked labels never reach arithmetic (double where),
        distances use `safe_norm`/`safe_sqrt`, everything is computed in
        float32. With nothing active the result is 0.

    Examples:
        >>> import numpy as np
        >>> import keras_stable
        >>> m = keras_stable.metrics.MaskedMultiTaskDistance(per="task")
        >>> m.update_state(np.array([[3.0, np.nan]], "float32"), np.zeros((1, 2), "float32"))
        >>> m.update_state(np.array([[4.0, 2.0]], "float32"), np.zeros((1, 2), "float32"))
        >>> print(float(m.result()))  # (sqrt(3**2 + 4**2) + 2) / 2
        3.5
    """

    def __init__(
        self,
        per="sample",
        squared=False,
        task_mask=None,
        name="masked_multi_task_distance",
        dtype=None,
    ):
        super().__init__(name=name, dtype=dtype)
        # The twin loss validates the arguments and computes the per-sample
        # distances (reduction "none": the metric streams them).
        self.loss = losses.MaskedMultiTaskDistance(
            per=per, squared=squared, task_mask=task_mask, reduction="none"
        )
        self.per = self.loss.per
        self.squared = self.loss.squared
        self.task_mask = self.loss.task_mask
        self._tasks = None
        if self.per == "sample":
            self.total = self.add_variable(
                shape=(), initializer="zeros", dtype=self.dtype, name="total"
            )
            self.count = self.add_variable(
                shape=(), initializer="zeros", dtype=self.dtype, name="count"
            )
        elif self.task_mask is not None:
            self._build_task_state(len(self.task_mask))

    def _build_task_state(self, tasks):
        self._tasks = tasks
        self.squared_sums = self.add_variable(
            shape=(tasks,),
            initializer="zeros",
            dtype=self.dtype,
            name="squared_sums",
        )
        self.observed_counts = self.add_variable(
            shape=(tasks,),
            initializer="zeros",
            dtype=self.dtype,
            name="observed_counts",
        )

    def update_state(self, y_true, y_pred, sample_weight=None):
        mask = keras_mask_of(y_pred)
        if self.per == "sample":
            out = self.loss.per_example(y_true, y_pred, sample_weight, mask)
            total, count = weighted_sum_and_count(
                out.values, out.sample_weight, out.mask, out.valid, self.dtype
            )
            self.total.assign(self.total + total)
            self.count.assign(self.count + count)
            return
        y_true, y_pred, inside, _, observed = prepare_task_inputs(
            y_true, y_pred, sample_weight, self.per, self.task_mask, mask=mask
        )
        tasks = tuple(y_pred.shape)[1]
        if self._tasks is None:
            if tasks is None:
                raise ValueError(
                    "MaskedMultiTaskDistance(per='task') needs a static "
                    f"number of tasks, got inputs of shape {tuple(y_pred.shape)}."
                )
            self._build_task_state(tasks)
        elif tasks is not None and tasks != self._tasks:
            raise ValueError(
                f"The metric was built for {self._tasks} tasks, got inputs "
                f"of shape {tuple(y_pred.shape)}."
            )
        sums = stable_ops.masked_task_distance(y_true, y_pred, mask=inside, axis=0, squared=True)
        seen = ops.sum(ops.cast(observed, self.dtype), axis=0)
        self.squared_sums.assign(self.squared_sums + ops.cast(sums, self.dtype))
        self.observed_counts.assign(self.observed_counts + seen)

    def result(self):
        if self.per == "sample":
            return ops.divide_no_nan(self.total, self.count)
        if self._tasks is None:
            return ops.zeros((), self.dtype)
        dist = self.squared_sums
        if not self.squared:
            dist = stable_ops.safe_sqrt(dist)
        active = ops.cast(ops.greater(self.observed_counts, 0), self.dtype)
        return ops.divide_no_nan(ops.sum(dist * active), ops.sum(active))

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "per": self.per,
                "squared": self.squared,
                "task_mask": self.task_mask,
            }
        )
        return config
