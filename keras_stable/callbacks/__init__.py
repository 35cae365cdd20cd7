"""Keras callbacks: `NaNAudit` stops at the first NaN and names the trap;
`LossScaleMonitor` logs the loss scale and the steps it skipped."""

from keras_stable.callbacks.loss_scale_monitor import LossScaleMonitor
from keras_stable.callbacks.nan_audit import NaNAudit

__all__ = ["LossScaleMonitor", "NaNAudit"]
