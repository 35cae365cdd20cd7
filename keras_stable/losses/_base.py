"""The base class of keras_stable's losses (private to `losses`).

A loss is a declaration of its arguments, and one call of its functional
twin in `keras_stable.ops`. `args` (a tuple of `Arg`, in signature order)
gives the constructor - `(*args, reduction, name, dtype)`, `name`
defaulting to the class name in snake case -, the checks at construction,
the attributes and `get_config`. The reduction is
`keras_stable.common.reduction`, the same function the metrics use.

`keras.losses.Loss.__call__` converts `y_true` to the loss dtype (float32 by
default, float16 under some policies): integer labels above 2048 are no
longer exact in float16 and NaN-marked missing labels would be multiplied by
masks. `StableLoss.__call__` therefore converts nothing itself; it reads the
Keras mask of `y_pred` exactly as `keras.losses.Loss` does.
"""

import functools
from typing import Any
from typing import NamedTuple

import keras
from keras import ops

from keras_stable.common.arguments import Arg
from keras_stable.common.arguments import checked
from keras_stable.common.arguments import declared_init
from keras_stable.common.arguments import flag
from keras_stable.common.checks import check_alpha
from keras_stable.common.checks import check_axis
from keras_stable.common.checks import check_gamma
from keras_stable.common.checks import check_label_smoothing
from keras_stable.common.checks import check_reduction
from keras_stable.common.checks import check_same_shape
from keras_stable.common.checks import warn_if_probabilities
from keras_stable.common.dtypes import HALF
from keras_stable.common.dtypes import dtype_of
from keras_stable.common.dtypes import to_float32
from keras_stable.common.keras_internals import dtype_policy_name
from keras_stable.common.reduction import keras_mask_of
from keras_stable.common.reduction import reduce_losses
from keras_stable.common.reduction import weighted
from keras_stable.ops.probabilities import half_probabilities

# The arguments several losses share, declared once.
FROM_LOGITS = flag("from_logits", True)
AXIS = Arg("axis", -1, check_axis)
LABEL_SMOOTHING = Arg("label_smoothing", 0.0, check_label_smoothing)
GAMMA = Arg("gamma", 2.0, check_gamma)
ALPHA = Arg("alpha", None, check_alpha)
CLASS_ALPHA = Arg("alpha", None, functools.partial(check_alpha, per_class=True))
# Keras's own arguments, after the loss's (as in `keras.losses.Loss`
# subclasses); `name` defaults to the class name in snake case.
KERAS_ARGS = (Arg("reduction", "sum_over_batch_size"), Arg("name"), Arg("dtype"))


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

    Subclasses declare `args` (their own constructor arguments) and
    implement `losses_and_valid(y_true, y_pred)` returning
    `(values, valid)`: the per-example losses of the twin op and the
    boolean entries that count in a mean (or None). A loss whose weights
    act inside the loss (the multi-task distance) overrides `per_example`
    instead. A subclass that writes its own `__init__` passes its
    arguments on by keyword.
    """

    args = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "__init__" not in vars(cls):
            cls.__init__ = declared_init(cls, cls.args, KERAS_ARGS, StableLoss.__init__)

    def __init__(self, name=None, reduction="sum_over_batch_size", dtype=None, **arguments):
        super().__init__(name=name, reduction=check_reduction(reduction), dtype=dtype)
        for key, value in checked(self.args, arguments, type(self).__name__).items():
            setattr(self, key, value)
        self.check_arguments()

    @classmethod
    def arg(cls, name):
        """The declared `Arg` called `name` (a metric takes its defaults)."""
        return next(arg for arg in cls.args if arg.name == name)

    def check_arguments(self):
        """Checks across several arguments, each already checked alone."""

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
        config["dtype"] = dtype_policy_name(self)
        config.update({arg.name: getattr(self, arg.name) for arg in self.args})
        return config


class LogitsLoss(StableLoss):
    """Base of the losses whose twin op reads `y_pred` as logits, or as
    probabilities with `from_logits=False` (the five cross-entropies and
    the KL divergence).

    `from_logits=True` meeting a softmax or sigmoid output is checked, and
    warned about, once per call. The twin op checks the tensor it receives
    (Keras marks an activation's output on the tensor itself); a new tensor
    made from `y_pred` - the float32 cast of a half-precision output, an
    added axis - carries no mark, so the loss checks `y_pred` itself then.
    """

    # Appended to the shape error of labels that must have `y_pred`'s shape.
    shape_hint = ""

    def handed_over(self, y_pred, given):
        """`given`, what the twin op receives for the tensor `y_pred`."""
        if given is not y_pred:
            warn_if_probabilities(y_pred, self.from_logits, type(self).__name__)
        return given

    def scores(self, y_pred):
        """`y_pred` in float32 (exact for half precision), checked.

        Half-precision probabilities (`from_logits=False`) are read by
        `half_probabilities`: through their logits where the backend
        exposes them, else as held, floored at the dtype's smallest
        positive value."""
        y_pred = ops.convert_to_tensor(y_pred)
        return self.handed_over(y_pred, self.float32_input(y_pred))

    # The activation whose output `from_logits=False` reads.
    activation = "softmax"

    def float32_input(self, y_pred):
        """What the twin op is handed: `y_pred` in float32."""
        if not self.from_logits and dtype_of(y_pred) in HALF:
            axis = getattr(self, "axis", -1)
            return half_probabilities(y_pred, self.activation, axis, type(self).__name__)
        return to_float32(y_pred)

    def dense_inputs(self, y_true, y_pred):
        """`(y_true, scores)` for labels of `y_pred`'s shape (one-hot or
        soft labels, a target distribution)."""
        y_true = ops.convert_to_tensor(y_true)
        y_pred = self.scores(y_pred)
        check_same_shape(y_true, y_pred, "y_true", "y_pred", hint=self.shape_hint)
        return y_true, y_pred
