"""The benchmark rows of the catalogue beyond the two bug reports: focal,
KL, Poisson, Gaussian and masked regression losses (issue 12), and the
geometry and metric-learning ops and losses (issue 13).

Each row is a keras_stable op or class against its Keras counterpart, or,
where Keras has none, against the formula users write by hand: TF Addons'
metric-learning losses (never ported to Keras 3) are transcribed below in
`keras.ops`, line by line from their published algorithm, as a user
porting them would write them.
"""

from case import Case
from case import K
from case import stable_class
from inputs import ELEMENTWISE_SIZES
from inputs import EMBEDDING_SIZES
from inputs import GAUSSIAN_SIZES
from inputs import NORM_SIZES
from inputs import PAIRWISE_SIZES
from inputs import SOFTMAX_SIZES
from inputs import build_binary_ce
from inputs import build_counts
from inputs import build_dense_ce
from inputs import build_embeddings
from inputs import build_gaussian
from inputs import build_pair_distances
from inputs import build_regression
from inputs import build_soft_ce
from inputs import build_x


def catalogue_cases():
    """Focal, KL, Poisson, Gaussian NLL and the masked regression losses."""
    return [
        Case(
            "sigmoid_focal_cross_entropy",
            "op",
            "cross_entropy",
            ELEMENTWISE_SIZES,
            build_binary_ce,
            lambda m: lambda y, x: m.ks.ops.sigmoid_focal_cross_entropy(y, x),
            {
                "keras.losses.binary_focal_crossentropy": lambda m: (
                    lambda y, x: K(m).losses.binary_focal_crossentropy(y, x, from_logits=True)
                ),
            },
        ),
        Case(
            "losses.StableSigmoidFocalCrossEntropy",
            "loss",
            "cross_entropy",
            ELEMENTWISE_SIZES,
            build_binary_ce,
            stable_class("losses", "StableSigmoidFocalCrossEntropy"),
            {
                "keras.losses.BinaryFocalCrossentropy": lambda m: K(
                    m
                ).losses.BinaryFocalCrossentropy(from_logits=True),
            },
        ),
        Case(
            "softmax_focal_cross_entropy",
            "op",
            "cross_entropy",
            SOFTMAX_SIZES,
            build_dense_ce,
            lambda m: lambda y, x: m.ks.ops.softmax_focal_cross_entropy(y, x, alpha=0.25),
            {
                "keras.losses.categorical_focal_crossentropy": lambda m: (
                    lambda y, x: K(m).losses.categorical_focal_crossentropy(y, x, from_logits=True)
                ),
            },
        ),
        Case(
            "losses.StableSoftmaxFocalCrossEntropy",
            "loss",
            "cross_entropy",
            SOFTMAX_SIZES,
            build_dense_ce,
            stable_class("losses", "StableSoftmaxFocalCrossEntropy", alpha=0.25),
            {
                "keras.losses.CategoricalFocalCrossentropy": lambda m: K(
                    m
                ).losses.CategoricalFocalCrossentropy(from_logits=True),
            },
        ),
        Case(
            "kl_divergence",
            "op",
            "cross_entropy",
            SOFTMAX_SIZES,
            build_soft_ce,
            lambda m: lambda y, x: m.ks.ops.kl_divergence(y, x),
            {
                "keras.losses.kl_divergence(softmax)": lambda m: (
                    lambda y, x: K(m).losses.kl_divergence(y, K(m).ops.softmax(x))
                ),
            },
        ),
        Case(
            "losses.StableKLDivergence",
            "loss",
            "cross_entropy",
            SOFTMAX_SIZES,
            build_soft_ce,
            stable_class("losses", "StableKLDivergence"),
            {
                "keras.losses.KLDivergence(softmax)": lambda m: (
                    lambda y, x: K(m).losses.KLDivergence()(y, K(m).ops.softmax(x))
                ),
            },
        ),
        Case(
            "losses.StablePoisson",
            "loss",
            "regression",
            ELEMENTWISE_SIZES,
            build_counts,
            stable_class("losses", "StablePoisson"),
            {
                "keras.losses.Poisson(exp)": lambda m: (
                    lambda y, z: K(m).losses.Poisson()(y, K(m).ops.exp(z))
                ),
            },
        ),
        Case(
            "losses.StableGaussianNLL",
            "loss",
            "regression",
            GAUSSIAN_SIZES,
            build_gaussian,
            stable_class("losses", "StableGaussianNLL"),
            {"hand-written Gaussian NLL": _gaussian_nll_by_hand},
        ),
        Case(
            "losses.MaskedMeanSquaredError",
            "loss",
            "regression",
            ELEMENTWISE_SIZES,
            build_regression,
            stable_class("losses", "MaskedMeanSquaredError"),
            {"keras.losses.MeanSquaredError": lambda m: K(m).losses.MeanSquaredError()},
        ),
        Case(
            "losses.MaskedMeanAbsoluteError",
            "loss",
            "regression",
            ELEMENTWISE_SIZES,
            build_regression,
            stable_class("losses", "MaskedMeanAbsoluteError"),
            {"keras.losses.MeanAbsoluteError": lambda m: K(m).losses.MeanAbsoluteError()},
        ),
        Case(
            "losses.MaskedHuber",
            "loss",
            "regression",
            ELEMENTWISE_SIZES,
            build_regression,
            stable_class("losses", "MaskedHuber"),
            {"keras.losses.Huber": lambda m: K(m).losses.Huber()},
        ),
    ]


