"""keras_stable: Keras 3 layers, losses and metrics free of the classic NaN traps.

The numerics live in :mod:`keras_stable.ops` (pure functions over ``keras.ops``);
:mod:`keras_stable.layers`, :mod:`keras_stable.losses` and
:mod:`keras_stable.metrics` are thin, serializable classes over them.
Importing the package registers every class with Keras's serialization, so
``.keras`` files load with ``safe_mode=True`` and no ``custom_objects``.
"""

__version__ = "0.3.0"

from keras_stable import audit  # noqa: E402,F401
from keras_stable import callbacks  # noqa: E402,F401
from keras_stable import layers  # noqa: E402,F401
from keras_stable import losses  # noqa: E402,F401
from keras_stable import metrics  # noqa: E402,F401
from keras_stable import ops  # noqa: E402,F401
