"""Serializable layers over `keras_stable.ops`.

The axis layers are weightless: each validates its `axis` and the Keras
mask it receives, runs the math of `keras_stable.ops` in float32 (or wider)
and returns the layer's compute dtype. `LinearSoftmaxHead` is the output
layer of large-vocabulary models: it trains without materialising logits.
`StableMultiHeadAttention` and `StableGroupedQueryAttention` are drop-ins
for Keras's attention layers whose fully masked rows give 0, never NaN.
"""

from keras_stable.layers.carry_mask import CarryMask
from keras_stable.layers.gaussian_sampling import GaussianSampling
from keras_stable.layers.l2_normalize import L2Normalize
from keras_stable.layers.linear_softmax_head import LinearSoftmaxHead
from keras_stable.layers.log_softmax import LogSoftmax
from keras_stable.layers.safe_norm import SafeNorm
from keras_stable.layers.stable_grouped_query_attention import StableGroupedQueryAttention
from keras_stable.layers.stable_multi_head_attention import StableMultiHeadAttention
from keras_stable.layers.stable_softmax import StableSoftmax
from keras_stable.layers.stable_sparsemax import StableSparsemax

__all__ = [
    "CarryMask",
    "GaussianSampling",
    "L2Normalize",
    "LinearSoftmaxHead",
    "LogSoftmax",
    "SafeNorm",
    "StableGroupedQueryAttention",
    "StableMultiHeadAttention",
    "StableSoftmax",
    "StableSparsemax",
]