def _gaussian_nll_by_hand(m):
    """`mean(0.5 * (log_var + (y - mu)**2 * exp(-log_var)))`, as written in
    heteroscedastic-regression tutorials."""
    o = K(m).ops

    def loss(y, head):
        mean, log_var = head[:, :1], head[:, 1:]
        return o.mean(0.5 * (log_var + o.square(y - mean) * o.exp(-log_var)))

    return loss


def geometry_cases():
    """Pairwise distances, std, the cosine loss and metric learning."""
    return [
        Case(
            "pairwise_distance",
            "op",
            "geometry",
            PAIRWISE_SIZES,
            build_x,
            lambda m: lambda x: m.ks.ops.pairwise_distance(x),
            {
                "keras.ops.cdist": lambda m: lambda x: K(m).ops.cdist(x, x),
                "TF Addons pairwise_distance": lambda m: lambda x: _tfa_pairwise_distance(m, x),
            },
        ),
        Case(
            "safe_std",
            "op",
            "geometry",
            NORM_SIZES,
            build_x,
            lambda m: lambda x: m.ks.ops.safe_std(x, axis=-1),
            {"keras.ops.std": lambda m: lambda x: K(m).ops.std(x, axis=-1)},
        ),
        Case(
            "losses.StableCosineSimilarity",
            "loss",
            "geometry",
            NORM_SIZES,
            build_regression,
            stable_class("losses", "StableCosineSimilarity"),
            {"keras.losses.CosineSimilarity": lambda m: K(m).losses.CosineSimilarity()},
        ),
        Case(
            "losses.TripletSemiHardLoss",
            "loss",
            "geometry",
            EMBEDDING_SIZES,
            build_embeddings,
            stable_class("losses", "TripletSemiHardLoss"),
            {"TF Addons triplet_semihard_loss": lambda m: lambda y, e: _tfa_semihard(m, y, e)},
        ),
        Case(
            "losses.TripletHardLoss",
            "loss",
            "geometry",
            EMBEDDING_SIZES,
            build_embeddings,
            stable_class("losses", "TripletHardLoss"),
            {"TF Addons triplet_hard_loss": lambda m: lambda y, e: _tfa_hard(m, y, e)},
        ),
        Case(
            "losses.ContrastiveLoss",
            "loss",
            "geometry",
            {size: (shape[0] * shape[1],) for size, shape in ELEMENTWISE_SIZES.items()},
            build_pair_distances,
            stable_class("losses", "ContrastiveLoss"),
            {"TF Addons contrastive_loss": lambda m: lambda y, d: _tfa_contrastive(m, y, d)},
        ),
    ]


