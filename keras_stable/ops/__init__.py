"""The numerics of keras_stable: pure functions over `keras.ops`.

Every function computes the exact value wherever it is defined, returns a
finite gradient everywhere (0 at singular points), computes float16/bfloat16
in float32, and compiles under XLA. Nothing here imports the layers, losses
or metrics.

`__all__` is the public API. Internal shared API (no underscore, not in
`__all__`, not for users; the classes of `keras_stable.losses` import it):
the unreduced terms behind the batch-level losses, for the classes'
reductions - `ops.triplet.semihard_triplet_terms`,
`ops.triplet.hard_triplet_terms`, `ops.contrastive.info_nce_terms` - and,
for the ops of this package, `ops.probabilities` (the reading of
`from_logits=False`), `ops.logarithms` (`safe_log`, `saturated_log`) and
`ops.softmax.shifted_logits`. The fused kernels are the private package
`ops._kernels`. Argument checks shared with the classes live in
`keras_stable.common.checks`.
"""

from keras_stable.ops.attention import dot_product_attention
from keras_stable.ops.contrastive import contrastive_loss
from keras_stable.ops.contrastive import info_nce_loss
from keras_stable.ops.cross_entropy import sigmoid_cross_entropy
from keras_stable.ops.cross_entropy import softmax_cross_entropy
from keras_stable.ops.cross_entropy import sparse_softmax_cross_entropy
from keras_stable.ops.ctc import ctc_loss
from keras_stable.ops.densities import gaussian_kl
from keras_stable.ops.densities import mixture_nll
from keras_stable.ops.distance import masked_task_distance
from keras_stable.ops.divergence import kl_divergence
from keras_stable.ops.division import safe_divide
from keras_stable.ops.entropy import entropy
from keras_stable.ops.focal import sigmoid_focal_cross_entropy
from keras_stable.ops.focal import softmax_focal_cross_entropy
from keras_stable.ops.geometry import pairwise_distance
from keras_stable.ops.geometry import safe_std
from keras_stable.ops.linear_cross_entropy import linear_softmax_cross_entropy
from keras_stable.ops.linear_entropy import linear_softmax_entropy
from keras_stable.ops.log_space import log1mexp
from keras_stable.ops.log_space import log_ndtr
from keras_stable.ops.log_space import logaddexp
from keras_stable.ops.log_space import logsubexp
from keras_stable.ops.log_space import softplus_inverse
from keras_stable.ops.log_space import xlogy
from keras_stable.ops.norms import cosine_similarity
from keras_stable.ops.norms import l2_normalize
from keras_stable.ops.norms import safe_norm
from keras_stable.ops.norms import safe_sqrt
from keras_stable.ops.overlap import dice_loss
from keras_stable.ops.overlap import tversky_loss
from keras_stable.ops.regression import gaussian_nll
from keras_stable.ops.regression import masked_absolute_error
from keras_stable.ops.regression import masked_huber
from keras_stable.ops.regression import masked_squared_error
from keras_stable.ops.regression import poisson_nll
from keras_stable.ops.softmax import log_softmax
from keras_stable.ops.softmax import logsumexp
from keras_stable.ops.softmax import softmax
from keras_stable.ops.sparsemax import sparsemax
from keras_stable.ops.triplet import triplet_hard_loss
from keras_stable.ops.triplet import triplet_semihard_loss

__all__ = [
    "contrastive_loss",
    "cosine_similarity",
    "ctc_loss",
    "dice_loss",
    "dot_product_attention",
    "entropy",
    "gaussian_kl",
    "gaussian_nll",
    "info_nce_loss",
    "kl_divergence",
    "l2_normalize",
    "linear_softmax_cross_entropy",
    "linear_softmax_entropy",
    "log1mexp",
    "log_ndtr",
    "log_softmax",
    "logaddexp",
    "logsubexp",
    "logsumexp",
    "masked_absolute_error",
    "masked_huber",
    "masked_squared_error",
    "masked_task_distance",
    "mixture_nll",
    "pairwise_distance",
    "poisson_nll",
    "safe_divide",
    "safe_norm",
    "safe_sqrt",
    "safe_std",
    "sigmoid_cross_entropy",
    "sigmoid_focal_cross_entropy",
    "softmax",
    "softmax_cross_entropy",
    "softmax_focal_cross_entropy",
    "softplus_inverse",
    "sparse_softmax_cross_entropy",
    "sparsemax",
    "triplet_hard_loss",
    "triplet_semihard_loss",
    "tversky_loss",
    "xlogy",
]
