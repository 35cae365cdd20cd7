"""Optimizers: `Guarded` wraps any Keras optimizer so that a step with a
non-finite loss or gradient changes nothing, and clips without overflow."""

from keras_stable.optimizers.guarded import Guarded

__all__ = ["Guarded"]
