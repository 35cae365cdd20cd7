"""keras_stable: Keras 3 layers, losses and metrics free of the classic NaN traps.

The numerics live in :mod:`keras_stable.ops` (pure functions over ``keras.ops``);
:mod:`keras_stable.layers`, :mod:`keras_stable.losses` and
:mod:`keras_stable.metrics` are thin, serializable classes over them.
Importing the package registers every class with Keras's serialization, so
``.keras`` files load with ``safe_mode=True`` and no ``custom_objects``.
:mod:`keras_stable.hub` wraps keras-hub models (an optional extra, imported
only when a model is wrapped).
"""

__version__ = "0.3.1"

import importlib as _importlib  # noqa: E402

from keras_stable import _launch  # noqa: E402

# `hub` imports keras-hub only when a model is wrapped (an optional extra).
_SUBMODULES = ("audit", "callbacks", "hub", "layers", "losses", "metrics", "ops", "optimizers")


def _import_submodules():
    """Imports every subpackage: Keras, with the backend it was given, and
    the registration of every class. Run at import, except when one of the
    package's command lines is starting (`keras_stable._launch`): that one
    calls it once it has read `--backend`."""
    for name in _SUBMODULES:
        _importlib.import_module(f"keras_stable.{name}")


def __getattr__(name):
    # Reached only when the command line deferred the imports above.
    if name in _SUBMODULES:
        return _importlib.import_module(f"keras_stable.{name}")
    raise AttributeError(f"module 'keras_stable' has no attribute {name!r}")


if not _launch.defer_keras():
    from keras_stable import audit  # noqa: F401
    from keras_stable import callbacks  # noqa: F401
    from keras_stable import hub  # noqa: F401
    from keras_stable import layers  # noqa: F401
    from keras_stable import losses  # noqa: F401
    from keras_stable import metrics  # noqa: F401
    from keras_stable import ops  # noqa: F401
    from keras_stable import optimizers  # noqa: F401
