"""`LossScaleMonitor`: the loss scale and the skipped steps, every epoch."""

import warnings

import keras
import numpy as np


def _value(variable):
    return float(np.asarray(keras.ops.convert_to_numpy(variable.value)))


class LossScaleMonitor(keras.callbacks.Callback):
    """Puts the loss scale and the skipped-step count into the epoch logs.

    Under a loss-scaled optimizer (`keras.optimizers.LossScaleOptimizer`,
    which `compile` installs under the `mixed_float16` policy), a step whose
    scaled gradients are not finite is skipped: the weights are left as
    they were and the scale is halved. Nothing says so, and training that
    skips most of its steps looks like training that does not improve. This
    callback adds to the logs of every epoch

    - `logs["loss_scale"]`: the dynamic loss scale at the epoch's end;
    - `logs["skipped_steps"]`: the steps skipped in this epoch (the steps
      run minus the steps the inner optimizer applied),

    and warns (`UserWarning`) at the end of an epoch that skipped any.
    A model without a loss-scaled optimizer gets no keys and one warning at
    the start of training.

    Args:
        warn: `False` to only log, never warn.

    Cost: two scalar reads per epoch and a Python counter per step.

    Examples:
        >>> import keras, numpy as np
        >>> from keras_stable.callbacks import LossScaleMonitor
        >>> keras.config.set_dtype_policy("mixed_float16")
        >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        >>> keras.config.set_dtype_policy("float32")
        >>> model.compile(optimizer="sgd", loss="mse")
        >>> history = model.fit(np.ones((4, 2)), np.ones((4, 1)), verbose=0,
        ...                     callbacks=[LossScaleMonitor(warn=False)])
        >>> sorted(k for k in history.history if k != "loss")
        ['loss_scale', 'skipped_steps']
    """

    def __init__(self, warn=True):
        super().__init__()
        self.warn = warn
        self._steps = 0
        self._applied_at_start = 0

    def _optimizer(self):
        optimizer = getattr(self.model, "optimizer", None)
        if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
            return optimizer
        return None

    def on_train_begin(self, logs=None):
        if self._optimizer() is None and self.warn:
            warnings.warn(
                "LossScaleMonitor: the model's optimizer is not a LossScaleOptimizer "
                "(compile under the mixed_float16 policy, or wrap it): nothing to monitor.",
                stacklevel=2,
            )

    def on_epoch_begin(self, epoch, logs=None):
        self._steps = 0
        optimizer = self._optimizer()
        if optimizer is not None:
            self._applied_at_start = int(_value(optimizer.iterations))

    def on_train_batch_end(self, batch, logs=None):
        self._steps += 1

    def on_epoch_end(self, epoch, logs=None):
        optimizer = self._optimizer()
        if optimizer is None or logs is None:
            return
        applied = int(_value(optimizer.iterations)) - self._applied_at_start
        skipped = max(self._steps - applied, 0)
        scale = _value(optimizer.dynamic_scale) if optimizer.built else optimizer.initial_scale
        logs["loss_scale"] = scale
        logs["skipped_steps"] = skipped
        if skipped and self.warn:
            warnings.warn(
                f"LossScaleMonitor: epoch {epoch + 1} skipped {skipped} of {self._steps} "
                f"steps (non-finite scaled gradients); loss scale now {scale:g}. "
                "Run keras_stable.audit.audit(model, x, y, precision='mixed_float16') "
                "to find the layers that leave the float16 range.",
                stacklevel=2,
            )
