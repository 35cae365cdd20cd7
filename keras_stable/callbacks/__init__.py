"""Keras callbacks: `NaNAudit` stops at the first NaN and names the trap."""

from keras_stable.callbacks.nan_audit import NaNAudit

__all__ = ["NaNAudit"]
