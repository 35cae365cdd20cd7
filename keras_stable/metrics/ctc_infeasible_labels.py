"""How many CTC labels no alignment fits: `StableCTC` scores them 0."""

import keras
from keras import ops

from keras_stable.common.keras_internals import set_metric_direction
from keras_stable.common.reduction import align_weights
from keras_stable.common.reduction import keras_mask_of
from keras_stable.common.serialization import register
from keras_stable.losses.stable_ctc import read_ctc_inputs
from keras_stable.ops.ctc import ctc_feasible_over_frames


@register
class CTCInfeasibleLabels(keras.metrics.Metric):
    """The number of CTC labels too long for their frames, since the last reset.

    A label needs one frame per class plus a blank between two equal
    neighbours (`[1, 1]` needs 3 frames). One longer than its frames (the
    frames the Keras mask of `y_pred` keeps, else the whole time axis, as
    `losses.StableCTC` reads them) has no alignment: probability 0.
    `StableCTC` scores such a sample 0 with a zero gradient
    (`zero_infinity=True`), so training goes on, and this metric is how
    you learn that some transcriptions can never be right: compile with
    `metrics=[CTCInfeasibleLabels()]` and `fit`'s logs count them per
    epoch (Keras resets metrics at each epoch). It reads the same
    `(y_true, y_pred)` as the loss and changes nothing in it.

    Args:
        name: optional name of the metric (the key in `fit`'s logs).
        dtype: dtype of the state and result, float32 by default.

    Call arguments (`update_state`):
        y_true: `(batch, max_label_length)` integer labels, padded with 0
            (the blank), as for `StableCTC`.
        y_pred: `(batch, max_time, num_classes)` logits; its Keras mask,
            when it has one, gives each sample's frames.
        sample_weight: optional `(batch,)` weights: a sample of weight 0
            is not counted (it does not train either).

    Returns:
        `result()`: a float32 scalar, the count of infeasible labels seen
        since the last `reset_state()` (a sum: it adds up across batches
        and replicas).

    Numerical stability:
        Integer counting only: no arithmetic on the logits, which are read
        for their shape and mask. A `ValueError` names the argument and
        the shapes for a `y_true` that is not `(batch, max_label_length)`,
        a `y_pred` that is not `(batch, max_time, num_classes)`, different
        batch sizes, or a `sample_weight` that does not match the batch.

    Examples:
        >>> import numpy as np
        >>> import keras_stable
        >>> logits = np.zeros((3, 4, 5), "float32")  # 4 frames each
        >>> labels = np.array([[1, 2, 0], [1, 1, 1], [2, 2, 3]], "int32")
        >>> m = keras_stable.metrics.CTCInfeasibleLabels()
        >>> m.update_state(labels, logits)  # [1, 1, 1] needs 5 frames
        >>> float(m.result())
        1.0
    """

    def __init__(self, name="ctc_infeasible_labels", dtype=None):
        super().__init__(name=name, dtype=dtype)
        set_metric_direction(self, "down")
        self.count = self.add_variable(
            shape=(), initializer="zeros", dtype=self.dtype, aggregation="sum", name="count"
        )

    def update_state(self, y_true, y_pred, sample_weight=None):
        """Adds the number of infeasible labels of one batch."""
        _, target, target_length, frames, _ = read_ctc_inputs(y_true, y_pred, keras_mask_of(y_pred))
        infeasible = ops.logical_not(ctc_feasible_over_frames(target, target_length, frames))
        if sample_weight is not None:
            weights = align_weights(sample_weight, target_length)
            infeasible = ops.logical_and(infeasible, ops.not_equal(weights, 0))
        self.count.assign_add(ops.sum(ops.cast(infeasible, self.dtype)))

    def result(self):
        return ops.convert_to_tensor(self.count)

    def reset_state(self):
        self.count.assign(ops.zeros((), dtype=self.dtype))