# --- TF Addons' algorithms in keras.ops (tensorflow_addons/losses/) ----------


def _tfa_pairwise_distance(m, feature, squared=False):
    o = K(m).ops
    sq = o.sum(o.square(feature), axis=1, keepdims=True)
    d2 = o.maximum(sq + o.transpose(sq) - 2.0 * o.matmul(feature, o.transpose(feature)), 0.0)
    error_mask = o.less_equal(d2, 0.0)
    d = d2 if squared else o.sqrt(d2 + o.cast(error_mask, d2.dtype) * 1e-16)
    d = d * o.cast(o.logical_not(error_mask), d.dtype)
    return d * (1.0 - o.eye(o.shape(feature)[0], dtype=d.dtype))


def _masked_maximum(o, data, mask):
    axis_minimums = o.min(data, axis=1, keepdims=True)
    return o.max((data - axis_minimums) * mask, axis=1, keepdims=True) + axis_minimums


def _masked_minimum(o, data, mask):
    axis_maximums = o.max(data, axis=1, keepdims=True)
    return o.min((data - axis_maximums) * mask, axis=1, keepdims=True) + axis_maximums


def _tfa_distances_and_adjacency(m, labels, embeddings):
    """The common start of TF Addons' triplet losses: `(ops, batch, pdist,
    adjacency, mask_positives)`."""
    o = K(m).ops
    embeddings = o.cast(embeddings, "float32")
    labels = o.reshape(labels, (-1, 1))
    b = o.shape(embeddings)[0]
    pdist = _tfa_pairwise_distance(m, embeddings)
    adjacency = o.equal(labels, o.transpose(labels))
    mask_positives = o.cast(adjacency, "float32") - o.eye(b, dtype="float32")
    return o, b, pdist, adjacency, mask_positives


def _tfa_semihard(m, labels, embeddings, margin=1.0):
    o, b, pdist, adjacency, mask_positives = _tfa_distances_and_adjacency(m, labels, embeddings)
    adjacency_not = o.logical_not(adjacency)
    pdist_tile = o.tile(pdist, [b, 1])
    mask = o.logical_and(
        o.tile(adjacency_not, [b, 1]),
        o.greater(pdist_tile, o.reshape(o.transpose(pdist), (-1, 1))),
    )
    mask_f = o.cast(mask, "float32")
    mask_final = o.transpose(
        o.reshape(o.greater(o.sum(mask_f, axis=1, keepdims=True), 0.0), (b, b))
    )
    negatives_outside = o.transpose(o.reshape(_masked_minimum(o, pdist_tile, mask_f), (b, b)))
    negatives_inside = o.tile(_masked_maximum(o, pdist, o.cast(adjacency_not, "float32")), [1, b])
    semi_hard = o.where(mask_final, negatives_outside, negatives_inside)
    loss_mat = margin + pdist - semi_hard
    num_positives = o.sum(mask_positives)
    return o.sum(o.maximum(loss_mat * mask_positives, 0.0)) / num_positives


def _tfa_hard(m, labels, embeddings, margin=1.0):
    o, _, pdist, adjacency, mask_positives = _tfa_distances_and_adjacency(m, labels, embeddings)
    hard_negatives = _masked_minimum(o, pdist, o.cast(o.logical_not(adjacency), "float32"))
    hard_positives = _masked_maximum(o, pdist, mask_positives)
    return o.mean(o.maximum(hard_positives - hard_negatives + margin, 0.0))


def _tfa_contrastive(m, labels, distances, margin=1.0):
    o = K(m).ops
    d = o.cast(distances, "float32")
    y = o.cast(labels, "float32")
    per_pair = y * o.square(d) + (1.0 - y) * o.square(o.maximum(margin - d, 0.0))
    return o.mean(per_pair)
