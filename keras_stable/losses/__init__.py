"""Losses that stay finite through the classic numerical traps.

Each is a thin, serializable `keras.losses.Loss` over its functional twin in
`keras_stable.ops`, with Keras's reductions and `sample_weight`, computed
and returned in float32 by default (also under mixed precision).
"""

from keras_stable.losses.contrastive_loss import ContrastiveLoss
from keras_stable.losses.info_nce_loss import InfoNCELoss
from keras_stable.losses.masked_huber import MaskedHuber
from keras_stable.losses.masked_mean_absolute_error import MaskedMeanAbsoluteError
from keras_stable.losses.masked_mean_squared_error import MaskedMeanSquaredError
from keras_stable.losses.masked_multi_task_distance import MaskedMultiTaskDistance
from keras_stable.losses.mixture_density_nll import MixtureDensityNLL
from keras_stable.losses.stable_cosine_similarity import StableCosineSimilarity
from keras_stable.losses.stable_ctc import StableCTC
from keras_stable.losses.stable_dice import StableDice
from keras_stable.losses.stable_gaussian_nll import StableGaussianNLL
from keras_stable.losses.stable_kl_divergence import StableKLDivergence
from keras_stable.losses.stable_poisson import StablePoisson
from keras_stable.losses.stable_sigmoid_cross_entropy import StableSigmoidCrossEntropy
from keras_stable.losses.stable_sigmoid_focal_cross_entropy import StableSigmoidFocalCrossEntropy
from keras_stable.losses.stable_softmax_cross_entropy import StableSoftmaxCrossEntropy
from keras_stable.losses.stable_softmax_focal_cross_entropy import StableSoftmaxFocalCrossEntropy
from keras_stable.losses.stable_sparse_softmax_cross_entropy import StableSparseSoftmaxCrossEntropy
from keras_stable.losses.stable_tversky import StableTversky
from keras_stable.losses.triplet_hard_loss import TripletHardLoss
from keras_stable.losses.triplet_semi_hard_loss import TripletSemiHardLoss

__all__ = [
    "ContrastiveLoss",
    "InfoNCELoss",
    "MaskedHuber",
    "MaskedMeanAbsoluteError",
    "MaskedMeanSquaredError",
    "MaskedMultiTaskDistance",
    "MixtureDensityNLL",
    "StableCosineSimilarity",
    "StableCTC",
    "StableDice",
    "StableGaussianNLL",
    "StableKLDivergence",
    "StablePoisson",
    "StableSigmoidCrossEntropy",
    "StableSigmoidFocalCrossEntropy",
    "StableSoftmaxCrossEntropy",
    "StableSoftmaxFocalCrossEntropy",
    "StableSparseSoftmaxCrossEntropy",
    "StableTversky",
    "TripletHardLoss",
    "TripletSemiHardLoss",
]
