"""The base of the losses whose value is one number per batch (private).

The metric-learning losses compare every sample with every other one
(triplet mining, InfoNCE's candidates), so a sample is either in the batch
or not: a sample whose `sample_weight` is 0, or which the Keras mask of
`y_pred` masks, takes no part at all - not as an anchor, not as a positive
or negative, not as a candidate. The loss over a masked batch is then the
loss over the unmasked samples alone, as for Keras's per-sample losses.
"""

from keras import ops

from keras_stable.common.dtypes import dtype_of
from keras_stable.common.dtypes import static_shape
from keras_stable.losses._base import PerExample
from keras_stable.losses._base import StableLoss


def _per_sample(value, batch, name, views=False):
    """`value` as a `(batch,)` tensor, or a `ValueError` naming `name`."""
    value = ops.convert_to_tensor(value)
    shape = static_shape(value)
    if len(shape) == 2 and shape[1] == 1:
        value = ops.squeeze(value, axis=1)
    elif views and len(shape) == 2 and shape[0] == 2:
        # A (2, batch) mask of two stacked views: a pair counts if both do.
        value = ops.logical_and(_truthy(value[0]), _truthy(value[1]))
    if len(static_shape(value)) == 0:
        return ops.broadcast_to(value, (batch,))
    rows = static_shape(value)
    if len(rows) != 1 or (isinstance(batch, int) and rows[0] is not None and rows[0] != batch):
        expected = "(batch,) or (2, batch)" if views else "(batch,)"
        raise ValueError(
            f"`{name}` of shape {shape} does not match the batch: this loss "
            f"compares the samples of a batch with each other, so `{name}` "
            f"must have shape {expected}, one entry per sample (batch "
            f"{batch})."
        )
    return value


def _truthy(value):
    if dtype_of(value) == "bool":
        return value
    return ops.not_equal(value, 0)


def batch_presence(sample_weight, mask, batch, views=False):
    """`(present, sample_weight)`: which samples take part, and the weights.

    `present` is a boolean `(batch,)` tensor (None when every sample
    does); `sample_weight` comes back as `(batch,)` (or None).
    """
    present = None
    if sample_weight is not None:
        sample_weight = _per_sample(sample_weight, batch, "sample_weight")
        present = _truthy(sample_weight)
    if mask is not None:
        mask = _truthy(_per_sample(mask, batch, "mask", views=views))
        present = mask if present is None else ops.logical_and(present, mask)
    return present, sample_weight


class BatchLevelLoss(StableLoss):
    """Base of the metric-learning losses: samples compared with each other.

    Subclasses implement `terms(y_true, y_pred, present=None)`, the twin
    op's `(values, valid)` over the samples `present` marks (None: all);
    `sample_weight` and the Keras mask of `y_pred` decide which samples
    take part (see the module docstring). `batch_axis` is the axis of
    `y_pred` along the samples; `views=True` accepts a `(2, batch)` mask of
    two stacked views.
    """

    batch_axis = 0
    views = False

    def terms(self, y_true, y_pred, present=None):
        raise NotImplementedError

    def losses_and_valid(self, y_true, y_pred):
        return self.terms(y_true, y_pred)

    def per_example(self, y_true, y_pred, sample_weight=None, mask=None):
        batch = ops.shape(ops.convert_to_tensor(y_pred))[self.batch_axis]
        present, sample_weight = batch_presence(sample_weight, mask, batch, views=self.views)
        values, valid = self.terms(y_true, y_pred, present)
        return PerExample(values, sample_weight, None, valid)
