"""The one registration helper for every keras_stable class.

Registered names (`keras_stable>ClassName`) are an on-disk format: `.keras`
files store them. Renaming a class must keep the old name registered, by
calling `register(NewClass, name="OldName")` once more.
"""

import keras

PACKAGE = "keras_stable"


def register(cls=None, *, name=None):
    """Registers `cls` with Keras serialization under `keras_stable>name`.

    Usable as `@register` or `@register(name="DistinctName")` (a metric
    named like a loss needs a distinct name: all classes share one registry).
    """

    def wrap(cls):
        return keras.saving.register_keras_serializable(package=PACKAGE, name=name)(cls)

    return wrap if cls is None else wrap(cls)
