"""Losses that stay finite through the classic numerical traps.

Each is a thin, serializable `keras.losses.Loss` over its functional twin in
`keras_stable.ops`, with Keras's reductions and `sample_weight`, computed
and returned in float32 by default (also under mixed precision).
"""

from keras_stable.losses.masked_multi_task_distance import (
    MaskedMultiTaskDistance,
)
from keras_stable.losses.stable_sigmoid_cross_entropy import (
    StableSigmoidCrossEntropy,
)
from keras_stable.losses.stable_softmax_cross_entropy import (
    StableSoftmaxCrossEntropy,
)
from keras_stable.losses.stable_sparse_softmax_cross_entropy import (
    StableSparseSoftmaxCrossEntropy,
)

__all__ = [
    "MaskedMultiTaskDistance",
    "StableSigmoidCrossEntropy",
    "StableSoftmaxCrossEntropy",
    "StableSparseSoftmaxCrossEntropy",
]
