"""The base class of keras_stable's losses (private to `losses`).

A loss is construction, config and one call of its functional twin in
`keras_stable.ops`. The reduction is `keras_stable.common.reduction`, the
same function the metrics use.

`keras.losses.Loss.__call__` converts `y_true` to the loss dtype (float32 by
default, float16 under some policies): integer labels above 2048 are no
longer exact in float16 and NaN-marked missing labels would be multiplied by
masks. `StableLoss.__call__` therefore converts nothing itself; it reads the
Keras mask of `y_pred` exactly as `keras.losses.Loss` does.
"""

from typing import Any
from typing import NamedTuple

import keras
from keras import ops

from keras_stable.common.checks import check_reduction
from keras_stable.common.reduction import keras_mask_of
from keras_stable.common.reduction import reduce_losses
from keras_stable.common.reduction import weighted


class PerExample(NamedTuple):
    """What a loss hands to the reduction.

    Attributes:
        values: the per-example losses (float).
        sample_weight: weights still to apply to `values` (usually the
            caller's `sample_weight`; None when the loss used them itself).
        mask: the Keras mask of `y_pred` still to apply (None when there is
            none, or the loss consumed it).
        valid: boolean entries of `values` that count (the loss's own
            validity mask: `ignore_class`, inactive tasks), or None.
    """

    values: Any
    sample_weight: Any = None
    mask: Any = None
    valid: Any = None


class StableLoss(keras.losses.Loss):
    """Base of keras_stable's losses: Keras reductions, masks, no casting.

    Subclasses implement `losses_and_valid(y_true, y_pred)` returning
    `(values, valid)`: the per-example losses of the twin op and the
    boolean entries that count in a mean (or None). A loss whose weights
    act inside the loss (the multi-task distance) overrides `per_example`
    instead.
    """

    def __init__(self, name=None, reduction="sum_over_batch_size", dtype=None):
        super().__init__(name=name, reduction=check_reduction(reduction), dtype=dtype)

    def losses_and_valid(self, y_true, y_pred):
        raise NotImplementedError

    def per_example(self, y_true, y_pred, sample_weight=None, mask=None):
        """The per-example losses and what the reduction still applies."""
        values, valid = self.losses_and_valid(y_true, y_pred)
        return PerExample(values, sample_weight, mask, valid)

    def __call__(self, y_true, y_pred, sample_weight=None):
        out = self.per_example(y_true, y_pred, sample_weight, keras_mask_of(y_pred))
        return reduce_losses(
            out.values,
            out.sample_weight,
            out.mask,
            out.valid,
            reduction=self.reduction,
            dtype=self.dtype,
        )

    def call(self, y_true, y_pred):
        """The per-example losses (no weights, no reduction; 0 where not
        counted)."""
        values, valid = self.losses_and_valid(y_true, y_pred)
        if valid is not None:
            values = weighted(values, ops.cast(valid, values.dtype))
        return ops.cast(values, self.dtype)

    def get_config(self):
        config = super().get_config()
        config["dtype"] = self._dtype_policy.name
        return config
