"""The base of keras_stable's mean metrics (private).

State is a weighted sum and a sum of weights, both float32 variables with
`aggregation="sum"`: the result after many batches is exactly the weighted
mean over the concatenated data, and the states add up across replicas.
"""

import keras
from keras import ops

from keras_stable.losses._base import align_weights
from keras_stable.losses._base import weighted


class StableMeanMetric(keras.metrics.Metric):
    """`sum(w * value) / sum(w)` over everything seen since the last reset.

    Subclasses set `self._loss` (their twin loss, `reduction="none"`) and
    inherit `update_state`, or call `accumulate` themselves.
    """

    def __init__(self, name=None, dtype=None):
        super().__init__(name=name, dtype=dtype)
        self.total = self.add_variable(
            shape=(), initializer="zeros", dtype=self.dtype, name="total"
        )
        self.count = self.add_variable(
            shape=(), initializer="zeros", dtype=self.dtype, name="count"
        )

    def accumulate(self, values, sample_weight=None, valid=None):
        """Adds per-example `values`; `valid` (bool) entries alone count."""
        values = ops.cast(values, self.dtype)
        if sample_weight is None:
            weights = ops.ones_like(values)
        else:
            weights = ops.cast(align_weights(sample_weight, values), self.dtype)
        if valid is not None:
            weights = weights * ops.cast(valid, self.dtype)
        # A zero weight removes an example even where its value is inf.
        self.total.assign(self.total + ops.sum(weighted(values, weights)))
        self.count.assign(self.count + ops.sum(weights))

    def update_state(self, y_true, y_pred, sample_weight=None):
        """Accumulates the per-example values of the twin loss `self._loss`."""
        values, weights, valid = self._loss.compute_per_example(
            y_true, y_pred, sample_weight
        )
        self.accumulate(values, weights, valid)

    def result(self):
        return ops.divide_no_nan(self.total, self.count)
