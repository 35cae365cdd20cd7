"""TF Addons and framework formulas, transcribed in float64 NumPy (TF Addons is
not installed), and the hand-written left sides they are compared with."""

import math

import keras
import numpy as np
from keras import ops as kops

from tests.migration.page import F64
from tests.migration.page import _rng
from tests.migration.page import _sigmoid64

# tensorflow_addons/losses/{metric_learning,triplet,contrastive,focal_loss}.py


def tfa_pairwise_distance(feature, squared=False):
    f = np.asarray(feature, F64)
    sq = np.sum(f**2, 1, keepdims=True) + np.sum(f**2, 1, keepdims=True).T - 2.0 * f @ f.T
    sq = np.maximum(sq, 0.0)
    error_mask = sq <= 0.0
    dist = sq if squared else np.sqrt(sq + error_mask * 1e-16)
    return dist * ~error_mask * (1.0 - np.eye(len(f)))


def keras_3_15_tversky(y_true, y_pred, alpha=0.5, beta=0.5):
    """Keras 3.15.1's `Tversky(alpha, beta)` (keras/src/losses/losses.py,
    `axis=None`): its `fp` is `sum((1 - y_pred) * y_true)`, the false
    negatives, and is weighted by `alpha` (Keras 3.16 swapped them back)."""
    t, p = np.asarray(y_true, F64), np.asarray(y_pred, F64)
    intersection = np.sum(t * p)
    fn, fp = np.sum((1 - p) * t), np.sum(p * (1 - t))
    return 1.0 - intersection / (intersection + fn * alpha + fp * beta + 1e-7)


def tf_l2_normalize(x, axis=None, epsilon=1e-12):
    """`tf.math.l2_normalize` (`axis=None`: the whole tensor)."""
    x = np.asarray(x, F64)
    return x / np.sqrt(np.maximum(np.sum(x**2, axis=axis, keepdims=True), epsilon))


def _tfa_distances(embeddings, distance_metric):
    if distance_metric == "angular":
        f = tf_l2_normalize(embeddings, axis=1)
        return np.maximum(1.0 - f @ f.T, 0.0)
    return tfa_pairwise_distance(embeddings, squared=distance_metric == "squared-L2")


def _masked_maximum(data, mask):
    minimums = data.min(1, keepdims=True)
    return ((data - minimums) * mask).max(1, keepdims=True) + minimums


def _masked_minimum(data, mask):
    maximums = data.max(1, keepdims=True)
    return ((data - maximums) * mask).min(1, keepdims=True) + maximums


def tfa_triplet_semihard_loss(y_true, y_pred, margin=1.0, distance_metric="L2"):
    pdist = _tfa_distances(y_pred, distance_metric)
    labels = np.asarray(y_true).reshape(-1, 1)
    adjacency = labels == labels.T
    adjacency_not = ~adjacency
    n = labels.size
    pdist_tile = np.tile(pdist, (n, 1))
    mask = np.tile(adjacency_not, (n, 1)) & (pdist_tile > pdist.T.reshape(-1, 1))
    mask_final = (mask.sum(1, keepdims=True) > 0).reshape(n, n).T
    negatives_outside = _masked_minimum(pdist_tile, mask).reshape(n, n).T
    negatives_inside = np.tile(_masked_maximum(pdist, adjacency_not), (1, n))
    semi_hard_negatives = np.where(mask_final, negatives_outside, negatives_inside)
    loss_mat = margin + pdist - semi_hard_negatives
    mask_positives = adjacency - np.eye(n)
    return np.sum(np.maximum(loss_mat * mask_positives, 0.0)) / np.sum(mask_positives)


def tfa_triplet_hard_loss(y_true, y_pred, margin=1.0, soft=False, distance_metric="L2"):
    pdist = _tfa_distances(y_pred, distance_metric)
    labels = np.asarray(y_true).reshape(-1, 1)
    adjacency = labels == labels.T
    hard_negatives = _masked_minimum(pdist, ~adjacency)
    hard_positives = _masked_maximum(pdist, adjacency - np.eye(labels.size))
    if soft:
        return np.mean(np.log1p(np.exp(hard_positives - hard_negatives)))
    return np.mean(np.maximum(hard_positives - hard_negatives + margin, 0.0))


