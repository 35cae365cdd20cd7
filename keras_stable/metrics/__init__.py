"""Stateful metrics, exact across batches and replicas, NaN-free.

Their state is sums and counts (float32, sum-aggregated), so the result over
several batches equals the result over their concatenation.
"""

from keras_stable.metrics.ctc_infeasible_labels import CTCInfeasibleLabels
from keras_stable.metrics.masked_huber import MaskedHuber
from keras_stable.metrics.masked_mean_absolute_error import MaskedMeanAbsoluteError
from keras_stable.metrics.masked_mean_squared_error import MaskedMeanSquaredError
from keras_stable.metrics.masked_multi_task_distance import MaskedMultiTaskDistance
from keras_stable.metrics.stable_binary_cross_entropy import StableBinaryCrossEntropy
from keras_stable.metrics.stable_cross_entropy import StableCrossEntropy
from keras_stable.metrics.stable_pearson_correlation import StablePearsonCorrelation
from keras_stable.metrics.stable_r2_score import StableR2Score
from keras_stable.metrics.stable_sparse_cross_entropy import StableSparseCrossEntropy

__all__ = [
    "CTCInfeasibleLabels",
    "MaskedHuber",
    "MaskedMeanAbsoluteError",
    "MaskedMeanSquaredError",
    "MaskedMultiTaskDistance",
    "StableBinaryCrossEntropy",
    "StableCrossEntropy",
    "StablePearsonCorrelation",
    "StableR2Score",
    "StableSparseCrossEntropy",
]
