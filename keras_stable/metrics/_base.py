"""The base of keras_stable's mean metrics (private to `metrics`).

A metric is declared from its loss: `LossMeanMetric` holds an instance of
the twin loss (`reduction="none"`) and streams its per-example values
through the same reduction as the loss (`keras_stable.common.reduction`):
Keras mask of `y_pred`, `sample_weight` and the loss's validity mask.

State is a weighted sum and a sum of weights, both float32 variables with
`aggregation="sum"`: the result after many batches is exactly the weighted
mean over the concatenated data, and the states add up across replicas.
"""

import keras
from keras import ops

from keras_stable.common.arguments import Arg
from keras_stable.common.arguments import declared_init
from keras_stable.common.reduction import keras_mask_of
from keras_stable.common.reduction import weighted_sum_and_count


class LossMeanMetric(keras.metrics.Metric):
    """`sum(w * loss) / sum(w)` over everything seen since the last reset.

    Subclasses set `loss_class` (the twin loss) and `loss_args` (the names
    of the loss's constructor arguments the metric takes). The constructor
    is `(*loss_args, name, dtype)`, with the loss's defaults and checks and
    `name` the class name in snake case; the arguments become attributes
    and config entries of the metric.
    """

    loss_class = None
    loss_args = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "__init__" not in vars(cls) and cls.loss_class is not None:
            args = tuple(cls.loss_class.arg(name) for name in cls.loss_args)
            keras_args = (Arg("name"), Arg("dtype"))
            cls.__init__ = declared_init(cls, args, keras_args, LossMeanMetric.__init__)

    def __init__(self, name=None, dtype=None, **loss_kwargs):
        super().__init__(name=name, dtype=dtype)
        self.loss = self.loss_class(reduction="none", **loss_kwargs)
        for key in self.loss_args:
            # The loss validated (and normalised) each argument.
            setattr(self, key, getattr(self.loss, key))
        self.total = self.add_variable(
            shape=(), initializer="zeros", dtype=self.dtype, name="total"
        )
        self.count = self.add_variable(
            shape=(), initializer="zeros", dtype=self.dtype, name="count"
        )

    def update_state(self, y_true, y_pred, sample_weight=None):
        """Adds the twin loss's per-example values of one batch."""
        out = self.loss.per_example(y_true, y_pred, sample_weight, keras_mask_of(y_pred))
        total, count = weighted_sum_and_count(
            out.values, out.sample_weight, out.mask, out.valid, self.dtype
        )
        self.total.assign(self.total + total)
        self.count.assign(self.count + count)

    def result(self):
        return ops.divide_no_nan(self.total, self.count)

    def get_config(self):
        config = super().get_config()
        config.update({key: getattr(self, key) for key in self.loss_args})
        return config