def tfa_sigmoid_focal_crossentropy(y_true, y_pred, alpha=0.25, gamma=2.0, from_logits=False):
    y, x = np.asarray(y_true, F64), np.asarray(y_pred, F64)
    if from_logits:
        ce = np.maximum(x, 0) - x * y + np.log1p(np.exp(-np.abs(x)))
        p = _sigmoid64(x)
    else:
        # tf.keras.backend.binary_crossentropy: clip, then `log(p + eps)`.
        eps = 1e-7
        p = np.clip(x, eps, 1 - eps)
        ce = -(y * np.log(p + eps) + (1 - y) * np.log(1 - p + eps))
    p_t = y * p + (1 - y) * (1 - p)
    alpha_factor = y * alpha + (1 - y) * (1 - alpha) if alpha else 1.0
    modulating_factor = (1.0 - p_t) ** gamma if gamma else 1.0
    return np.sum(alpha_factor * modulating_factor * ce, axis=-1)


def _stirling(targets):
    """The `full` term of `tf.nn.log_poisson_loss` and torch's
    `poisson_nll_loss`: Stirling's approximation of `log(y!)`, 0 for y <= 1."""
    y = np.asarray(targets, F64)
    with np.errstate(divide="ignore", invalid="ignore"):
        approx = y * np.log(y) - y + 0.5 * np.log(2 * np.pi * y)
    return np.where(y <= 1, 0.0, approx)


def _metric_learning_batch(seed=0, labels=(0, 0, 1, 1, 1, 2, 2, 0)):
    """l2-normalised embeddings (as TF Addons expects) and integer labels."""
    e = _rng(seed).normal(size=(len(labels), 4))
    return np.asarray(labels, "int32"), (e / np.linalg.norm(e, axis=1, keepdims=True)).astype(
        "float32"
    )


def _batch_hard_on_cdist(labels, embeddings, margin):
    """A hand-written batch-hard triplet loss on `keras.ops.cdist`."""
    d = kops.cdist(embeddings, embeddings)
    same = labels[:, None] == labels[None, :]
    positive = np.logical_and(same, ~np.eye(len(labels), dtype=bool))
    hardest_positive = kops.max(kops.where(positive, d, -np.inf), axis=1)
    hardest_negative = kops.min(kops.where(same, np.inf, d), axis=1)
    return kops.mean(kops.relu(hardest_positive - hardest_negative + margin))


def _nt_xent(views, temperature):
    """The hand-written NT-Xent (SimCLR): `logits - 1e9 * eye` removes self-pairs."""
    n = views.shape[1]
    z = kops.normalize(kops.concatenate([views[0], views[1]], axis=0), axis=-1)
    logits = kops.matmul(z, kops.transpose(z)) / temperature - 1e9 * kops.eye(2 * n)
    partners = np.concatenate([np.arange(n) + n, np.arange(n)])
    return kops.mean(
        keras.losses.sparse_categorical_crossentropy(partners, logits, from_logits=True)
    )


# keras-io examples/generative/vae.py (Keras 3): the `Sampling` layer and the
# KL term of `VAE.train_step`, as written there.


class KerasIOSampling(keras.layers.Layer):
    """Uses (z_mean, z_log_var) to sample z, the vector encoding a digit."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seed_generator = keras.random.SeedGenerator(1337)

    def call(self, inputs):
        z_mean, z_log_var = inputs
        batch = kops.shape(z_mean)[0]
        dim = kops.shape(z_mean)[1]
        epsilon = keras.random.normal(shape=(batch, dim), seed=self.seed_generator)
        return z_mean + kops.exp(0.5 * z_log_var) * epsilon


def keras_io_kl(z_mean, z_log_var):
    """The per-example KL of the keras-io VAE (before its batch mean)."""
    kl_loss = -0.5 * (1 + z_log_var - kops.square(z_mean) - kops.exp(z_log_var))
    return kops.sum(kl_loss, axis=1)


def naive_mixture_nll(y, logits, mean, log_scale):
    """`-log(sum(pi * N(y)))` as usually hand-written for an MDN: densities
    formed, multiplied over the data axis, summed over the components."""
    pi = kops.softmax(logits, axis=-1)
    sigma = kops.exp(log_scale)
    z = (kops.expand_dims(y, -2) - mean) / sigma
    density = kops.prod(kops.exp(-0.5 * z * z) / (sigma * math.sqrt(2 * math.pi)), axis=-1)
    return -kops.log(kops.sum(pi * density, axis=-1))
