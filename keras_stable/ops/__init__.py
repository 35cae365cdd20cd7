"""The numerics of keras_stable: pure functions over `keras.ops`.

Every function computes the exact value wherever it is defined, returns a
finite gradient everywhere (0 at singular points), computes float16/bfloat16
in float32, and compiles under XLA. Nothing here imports the layers, losses
or metrics.
"""

from keras_stable.ops.cross_entropy import sigmoid_cross_entropy
from keras_stable.ops.cross_entropy import softmax_cross_entropy
from keras_stable.ops.cross_entropy import sparse_softmax_cross_entropy
from keras_stable.ops.distance import masked_task_distance
from keras_stable.ops.linear_cross_entropy import linear_softmax_cross_entropy
from keras_stable.ops.division import safe_divide
from keras_stable.ops.norms import cosine_similarity
from keras_stable.ops.norms import l2_normalize
from keras_stable.ops.norms import safe_norm
from keras_stable.ops.norms import safe_sqrt
from keras_stable.ops.softmax import log_softmax
from keras_stable.ops.softmax import logsumexp
from keras_stable.ops.softmax import softmax

__all__ = [
    "cosine_similarity",
    "l2_normalize",
    "linear_softmax_cross_entropy",
    "log_softmax",
    "logsumexp",
    "masked_task_distance",
    "safe_divide",
    "safe_norm",
    "safe_sqrt",
    "sigmoid_cross_entropy",
    "softmax",
    "softmax_cross_entropy",
    "sparse_softmax_cross_entropy",
]
