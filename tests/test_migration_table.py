"""Every row of docs/migration.md gives the left side's number.

The page says that each replacement "gives the same value wherever the left
one is finite". This module parses the tables "Losses", "Metrics", "Layers"
and "Functions" of the page (not "Deliberate differences from Keras", whose
rows differ on purpose) and runs each row: small deterministic inputs of
ordinary magnitudes, where the left side is finite and well conditioned; the
left side as the cell writes it (a Keras built-in on the current backend; TF
Addons, which is not installed, transcribed from its source in float64
NumPy; `tf.*`, `jnp.*` and `torch.*` in float64 NumPy, and natively too when
they are the backend; a hand-written formula as written); the right side
exactly as the right cell says. The two must agree to float32 tolerance.

`CHECKS` maps each row's left cell to its checks: a row without a check
fails, and so does a check whose row is gone. A check marked `mismatch`
is a form of the row that does not give the left side's number: a strict
xfail naming the difference (it fails loudly once the page or the library
is fixed). `documented` marks the ones the "Deliberate differences" table
already explains.
"""

import os
import tempfile
from pathlib import Path

import keras
import numpy as np
import pytest
from keras import ops as kops

import keras_stable as ks
from tests import reference as ref
from tests.backend_utils import BACKEND
from tests.backend_utils import assert_close
from tests.backend_utils import to_numpy

DOC = Path(__file__).resolve().parents[1] / "docs" / "migration.md"
SECTIONS = ("Losses", "Metrics", "Layers", "Functions")
F64 = "float64"


# --- the page --------------------------------------------------------------


def _cells(line):
    """The cells of a Markdown table row; a `|` inside backticks is text."""
    cells, cell, code = [], "", False
    for char in line.strip().strip("|"):
        if char == "`":
            code = not code
        if char == "|" and not code:
            cells.append(cell.strip())
            cell = ""
        else:
            cell += char
    return cells + [cell.strip()]


def migration_rows():
    """`(section, left cell)` of every body row of the tables in SECTIONS."""
    rows, section, table = [], None, []
    for line in DOC.read_text(encoding="utf-8").splitlines() + [""]:
        if line.startswith("|"):
            table.append(line)
            continue
        if table and section in SECTIONS:
            # The first two lines of a table are its header and the `|---|` rule.
            rows += [(section, _cells(row)[0]) for row in table[2:]]
        table = []
        if line.startswith("## "):
            section = line[3:].strip()
    return rows


def mismatch(reason, documented=False):
    """Marks a check whose right side does not give the left side's number."""
    prefix = "documented deliberate difference: " if documented else "MISMATCH: "

    def mark(check):
        check.mismatch = prefix + reason
        return check

    return mark


# --- comparisons -----------------------------------------------------------


def _np(x):
    if isinstance(x, np.ndarray | np.generic | float | int):
        return np.asarray(x, F64)
    return to_numpy(x)


def agree(right, left, what="", tol=None):
    """`right` gives `left`'s number: same shape, float32 tolerance."""
    right, left = _np(right), _np(left)
    assert np.isfinite(left).all(), f"{what}: the left side is not finite here"
    assert right.shape == left.shape, f"{what}: shape {right.shape} != left's {left.shape}"
    assert_close(right, left, "float32", what=what, tol=tol)


def agree_where_finite(right, left, what=""):
    """`right` gives `left`'s number wherever `left` is finite."""
    right, left = _np(right), _np(left)
    assert right.shape == left.shape, f"{what}: shape {right.shape} != left's {left.shape}"
    finite = np.isfinite(left)
    assert finite.any() and not finite.all(), f"{what}: expected some non-finite left entries"
    assert_close(right[finite], left[finite], "float32", what=what)


def _framework(name):
    """`tensorflow`, `jax.numpy` or `torch` when it is the backend, else None:
    a left side written in that framework also runs natively there."""
    if name == "tf" and BACKEND == "tensorflow":
        import tensorflow

        return tensorflow
    if name == "jnp" and BACKEND == "jax":
        import jax.numpy

        return jax.numpy
    if name == "torch" and BACKEND == "torch":
        import torch

        return torch
    return None


def compiled(fn):
    """`fn` taking its array arguments as tensors: under `jax.jit` on JAX,
    eagerly elsewhere. Eager JAX compiles every op it dispatches (seconds for
    a CTC or an attention layer); one compilation per call keeps this file
    fast. Same computation, same number."""
    if BACKEND == "jax":
        import jax

        return jax.jit(fn)

    def eager(*args):
        return fn(*[None if a is None else kops.convert_to_tensor(a) for a in args])

    return eager


def tensors(*arrays):
    """Inputs of a hand-written formula as tensors (torch cannot multiply a
    NumPy array by a tensor)."""
    return [kops.convert_to_tensor(a) for a in arrays]


def _torch_tensor(x):
    import torch

    return torch.as_tensor(np.asarray(x, "float32"))


def _rng(seed):
    return np.random.default_rng(seed)


def _normal(seed, shape, scale=1.0):
    return (_rng(seed).normal(size=shape) * scale).astype("float32")


def _onehot(seed, batch, classes):
    return np.eye(classes, dtype="float32")[_rng(seed).integers(0, classes, batch)]


def _soft_labels(seed, shape):
    """Strictly positive distributions (no `0 log 0`, no `1e-7` clip)."""
    p = _rng(seed).uniform(0.2, 1.0, shape)
    return (p / p.sum(-1, keepdims=True)).astype("float32")


def _sigmoid64(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, F64)))


def _metric(metric, batches):
    metric.reset_state()
    for batch in batches:
        metric.update_state(*batch)
    return metric.result()


def _regression(seed, shape=(6, 4)):
    return _normal(seed, shape), _normal(seed + 1, shape)


def _with_nan_rows(y_true, rows=(1, 4), cols=(0, 2)):
    """Missing labels: the left side is NaN on these examples, finite elsewhere."""
    y_true = y_true.copy()
    y_true[list(rows), list(cols)] = np.nan
    return y_true


# --- TF Addons and framework formulas, transcribed in float64 NumPy ---------
# tensorflow_addons/losses/{metric_learning,triplet,contrastive,focal_loss}.py


def tfa_pairwise_distance(feature, squared=False):
    f = np.asarray(feature, F64)
    sq = np.sum(f**2, 1, keepdims=True) + np.sum(f**2, 1, keepdims=True).T - 2.0 * f @ f.T
    sq = np.maximum(sq, 0.0)
    error_mask = sq <= 0.0
    dist = sq if squared else np.sqrt(sq + error_mask * 1e-16)
    return dist * ~error_mask * (1.0 - np.eye(len(f)))


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


# --- Losses ----------------------------------------------------------------


def loss_task_distance_squared():
    y_true, y_pred = _regression(0)
    right = ks.losses.MaskedMultiTaskDistance(per="task", squared=True)(y_true, y_pred)
    diff = np.asarray(y_true, F64) - y_pred
    agree(right, np.mean(np.sqrt(np.sum(diff**2, axis=0)) ** 2), "numpy tf.norm")
    if tf := _framework("tf"):
        agree(right, tf.reduce_mean(tf.norm(y_true - y_pred, axis=0) ** 2), "tf.norm")


def loss_task_distance():
    y_true, y_pred = _regression(2)
    right = ks.losses.MaskedMultiTaskDistance(per="task")(y_true, y_pred)
    agree(right, kops.mean(kops.norm(y_true - y_pred, axis=0)))


def loss_sample_distance():
    y_true, y_pred = _regression(4)
    missing = _with_nan_rows(y_true)

    def both(t, p, t_missing):
        return (
            ks.losses.MaskedMultiTaskDistance()(t, p),
            # The per-sample norms, reduced as a Keras loss reduces them.
            kops.mean(kops.norm(t - p, axis=-1)),
            ks.losses.MaskedMultiTaskDistance(reduction="none")(t_missing, p),
            kops.norm(t_missing - p, axis=-1),
        )

    right, left, right_missing, left_missing = compiled(both)(y_true, y_pred, missing)
    agree(right, left)
    agree_where_finite(right_missing, left_missing, "per sample, NaN labels")


def loss_categorical_from_logits():
    logits, labels = _normal(0, (6, 4), 2.0), _onehot(1, 6, 4)
    weights = _rng(2).uniform(0.5, 2.0, 6).astype("float32")
    for sw in (None, weights):
        agree(
            ks.losses.StableSoftmaxCrossEntropy()(labels, logits, sample_weight=sw),
            keras.losses.CategoricalCrossentropy(from_logits=True)(
                labels, logits, sample_weight=sw
            ),
        )


def loss_softmax_then_hand_written_ce():
    logits, labels = tensors(_normal(3, (6, 4), 2.0), _onehot(4, 6, 4))
    probs = kops.softmax(logits)
    # The per-example sum over the classes, averaged over the batch (a Keras loss).
    left = kops.mean(-kops.sum(labels * kops.log(probs), axis=-1))
    agree(ks.losses.StableSoftmaxCrossEntropy()(labels, logits), left)


def loss_categorical_on_probabilities():
    probs, labels = ref.softmax(_normal(5, (6, 4))).astype("float32"), _onehot(6, 6, 4)
    agree(
        ks.losses.StableSoftmaxCrossEntropy(from_logits=False)(labels, probs),
        keras.losses.CategoricalCrossentropy()(labels, probs),
    )


def loss_sparse_ignore_class():
    logits = _normal(7, (8, 4), 2.0)
    for k in (-1, 2):
        labels = _rng(8).integers(0, 4, 8)
        labels[[1, 5]] = k
        agree(
            compiled(ks.losses.StableSparseSoftmaxCrossEntropy(ignore_class=k))(labels, logits),
            compiled(keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=k))(
                labels, logits
            ),
            f"ignore_class={k}",
        )


def loss_binary():
    logits, labels = tensors(
        _normal(9, (6, 4), 2.0), _rng(10).integers(0, 2, (6, 4)).astype("float32")
    )
    right = ks.losses.StableSigmoidCrossEntropy()(labels, logits)
    agree(right, keras.losses.BinaryCrossentropy(from_logits=True)(labels, logits), "Keras")
    p = kops.sigmoid(logits)
    hand = -(labels * kops.log(p) + (1 - labels) * kops.log(1 - p))
    agree(right, kops.mean(hand), "sigmoid + hand-written BCE")


def _regression_row(keras_loss, stable_loss):
    y_true, y_pred = _regression(11)
    agree(stable_loss()(y_true, y_pred), keras_loss()(y_true, y_pred))
    missing = _with_nan_rows(y_true)
    agree_where_finite(
        stable_loss(reduction="none")(missing, y_pred),
        keras_loss(reduction="none")(missing, y_pred),
        "per example, NaN labels",
    )


def loss_mse():
    _regression_row(keras.losses.MeanSquaredError, ks.losses.MaskedMeanSquaredError)


def loss_mae():
    _regression_row(keras.losses.MeanAbsoluteError, ks.losses.MaskedMeanAbsoluteError)


def loss_huber():
    delta = 0.7  # errors fall on both sides of it
    _regression_row(
        lambda **kw: keras.losses.Huber(delta, **kw),
        lambda **kw: ks.losses.MaskedHuber(delta, **kw),
    )


def _counts(seed, shape=(6, 4)):
    return _rng(seed).poisson(1.5, shape).astype("float32")


def loss_poisson_log_link():
    log_rate, counts = _normal(12, (6, 4), 0.5), _counts(13)
    # Keras's `log(rate + 1e-7)` moves the value by ~1e-7 relative here.
    agree(
        ks.losses.StablePoisson()(counts, log_rate),
        keras.losses.Poisson()(counts, kops.exp(log_rate)),
    )


def loss_poisson_rates():
    z, counts = _normal(14, (6, 4)), _counts(15)
    for name, rate in (("softplus", kops.softplus(z)), ("relu", kops.relu(np.abs(z) + 0.2))):
        agree(
            ks.losses.StablePoisson(log_input=False)(counts, rate),
            keras.losses.Poisson()(counts, rate),
            name,
        )


def loss_gaussian_nll():
    y, mean, log_var = _normal(16, (6, 4)), _normal(17, (6, 4)), _normal(18, (6, 4), 0.5)
    head = np.stack([mean, log_var], axis=-1)  # a (mean, log_var) head per target
    y, mean, log_var = tensors(y, mean, log_var)
    hand = 0.5 * (log_var + (y - mean) ** 2 * kops.exp(-log_var))
    agree(ks.losses.StableGaussianNLL()(y, head), kops.mean(hand))


def _binary_batch(seed):
    logits = _normal(seed, (6, 4), 2.0)
    return _rng(seed + 1).integers(0, 2, (6, 4)).astype("float32"), logits


def loss_binary_focal_from_logits():
    labels, logits = _binary_batch(19)
    g = 1.5
    agree(
        ks.losses.StableSigmoidFocalCrossEntropy(gamma=g)(labels, logits),
        keras.losses.BinaryFocalCrossentropy(from_logits=True, gamma=g)(labels, logits),
    )


def loss_binary_focal_balanced_probabilities():
    labels, logits = _binary_batch(21)
    probs = _sigmoid64(logits / 2).astype("float32")  # in (0.1, 0.9): no clip
    a = 0.3
    agree(
        ks.losses.StableSigmoidFocalCrossEntropy(from_logits=False, alpha=a)(labels, probs),
        keras.losses.BinaryFocalCrossentropy(apply_class_balancing=True, alpha=a)(labels, probs),
    )


def loss_categorical_focal_from_logits():
    logits, labels = _normal(23, (6, 4), 2.0), _onehot(24, 6, 4)
    agree(
        ks.losses.StableSoftmaxFocalCrossEntropy(alpha=0.25)(labels, logits),
        keras.losses.CategoricalFocalCrossentropy(from_logits=True)(labels, logits),
    )


def loss_categorical_focal_probabilities():
    probs, labels = ref.softmax(_normal(25, (6, 4))).astype("float32"), _onehot(26, 6, 4)
    agree(
        ks.losses.StableSoftmaxFocalCrossEntropy(from_logits=False, alpha=0.25)(labels, probs),
        keras.losses.CategoricalFocalCrossentropy()(labels, probs),
    )


def loss_kl_divergence():
    logits, labels = _normal(27, (6, 4)), _soft_labels(28, (6, 4))
    probs = kops.softmax(logits)
    left = keras.losses.KLDivergence()(labels, probs)
    agree(ks.losses.StableKLDivergence()(labels, logits), left, "logits")
    agree(ks.losses.StableKLDivergence(from_logits=False)(labels, probs), left, "probabilities")


def loss_cosine_similarity():
    y_true, y_pred = _normal(29, (3, 4, 5)), _normal(30, (3, 4, 5))
    axes = (-1, 1, 0)
    pairs = compiled(
        lambda t, p: [
            (ks.losses.StableCosineSimilarity(a)(t, p), keras.losses.CosineSimilarity(a)(t, p))
            for a in axes
        ]
    )(y_true, y_pred)
    for axis, (right, left) in zip(axes, pairs):
        agree(right, left, f"axis={axis}")


def loss_triplet_semihard():
    labels, embeddings = _metric_learning_batch(31)
    metrics = ("L2", "squared-L2", "angular")
    rights = compiled(lambda y, e: [ks.losses.TripletSemiHardLoss(0.7, m)(y, e) for m in metrics])(
        labels, embeddings
    )
    for metric, right in zip(metrics, rights):
        agree(right, tfa_triplet_semihard_loss(labels, embeddings, 0.7, metric), metric)


def loss_triplet_hard():
    labels, embeddings = _metric_learning_batch(32)
    cases = ((False, "L2"), (True, "squared-L2"), (False, "angular"))

    def both(y, e):
        rights = [ks.losses.TripletHardLoss(0.7, soft, m)(y, e) for soft, m in cases]
        return rights, _batch_hard_on_cdist(labels, e, 0.7)

    rights, on_cdist = compiled(both)(labels, embeddings)
    for (soft, metric), right in zip(cases, rights):
        left = tfa_triplet_hard_loss(labels, embeddings, 0.7, soft, metric)
        agree(right, left, f"soft={soft}, {metric}")
    agree(rights[0], on_cdist, "batch-hard on keras.ops.cdist")


@mismatch(
    "an anchor whose label occurs once in the batch: TF Addons counts it, "
    "with d(a, p) = 0 (its masked maximum falls back to the row minimum); "
    "keras_stable leaves it out of the mean",
    documented=True,
)
def loss_triplet_hard_anchor_without_positive():
    labels, embeddings = _metric_learning_batch(33, labels=(0, 0, 1, 1, 1, 2, 0, 1))
    agree(
        compiled(ks.losses.TripletHardLoss(0.7))(labels, embeddings),
        tfa_triplet_hard_loss(labels, embeddings, 0.7),
    )


def loss_contrastive():
    a, b = _normal(34, (8, 3)), _normal(35, (8, 3))
    labels = np.array([1, 0, 1, 0, 0, 1, 0, 1], "float32")
    margin = 2.5  # distances lie on both sides of it
    left = np.mean(
        ref.contrastive_loss(labels, np.linalg.norm(np.asarray(a, F64) - b, axis=1), margin)
    )
    right = ks.losses.ContrastiveLoss(margin)(labels, ks.layers.SafeNorm()(a - b))
    agree(right, left)


def _siamese_tutorial_loss(margin=1):
    """The keras-io siamese tutorial's `loss(margin)`, in `keras.ops` (it is
    written in `tf.math`): label 0 pulls a pair together."""

    def contrastive_loss(y_true, y_pred):
        square_pred = kops.square(y_pred)
        margin_square = kops.square(kops.maximum(margin - (y_pred), 0))
        return kops.mean((1 - y_true) * square_pred + (y_true) * margin_square)

    return contrastive_loss


def loss_siamese_tutorial():
    labels = np.array([0, 1, 0, 1, 1, 0, 1, 0], "float32")
    distances = _rng(66).uniform(0.1, 2.5, 8).astype("float32")
    margin = 1.5  # distances lie on both sides of it
    agree(
        ks.losses.ContrastiveLoss(margin, similar_label=0)(labels, distances),
        _siamese_tutorial_loss(margin)(*tensors(labels, distances)),
    )


def loss_info_nce():
    views, t = _normal(36, (2, 5, 4)), 0.2
    agree(
        compiled(lambda v: ks.losses.InfoNCELoss(t)(np.zeros(5), v))(views),
        compiled(lambda v: _nt_xent(v, t))(views),
    )


# Layers start from zeros and get random NumPy weights: on JAX a random
# initializer costs a compilation per weight shape.
ZEROS = {"kernel_initializer": "zeros"}


def _random_weights(layer, seed):
    return [_normal(seed + i, w.shape, 0.5) for i, w in enumerate(layer.get_weights())]


def _token_batch(seed, vocab=40, dim=8):
    hidden = _normal(seed, (2, 5, dim))
    return hidden, _rng(seed + 1).integers(0, vocab, (2, 5)).astype("int32")


def _head_loss(head, hidden, labels):
    """The loss `LinearSoftmaxHead` adds when called with the labels."""
    per_token = head(hidden, labels)
    (added,) = head.losses
    agree(kops.mean(per_token), added, "the added loss is the per-token mean")
    return added


def loss_linear_softmax_head():
    vocab, dim = 40, 8
    hidden, labels = _token_batch(37, vocab, dim)
    sparse_ce = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    # Dense(vocab): a head owning its kernel (and bias) takes Dense's weights;
    # the cell's `use_bias=False, tied_embedding=embed` is the tied form below.
    for use_bias in (True, False):
        dense = keras.layers.Dense(vocab, use_bias=use_bias, **ZEROS)
        dense.build(hidden.shape)
        dense.set_weights(_random_weights(dense, 60))
        left = sparse_ce(labels, dense(hidden))
        head = ks.layers.LinearSoftmaxHead(vocab, use_bias=use_bias, **ZEROS)
        head.build(hidden.shape)
        head.set_weights(dense.get_weights())
        agree(_head_loss(head, hidden, labels), left, f"Dense(vocab, use_bias={use_bias})")
    embed = keras.layers.ReversibleEmbedding(
        vocab, dim, logit_soft_cap=3.0, embeddings_initializer="zeros"
    )
    embed.build((None,))
    embed.set_weights(_random_weights(embed, 62))
    left = sparse_ce(labels, embed(hidden, reverse=True))
    # The head takes the tied ReversibleEmbedding's logit_soft_cap.
    head = ks.layers.LinearSoftmaxHead(vocab, use_bias=False, tied_embedding=embed)
    agree(_head_loss(head, hidden, labels), left, "ReversibleEmbedding, logit_soft_cap=3")
    embed = keras.layers.Embedding(vocab, dim, embeddings_initializer="zeros")
    embed.build((None,))
    embed.set_weights(_random_weights(embed, 64))
    left = sparse_ce(labels, kops.matmul(hidden, kops.transpose(embed.embeddings)))
    head = ks.layers.LinearSoftmaxHead(vocab, use_bias=False, tied_embedding=embed)
    agree(_head_loss(head, hidden, labels), left, "tied Embedding")


def loss_dot_product_attention():
    b, t, n, h = 2, 6, 2, 4
    q, k, v = (_normal(38 + i, (b, t, n, h)) for i in range(3))
    bias = _normal(41, (b, n, t, t))
    mask = _rng(42).uniform(size=(b, n, t, t)) > 0.3
    mask |= np.eye(t, dtype=bool)  # no query row loses every key (even causal)
    # Keras's torch backend refuses a bias and a mask together: one at a time there.
    cases = [(bias, None), (None, mask)] if BACKEND == "torch" else [(bias, mask)]
    for bias_, mask_ in cases:
        for is_causal in (False, True):

            def both(*a):
                left = kops.dot_product_attention(*a, 0.3, is_causal)
                rights = [
                    ks.ops.dot_product_attention(*a, 0.3, is_causal, chunk_size=chunk)
                    for chunk in (None, 4)
                ]
                return left, rights

            left, rights = compiled(both)(q, k, v, bias_, mask_)
            for chunk_size, right in zip((None, 4), rights):
                what = f"bias={bias_ is not None}, mask={mask_ is not None}, "
                agree(right, left, what + f"is_causal={is_causal}, chunk_size={chunk_size}")


def _attention_pair(keras_layer, stable_layer, query, value, attention_mask, value_mask):
    for layer in (keras_layer, stable_layer):
        layer.build(query.shape, value.shape)
    keras_layer.set_weights(_random_weights(keras_layer, 46))
    stable_layer.set_weights(keras_layer.get_weights())
    name = type(stable_layer).__name__

    def run(layer):
        def outputs(q, v, am, vm):
            out = layer(q, v, attention_mask=am, value_mask=vm, return_attention_scores=True)
            return out, layer(q, q, use_causal_mask=True)

        return compiled(outputs)(query, value, attention_mask, value_mask)

    ((out, scores), causal), ((keras_out, keras_scores), keras_causal) = map(
        run, (stable_layer, keras_layer)
    )
    agree(out, keras_out, f"{name}, attention_mask and value_mask")
    agree(scores, keras_scores, f"{name}, attention scores")
    agree(causal, keras_causal, f"{name}, use_causal_mask")


def loss_attention_layers():
    query, value = _normal(43, (2, 5, 8)), _normal(44, (2, 5, 8))
    attention_mask = _rng(45).uniform(size=(2, 5, 5)) > 0.4
    attention_mask |= np.eye(5, dtype=bool)  # no query row loses every key
    value_mask = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], bool)
    masks = (attention_mask, value_mask)
    _attention_pair(
        keras.layers.MultiHeadAttention(num_heads=2, key_dim=4, **ZEROS),
        ks.layers.StableMultiHeadAttention(num_heads=2, key_dim=4, **ZEROS),
        query,
        value,
        *masks,
    )
    _attention_pair(
        keras.layers.GroupQueryAttention(4, 4, 2, **ZEROS),
        ks.layers.StableGroupedQueryAttention(4, 4, 2, **ZEROS),
        query,
        value,
        *masks,
    )


def _fit_until_nan(callback):
    """Batches trained, epochs and `stop_training` of a fit whose 3rd batch is NaN."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.ones((8, 2), "float32")
    x[5] = np.nan
    batches = []
    count = keras.callbacks.LambdaCallback(on_train_batch_end=lambda i, logs: batches.append(i))
    fit = dict(batch_size=2, epochs=3, shuffle=False, verbose=0, callbacks=[callback, count])
    history = model.fit(x, np.zeros((8, 1), "float32"), **fit)
    return len(batches), len(history.history["loss"]), model.stop_training


def loss_terminate_on_nan():
    left = _fit_until_nan(keras.callbacks.TerminateOnNaN())
    assert left == (3, 1, True)  # stopped after the NaN batch
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as directory:
        os.chdir(directory)  # NaNAudit() writes to ./nan_audit
        try:
            audit = ks.callbacks.NaNAudit()
            right = _fit_until_nan(audit)
            saved = sorted(os.listdir("nan_audit"))
        finally:
            os.chdir(cwd)
    assert right == left
    assert audit.step == 3
    assert saved == ["nan_step3.keras", "nan_step3.npz", "nan_step3.txt"]


def _ctc_batch(seed):
    logits = _normal(seed, (3, 8, 5))
    labels = np.array([[1, 2, 2, 0], [3, 1, 0, 0], [4, 2, 1, 3]], "int32")  # 0 = blank/pad
    return labels, logits


def loss_ctc():
    labels, logits = _ctc_batch(46)
    agree(
        compiled(ks.losses.StableCTC())(labels, logits),
        compiled(keras.losses.CTC())(labels, logits),
    )


def loss_ctc_op():
    labels, logits = _ctc_batch(47)
    args = (labels, logits, np.array([3, 2, 4], "int32"), np.array([8, 6, 7], "int32"))
    agree(
        compiled(lambda *a: ks.ops.ctc_loss(*a, 0))(*args),
        compiled(lambda *a: kops.ctc_loss(*a, 0))(*args),
    )


def _segmentation(seed):
    y_true = (_rng(seed).uniform(size=(2, 4, 4, 2)) > 0.5).astype("float32")
    return y_true, _sigmoid64(_normal(seed + 1, (2, 4, 4, 2))).astype("float32")


def loss_dice():
    y_true, y_pred = _segmentation(48)
    axes = (None, (1, 2))
    pairs = compiled(
        lambda t, p: [
            (ks.losses.StableDice(axis=a)(t, p), keras.losses.Dice(axis=a)(t, p)) for a in axes
        ]
    )(y_true, y_pred)
    for axis, (right, left) in zip(axes, pairs):
        agree(right, left, f"axis={axis}")


def loss_tversky():
    y_true, y_pred = _segmentation(50)
    a, b = 0.3, 0.7
    agree(
        ks.losses.StableTversky(alpha=b, beta=a)(y_true, y_pred),
        keras.losses.Tversky(alpha=a, beta=b)(y_true, y_pred),
    )


# --- Metrics ---------------------------------------------------------------


def _batches(*arrays, sizes=(3, 3, 3)):
    out, start = [], 0
    for size in sizes:
        out.append(tuple(None if a is None else a[start : start + size] for a in arrays))
        start += size
    return out


def _metric_pair(stable, builtin, *arrays):
    weights = _rng(52).uniform(0.5, 2.0, len(arrays[0])).astype("float32")
    for sw in (None, weights):
        batches = _batches(*arrays, sw)
        agree(_metric(stable, batches), _metric(builtin, batches), f"sample_weight={sw}")


def metric_categorical():
    logits, labels = _normal(53, (9, 4), 2.0), _onehot(54, 9, 4)
    _metric_pair(
        ks.metrics.StableCrossEntropy(),
        keras.metrics.CategoricalCrossentropy(from_logits=True),
        labels,
        logits,
    )


def metric_sparse():
    logits, labels = _normal(55, (9, 4), 2.0), _rng(56).integers(0, 4, 9)
    _metric_pair(
        ks.metrics.StableSparseCrossEntropy(ignore_class=None),
        keras.metrics.SparseCategoricalCrossentropy(from_logits=True),
        labels,
        logits,
    )
    # With an ignored class and a sample_weight, Keras leaves ignored examples out too.
    labels[[2, 6]] = -1
    sw = np.ones(9, "float32")
    batches = _batches(labels, logits, sw)
    agree(
        _metric(ks.metrics.StableSparseCrossEntropy(ignore_class=-1), batches),
        _metric(
            keras.metrics.SparseCategoricalCrossentropy(from_logits=True, ignore_class=-1), batches
        ),
        "ignore_class=-1 with sample_weight",
    )


def metric_binary():
    logits = _normal(57, (9, 4), 2.0)
    labels = _rng(58).integers(0, 2, (9, 4)).astype("float32")
    _metric_pair(
        ks.metrics.StableBinaryCrossEntropy(),
        keras.metrics.BinaryCrossentropy(from_logits=True),
        labels,
        logits,
    )


def metric_mse():
    y_true, y_pred = _regression(59, (9, 4))
    _metric_pair(
        ks.metrics.MaskedMeanSquaredError(), keras.metrics.MeanSquaredError(), y_true, y_pred
    )


def metric_mae():
    y_true, y_pred = _regression(61, (9, 4))
    _metric_pair(
        ks.metrics.MaskedMeanAbsoluteError(), keras.metrics.MeanAbsoluteError(), y_true, y_pred
    )


def _huber64(diff, delta):
    a = np.abs(diff)
    return np.where(a <= delta, 0.5 * diff**2, delta * (a - 0.5 * delta))


def metric_huber():
    y_true, y_pred, delta = *_regression(63, (9, 4)), 0.7
    batches = _batches(y_true, y_pred)
    right = _metric(ks.metrics.MaskedHuber(delta), batches)
    hand = np.mean(_huber64(np.asarray(y_true, F64) - y_pred, delta))
    agree(right, hand, "mean of the elementwise Huber")
    wrapper = keras.metrics.MeanMetricWrapper(keras.losses.huber, delta=delta)
    agree(right, _metric(wrapper, batches), "MeanMetricWrapper(keras.losses.huber)")


def _masked_distance_data():
    y_true, y_pred = _regression(65, (9, 4))
    return y_true, y_pred, np.array([True, False, True, True])


def metric_task_distance():
    y_true, y_pred, task_mask = _masked_distance_data()
    sq = (np.asarray(y_true, F64) - y_pred) ** 2 * task_mask
    batches = _batches(y_true, y_pred)
    hand = {
        "sample": np.mean(np.sqrt(sq.sum(axis=1))),  # mean of per-sample distances
        "task": np.mean(np.sqrt(sq.sum(axis=0))[task_mask]),  # per task, over all samples
    }
    for per, left in hand.items():
        metric = ks.metrics.MaskedMultiTaskDistance(per=per, task_mask=task_mask)
        agree(_metric(metric, batches), left, f"masked distance, per={per}")


def metric_pearson():
    y_true, y_pred = _regression(67, (9, 4))
    y_pred = y_pred + y_true  # correlated, so the value is not near 0
    agree(
        _metric(ks.metrics.StablePearsonCorrelation(axis=-1), _batches(y_true, y_pred)),
        _metric(keras.metrics.PearsonCorrelation(axis=-1), _batches(y_true, y_pred)),
        "axis=-1, several batches",
    )
    agree(
        _metric(ks.metrics.StablePearsonCorrelation(axis=0), [(y_true, y_pred)]),
        _metric(keras.metrics.PearsonCorrelation(axis=0), [(y_true, y_pred)]),
        "axis=0, one batch",
    )


@mismatch(
    "axis=0 over several batches: Keras averages the per-batch correlations, "
    "keras_stable computes the correlation of everything seen",
    documented=True,
)
def metric_pearson_batch_axis_several_batches():
    y_true, y_pred = _regression(69, (9, 4))
    y_pred = y_pred + y_true
    agree(
        _metric(ks.metrics.StablePearsonCorrelation(axis=0), _batches(y_true, y_pred)),
        _metric(keras.metrics.PearsonCorrelation(axis=0), _batches(y_true, y_pred)),
    )


def _r2_data(outputs):
    y_true = _normal(71, (9, outputs))
    return y_true, y_true + _normal(72, (9, outputs), 0.6)


def metric_r2():
    y_true, y_pred = _r2_data(4)
    for aggregation in ("uniform_average", "variance_weighted_average", None):
        agree(
            _metric(ks.metrics.StableR2Score(aggregation, 0), _batches(y_true, y_pred)),
            _metric(keras.metrics.R2Score(aggregation, 0), _batches(y_true, y_pred)),
            f"class_aggregation={aggregation}",
        )
    y_true, y_pred = _r2_data(1)
    agree(
        _metric(ks.metrics.StableR2Score("uniform_average", 2), _batches(y_true, y_pred)),
        _metric(keras.metrics.R2Score("uniform_average", 2), _batches(y_true, y_pred)),
        "num_regressors=2, one output",
    )


@mismatch(
    "adjusted R² (num_regressors > 0) of several outputs: Keras's n counts "
    "every element (batch * outputs), keras_stable's the samples",
    documented=True,
)
def metric_r2_adjusted_several_outputs():
    y_true, y_pred = _r2_data(4)
    agree(
        _metric(ks.metrics.StableR2Score("uniform_average", 2), _batches(y_true, y_pred)),
        _metric(keras.metrics.R2Score("uniform_average", 2), _batches(y_true, y_pred)),
    )


# --- Layers ----------------------------------------------------------------


def layer_softmax():
    s = _normal(73, (6, 4), 2.0)
    mask = _rng(74).uniform(size=(6, 4)) > 0.3
    mask[:, 0] = True  # no fully masked row
    hand = keras.layers.Lambda(
        lambda s: kops.exp(s) / kops.sum(kops.exp(s), axis=-1, keepdims=True)
    )
    right, right_masked, softmax, softmax_masked, by_hand = compiled(
        lambda s, m: (
            ks.layers.StableSoftmax()(s),
            ks.layers.StableSoftmax()(s, m),
            keras.layers.Softmax()(s),
            keras.layers.Softmax()(s, m),
            hand(s),
        )
    )(s, mask)
    agree(right, softmax, "Softmax()")
    agree(right_masked, softmax_masked, "with a mask")
    agree(right, by_hand, "Lambda(exp / sum(exp))")
    keras.config.set_dtype_policy("mixed_float16")  # the conftest fixture resets it
    right = ks.layers.StableSoftmax(dtype="float32")(s)
    assert keras.backend.standardize_dtype(right.dtype) == "float32"
    agree(right, keras.layers.Softmax(dtype="float32")(s), "mixed_float16, both float32")
    # Keras's Softmax() runs in float16 under the mixed policy: float16 tolerance.
    agree(right, keras.layers.Softmax()(s), "mixed_float16", tol=(1e-3, 1e-3))


def layer_log_softmax():
    s = _normal(75, (6, 4), 2.0)
    hand = keras.layers.Lambda(lambda s: kops.log(kops.softmax(s)))
    agree(ks.layers.LogSoftmax()(s), hand(s))


def layer_safe_norm():
    x = _normal(76, (6, 4))
    right = ks.layers.SafeNorm()(x)
    agree(right, np.linalg.norm(np.asarray(x, F64), axis=-1), "numpy tf.norm")
    if tf := _framework("tf"):
        agree(right, keras.layers.Lambda(lambda x: tf.norm(x, axis=-1))(x), "tf.norm")


def layer_unit_normalization():
    x = _normal(77, (6, 4))
    agree(ks.layers.L2Normalize()(x), keras.layers.UnitNormalization()(x))


def layer_lambda_l2_normalize():
    x = _normal(78, (6, 4))
    right = ks.layers.L2Normalize()(x)
    if tf := _framework("tf"):
        left = keras.layers.Lambda(lambda v: tf.math.l2_normalize(v, axis=-1))(x)
        agree(right, left, "tf.math.l2_normalize(axis=-1)")
    agree(right, tf_l2_normalize(x, axis=-1), "numpy tf.math.l2_normalize(axis=-1)")


# --- Functions -------------------------------------------------------------


def function_norm():
    x = _normal(79, (6, 4))
    x64 = np.asarray(x, F64)
    tf, jnp = _framework("tf"), _framework("jnp")
    cases = ((None, False), (-1, False), (0, True), ((0, 1), False))

    def both(x):
        return [
            (
                ks.ops.safe_norm(x, axis, keepdims),
                kops.norm(x, axis=axis, keepdims=keepdims),
                kops.sqrt(kops.sum(x**2, axis=axis, keepdims=keepdims) + 1e-12),
            )
            for axis, keepdims in cases
        ]

    for (axis, keepdims), (right, keras_norm, hand) in zip(cases, compiled(both)(x)):
        what = f"axis={axis}, keepdims={keepdims}"
        agree(right, np.sqrt(np.sum(x64**2, axis=axis, keepdims=keepdims)), f"numpy, {what}")
        agree(right, keras_norm, f"keras.ops.norm, {what}")
        agree(right, hand, f"sqrt(sum(x**2) + eps), {what}")
        if tf:
            agree(right, tf.norm(x, axis=axis, keepdims=keepdims), f"tf.norm, {what}")
        if jnp:
            agree(right, jnp.linalg.norm(x, axis=axis, keepdims=keepdims), f"jnp, {what}")


def function_sqrt():
    x = np.array([[0.0, 0.25, 1.0], [2.0, 9.0, 0.0]], "float32")  # sqrt(0) = 0 is finite
    right = ks.ops.safe_sqrt(x)
    agree(right, kops.sqrt(x), "keras.ops.sqrt")
    agree(right, np.sqrt(np.asarray(x, F64)), "numpy tf.sqrt")
    if tf := _framework("tf"):
        agree(right, tf.sqrt(x), "tf.sqrt")


def function_l2_normalize():
    x = _normal(80, (6, 4))
    tf = _framework("tf")
    axes = (-1, 0)
    pairs = compiled(
        lambda x: [(ks.ops.l2_normalize(x, a), kops.normalize(x, axis=a)) for a in axes]
    )(x)
    for axis, (right, keras_left) in zip(axes, pairs):
        agree(right, keras_left, f"keras.ops.normalize, axis={axis}")
        agree(right, tf_l2_normalize(x, axis=axis), f"numpy tf.math.l2_normalize, axis={axis}")
        if tf:
            agree(right, tf.math.l2_normalize(x, axis=axis), f"tf.math.l2_normalize, axis={axis}")


def function_cosine():
    x, y = _normal(81, (6, 4)), _normal(82, (6, 4))
    axes = (-1, 0)

    def both(x, y):
        return [
            (
                ks.ops.cosine_similarity(x, y, a),
                kops.sum(x * y, axis=a) / (kops.norm(x, axis=a) * kops.norm(y, axis=a) + 1e-8),
                kops.sum(kops.normalize(x, axis=a) * kops.normalize(y, axis=a), axis=a),
            )
            for a in axes
        ]

    for axis, (right, hand, normalized) in zip(axes, compiled(both)(x, y)):
        agree(right, hand, f"x·y / (‖x‖‖y‖ + eps), axis={axis}")
        agree(right, normalized, f"keras.ops cosine, axis={axis}")


def function_cosine_loss():
    y_true, y_pred = _normal(83, (6, 4)), _normal(84, (6, 4))
    axes = (-1, 0)
    pairs = compiled(
        lambda a, b: [
            (-ks.ops.cosine_similarity(a, b, ax), keras.losses.cosine_similarity(a, b, ax))
            for ax in axes
        ]
    )(y_true, y_pred)
    for axis, (right, left) in zip(axes, pairs):
        agree(right, left, f"axis={axis}")


def function_divide():
    x = _normal(85, (6, 4))
    y = (_rng(86).uniform(0.5, 2.0, (6, 4)) * _rng(87).choice([-1, 1], (6, 4))).astype("float32")
    agree(ks.ops.safe_divide(x, y), x / y)


def function_softmax():
    s = _normal(88, (6, 4), 2.0)
    tf = _framework("tf")
    axes = (-1, 0)

    def both(s):
        return [
            (
                ks.ops.softmax(s, a),
                kops.exp(s) / kops.sum(kops.exp(s), axis=a, keepdims=True),
                kops.softmax(s, axis=a),
            )
            for a in axes
        ]

    for axis, (right, hand, keras_left) in zip(axes, compiled(both)(s)):
        agree(right, hand, f"exp(s) / sum(exp(s)), axis={axis}")
        agree(right, keras_left, f"keras.ops.softmax, axis={axis}")
        agree(right, ref.softmax(s, axis), f"numpy tf.nn.softmax, axis={axis}")
        if tf:
            agree(right, tf.nn.softmax(s, axis=axis), f"tf.nn.softmax, axis={axis}")


def function_log_softmax():
    s = _normal(89, (6, 4), 2.0)
    tf = _framework("tf")
    axes = (-1, 0)
    pairs = compiled(
        lambda s: [(ks.ops.log_softmax(s, a), kops.log(kops.softmax(s, axis=a))) for a in axes]
    )(s)
    for axis, (right, hand) in zip(axes, pairs):
        agree(right, hand, f"log(softmax(s)), axis={axis}")
        agree(right, np.log(ref.softmax(s, axis)), f"numpy tf.nn.log_softmax, axis={axis}")
        if tf:
            agree(right, tf.nn.log_softmax(s, axis=axis), f"tf.nn.log_softmax, axis={axis}")


def function_logsumexp():
    x = _normal(90, (6, 4), 2.0)
    tf = _framework("tf")
    cases = ((None, False), (-1, False), (0, True))

    def both(x):
        return [
            (
                ks.ops.logsumexp(x, a, k),
                kops.log(kops.sum(kops.exp(x), axis=a, keepdims=k)),
                kops.logsumexp(x, axis=a, keepdims=k),
            )
            for a, k in cases
        ]

    for (axis, keepdims), (right, hand, keras_left) in zip(cases, compiled(both)(x)):
        what = f"axis={axis}, keepdims={keepdims}"
        agree(right, hand, f"log(sum(exp(x))), {what}")
        agree(right, keras_left, f"keras.ops, {what}")
        exact = np.log(np.sum(np.exp(np.asarray(x, F64)), axis=axis, keepdims=keepdims))
        agree(right, exact, f"numpy tf.reduce_logsumexp, {what}")
        if tf:
            agree(right, tf.reduce_logsumexp(x, axis=axis, keepdims=keepdims), f"tf, {what}")


def function_softmax_cross_entropy():
    logits, labels = _normal(91, (6, 4), 2.0), _soft_labels(92, (6, 4))
    tf = _framework("tf")
    for axis in (-1, 0):
        right = ks.ops.softmax_cross_entropy(labels, logits, axis)
        exact = -np.sum(labels * np.log(ref.softmax(logits, axis)), axis=axis)
        agree(right, exact, f"numpy, axis={axis}")
        if tf:
            left = tf.nn.softmax_cross_entropy_with_logits(labels, logits, axis=axis)
            agree(right, left, f"tf.nn, axis={axis}")


def function_sparse_softmax_cross_entropy():
    logits, labels = _normal(93, (6, 4), 2.0), _rng(94).integers(0, 4, 6).astype("int32")
    right = ks.ops.sparse_softmax_cross_entropy(labels, logits)
    agree(right, -np.log(ref.softmax(logits))[np.arange(6), labels], "numpy")
    if tf := _framework("tf"):
        agree(right, tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits), "tf.nn")


def function_sigmoid_cross_entropy():
    logits, labels = _normal(95, (6, 4), 2.0), _rng(96).uniform(0, 1, (6, 4)).astype("float32")
    right = ks.ops.sigmoid_cross_entropy(labels, logits)
    x = np.asarray(logits, F64)
    agree(right, np.maximum(x, 0) - x * labels + np.log1p(np.exp(-np.abs(x))), "numpy")
    if tf := _framework("tf"):
        agree(right, tf.nn.sigmoid_cross_entropy_with_logits(labels, logits), "tf.nn")


def function_masked_task_distance():
    y_true, y_pred = _regression(97, (6, 4))
    element_mask = (_rng(98).uniform(size=(6, 4)) > 0.3).astype("float32")
    cases = [(m, a) for m in (element_mask, np.array([True, False, True, True])) for a in (-1, 0)]

    def both(t, p):
        return [
            (
                ks.ops.masked_task_distance(t, p, mask, axis, squared=True),
                kops.sum(kops.cast(mask, "float32") * (t - p) ** 2, axis=axis),
            )
            for mask, axis in cases
        ]

    for (mask, axis), (right, hand) in zip(cases, compiled(both)(y_true, y_pred)):
        agree(right, hand, f"mask {mask.dtype}, axis={axis}")


def function_masked_elementwise():
    y_true, y_pred = _regression(99, (6, 4))
    missing = _with_nan_rows(y_true)
    diff = np.asarray(missing, F64) - y_pred
    delta = 0.7
    agree_where_finite(ks.ops.masked_squared_error(missing, y_pred), diff**2, "squared")
    agree_where_finite(ks.ops.masked_absolute_error(missing, y_pred), np.abs(diff), "absolute")
    agree_where_finite(ks.ops.masked_huber(missing, y_pred, delta), _huber64(diff, delta), "Huber")


def function_poisson_nll():
    log_rate, counts = _normal(100, (6, 4), 0.5), _counts(101, (6, 4))
    right = ks.ops.poisson_nll(counts, log_rate)
    agree(right, ref.poisson_nll(counts, log_rate), "numpy tf.nn.log_poisson_loss")
    rate = np.exp(np.asarray(log_rate, F64)).astype("float32")
    right_rate = ks.ops.poisson_nll(counts, rate, False, False)
    # torch's log_input=False adds eps=1e-8 inside the log: ~1e-8 relative here.
    agree(right_rate, rate - counts * np.log(np.asarray(rate, F64) + 1e-8), "numpy torch rates")
    if tf := _framework("tf"):
        agree(right, tf.nn.log_poisson_loss(counts, log_rate), "tf.nn.log_poisson_loss")
    if torch := _framework("torch"):
        functional = torch.nn.functional
        t_log, t_rate, t_y = _torch_tensor(log_rate), _torch_tensor(rate), _torch_tensor(counts)
        left = functional.poisson_nll_loss(t_log, t_y, reduction="none")
        agree(right, left, "torch, log_input=True")
        agree(kops.mean(right), functional.poisson_nll_loss(t_log, t_y), "torch, mean")
        left = functional.poisson_nll_loss(t_rate, t_y, log_input=False, reduction="none")
        agree(right_rate, left, "torch, log_input=False")


@mismatch(
    "`full`: tf.nn.log_poisson_loss(compute_full_loss=True) and torch's "
    "poisson_nll_loss(full=True) add Stirling's approximation of log(y!) for "
    "y > 1 (0 for y <= 1); poisson_nll(full=True) adds the exact lgamma(y + 1) "
    "(e.g. y = 2: 0.6518 vs 0.6931)",
    documented=True,
)
def function_poisson_nll_full():
    log_rate, counts = _normal(102, (6, 4), 0.5), _counts(103, (6, 4))
    right = ks.ops.poisson_nll(counts, log_rate, True)
    agree(right, ref.poisson_nll(counts, log_rate, full=True), "exact lgamma (sanity)")
    if tf := _framework("tf"):
        agree(right, tf.nn.log_poisson_loss(counts, log_rate, compute_full_loss=True), "tf")
    if torch := _framework("torch"):
        left = torch.nn.functional.poisson_nll_loss(
            _torch_tensor(log_rate), _torch_tensor(counts), full=True, reduction="none"
        )
        agree(right, left, "torch")
    agree(right, ref.poisson_nll(counts, log_rate) + _stirling(counts), "numpy tf / torch full")


def function_gaussian_nll():
    y, mean, log_var = _normal(104, (6, 4)), _normal(105, (6, 4)), _normal(106, (6, 4), 0.5)
    y_t, mean_t, log_var_t = tensors(y, mean, log_var)
    hand = 0.5 * (log_var_t + (y_t - mean_t) ** 2 * kops.exp(-log_var_t))
    agree(ks.ops.gaussian_nll(y, mean, log_var), hand, "hand-written")
    var = np.exp(np.asarray(log_var, F64))  # well above torch's eps=1e-6 clamp
    for full in (False, True):
        right = ks.ops.gaussian_nll(y, mean, log_var, full)
        exact = 0.5 * (np.log(var) + (np.asarray(y, F64) - mean) ** 2 / var)
        agree(right, exact + full * 0.5 * np.log(2 * np.pi), f"numpy torch, full={full}")
        if torch := _framework("torch"):
            inputs = (_torch_tensor(mean), _torch_tensor(y), _torch_tensor(var))
            left = torch.nn.functional.gaussian_nll_loss(*inputs, full=full, reduction="none")
            agree(right, left, f"torch, full={full}")


def _focal_batch(seed):
    labels = _rng(seed).integers(0, 2, (6, 4)).astype("float32")
    return labels, _normal(seed + 1, (6, 4), 1.5)


def function_sigmoid_focal_tfa():
    """TF Addons' loss, summed over the last axis, against the op summed."""
    labels, logits = _focal_batch(107)
    right = kops.sum(ks.ops.sigmoid_focal_cross_entropy(labels, logits, gamma=2.0, alpha=0.25), -1)
    probs = _sigmoid64(logits).astype("float32")
    agree(right, tfa_sigmoid_focal_crossentropy(labels, probs), "tfa, probs")
    tfa_logits = tfa_sigmoid_focal_crossentropy(labels, logits, from_logits=True)
    agree(right, tfa_logits, "tfa, from_logits=True")


def function_sigmoid_focal_keras():
    """Keras's loss averages the last axis; alpha is ignored there without
    apply_class_balancing, so the op's alpha=None."""
    labels, logits = _focal_batch(111)
    for gamma in (2.0, 0.5):
        right = kops.mean(ks.ops.sigmoid_focal_cross_entropy(labels, logits, gamma=gamma), -1)
        left = keras.losses.binary_focal_crossentropy(labels, logits, gamma=gamma, from_logits=True)
        agree(right, left, f"keras.losses.binary_focal_crossentropy, gamma={gamma}")


def function_softmax_focal():
    logits, labels = _normal(113, (6, 4), 2.0), _onehot(114, 6, 4)
    # gamma and alpha as the cell passes them: Keras's defaults (2.0, 0.25).
    agree(
        ks.ops.softmax_focal_cross_entropy(labels, logits, 2.0, 0.25, -1, None),
        keras.losses.categorical_focal_crossentropy(labels, logits, from_logits=True),
    )


def function_kl_divergence():
    logits, labels = _normal(115, (6, 4)), _soft_labels(116, (6, 4))
    right = ks.ops.kl_divergence(labels, logits)
    y, s = tensors(labels, logits)
    hand = kops.sum(y * kops.log(y / kops.softmax(s)), axis=-1)
    agree(right, hand, "sum(y * log(y / softmax(s)))")
    probs = kops.softmax(logits)
    left = keras.losses.kl_divergence(labels, probs)
    agree(right, left, "keras.losses.kl_divergence, logits")
    agree(ks.ops.kl_divergence(labels, probs, from_logits=False), left, "from_logits=False")


def function_pairwise_distance():
    x, y = _normal(117, (5, 3)), _normal(118, (4, 3))

    def both(x, y):
        right = [ks.ops.pairwise_distance(x, y), ks.ops.pairwise_distance(x, y, squared=True)]
        alone = [ks.ops.pairwise_distance(x, squared=s) for s in (False, True)]
        return right, alone, kops.cdist(x, y)

    (right, right_squared), alone, cdist = compiled(both)(x, y)
    agree(right, cdist, "keras.ops.cdist")
    x64, y64 = np.asarray(x, F64), np.asarray(y, F64)
    # The expanded form cancels in float32; in float64 it is the exact distance.
    expanded = (x64**2).sum(1)[:, None] + (y64**2).sum(1)[None, :] - 2 * x64 @ y64.T
    agree(right, np.sqrt(expanded), "sqrt(‖x‖² + ‖y‖² - 2 x·y)")
    agree(right_squared, expanded, "squared")
    for squared, value in zip((False, True), alone):
        agree(value, tfa_pairwise_distance(x, squared), f"tfa pairwise_distance, squared={squared}")


def function_std():
    x = _normal(119, (6, 4), 2.0)
    cases = ((None, False), (0, False), (-1, True))
    pairs = compiled(
        lambda x: [(ks.ops.safe_std(x, a, k), kops.std(x, axis=a, keepdims=k)) for a, k in cases]
    )(x)
    for (axis, keepdims), (right, left) in zip(cases, pairs):
        agree(right, left, f"axis={axis}, keepdims={keepdims}")


def function_metric_learning():
    # The arguments positionally, as TF Addons takes them (every distance_metric
    # and `soft` run through the classes in the Losses rows).
    labels, embeddings = _metric_learning_batch(120)
    agree(
        compiled(lambda e: ks.ops.triplet_semihard_loss(labels, e, 0.7, "squared-L2"))(embeddings),
        tfa_triplet_semihard_loss(labels, embeddings, 0.7, "squared-L2"),
        "semi-hard",
    )
    agree(
        compiled(lambda e: ks.ops.triplet_hard_loss(labels, e, 0.7, True, "angular"))(embeddings),
        tfa_triplet_hard_loss(labels, embeddings, 0.7, True, "angular"),
        "hard",
    )
    pair_labels = np.array([1, 0, 1, 0, 0, 1], "float32")
    distances = _rng(121).uniform(0.2, 3.0, 6).astype("float32")
    agree(
        ks.ops.contrastive_loss(pair_labels, distances, 1.5),
        ref.contrastive_loss(pair_labels, distances, 1.5),
        "contrastive",
    )


def function_info_nce():
    views, t = _normal(122, (2, 6, 4)), 0.3
    agree(
        compiled(lambda v: ks.ops.info_nce_loss(v, t))(views),
        compiled(lambda v: _nt_xent(v, t))(views),
    )


# --- the table -> its checks -----------------------------------------------

CHECKS = {
    "`mean(tf.norm(y_true - y_pred, axis=0)**2)`": [loss_task_distance_squared],
    "`mean(keras.ops.norm(y_true - y_pred, axis=0))`": [loss_task_distance],
    "per-sample `norm(y_true - y_pred, axis=-1)` with NaN labels": [loss_sample_distance],
    "`keras.losses.CategoricalCrossentropy(from_logits=True)`": [loss_categorical_from_logits],
    "softmax output + `-sum(y * log(p))`": [loss_softmax_then_hand_written_ce],
    "`keras.losses.CategoricalCrossentropy()` on probabilities": [
        loss_categorical_on_probabilities
    ],
    "`keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=k)`": [
        loss_sparse_ignore_class
    ],
    "`keras.losses.BinaryCrossentropy(from_logits=True)` / `sigmoid` + hand-written BCE": [
        loss_binary
    ],
    "`keras.losses.MeanSquaredError()` with NaN (missing) labels": [loss_mse],
    "`keras.losses.MeanAbsoluteError()` with NaN (missing) labels": [loss_mae],
    "`keras.losses.Huber(delta)` with NaN (missing) labels": [loss_huber],
    "`exp` output + `keras.losses.Poisson()` (a log link)": [loss_poisson_log_link],
    "rate output (`softplus`, `relu`) + `keras.losses.Poisson()`": [loss_poisson_rates],
    "hand-written `0.5 * (log_var + (y - mean)**2 * exp(-log_var))`": [loss_gaussian_nll],
    "`keras.losses.BinaryFocalCrossentropy(from_logits=True, gamma=g)`": [
        loss_binary_focal_from_logits
    ],
    "`keras.losses.BinaryFocalCrossentropy(apply_class_balancing=True, alpha=a)` on probabilities": [
        loss_binary_focal_balanced_probabilities
    ],
    "`keras.losses.CategoricalFocalCrossentropy(from_logits=True)`": [
        loss_categorical_focal_from_logits
    ],
    "`keras.losses.CategoricalFocalCrossentropy()` on probabilities": [
        loss_categorical_focal_probabilities
    ],
    "`keras.losses.KLDivergence()` on a softmax output": [loss_kl_divergence],
    "`keras.losses.CosineSimilarity(axis)`": [loss_cosine_similarity],
    "`tfa.losses.TripletSemiHardLoss(margin, distance_metric)`": [loss_triplet_semihard],
    "`tfa.losses.TripletHardLoss(margin, soft, distance_metric)`, a batch-hard loss on `keras.ops.cdist`": [
        loss_triplet_hard,
        loss_triplet_hard_anchor_without_positive,
    ],
    "`tfa.losses.ContrastiveLoss(margin)`": [loss_contrastive],
    "the keras-io siamese tutorial's `loss(margin)` (label 0 = similar pair)": [
        loss_siamese_tutorial
    ],
    "a hand-written NT-Xent / InfoNCE (`logits - 1e9 * eye`)": [loss_info_nce],
    "`Dense(vocab)` / `ReversibleEmbedding(reverse=True, logit_soft_cap=c)` + `SparseCategoricalCrossentropy(from_logits=True)` over a large vocabulary": [
        loss_linear_softmax_head
    ],
    "`keras.ops.dot_product_attention(q, k, v, bias, mask, scale, is_causal)`": [
        loss_dot_product_attention
    ],
    "`keras.layers.MultiHeadAttention(...)`, `keras.layers.GroupQueryAttention(...)`": [
        loss_attention_layers
    ],
    "`keras.callbacks.TerminateOnNaN()`": [loss_terminate_on_nan],
    "`keras.losses.CTC()`": [loss_ctc],
    "`keras.ops.ctc_loss(target, output, target_length, output_length, mask_index)`": [loss_ctc_op],
    "`keras.losses.Dice(axis)`": [loss_dice],
    "`keras.losses.Tversky(alpha=a, beta=b)` (Keras 3.15.1)": [loss_tversky],
    "`keras.metrics.CategoricalCrossentropy(from_logits=True)`": [metric_categorical],
    "`keras.metrics.SparseCategoricalCrossentropy(from_logits=True)`": [metric_sparse],
    "`keras.metrics.BinaryCrossentropy(from_logits=True)`": [metric_binary],
    "`keras.metrics.MeanSquaredError()` with NaN (missing) labels": [metric_mse],
    "`keras.metrics.MeanAbsoluteError()` with NaN (missing) labels": [metric_mae],
    "a hand-written mean Huber metric with NaN (missing) labels": [metric_huber],
    "a hand-written masked distance (the root of a masked sum of squares)": [metric_task_distance],
    "`keras.metrics.PearsonCorrelation(axis=...)`": [
        metric_pearson,
        metric_pearson_batch_axis_several_batches,
    ],
    "`keras.metrics.R2Score(class_aggregation, num_regressors)`": [
        metric_r2,
        metric_r2_adjusted_several_outputs,
    ],
    "`keras.layers.Softmax()`, `Lambda(lambda s: exp(s) / sum(exp(s)))`": [layer_softmax],
    "`Lambda(lambda s: log(softmax(s)))`": [layer_log_softmax],
    "`Lambda(lambda x: tf.norm(x, axis=-1))`": [layer_safe_norm],
    "`keras.layers.UnitNormalization()`, `Lambda(lambda x: tf.math.l2_normalize(x, axis=-1))`": [
        layer_unit_normalization,
        layer_lambda_l2_normalize,
    ],
    "`tf.norm`, `keras.ops.norm`, `jnp.linalg.norm`, `sqrt(sum(x**2) + eps)`": [function_norm],
    "`tf.sqrt`, `keras.ops.sqrt` of something that can be 0": [function_sqrt],
    "`tf.math.l2_normalize`, `keras.ops.normalize`": [function_l2_normalize],
    "`x·y / (‖x‖‖y‖ + eps)`, `keras.ops` cosine of two vectors": [function_cosine],
    "`keras.losses.cosine_similarity(y_true, y_pred, axis)` — which is **`-cos`**": [
        function_cosine_loss
    ],
    "`x / y` where `y` can be 0": [function_divide],
    "`exp(s) / sum(exp(s))`, `keras.ops.softmax`, `tf.nn.softmax`": [function_softmax],
    "`log(softmax(s))`, `tf.nn.log_softmax`": [function_log_softmax],
    "`log(sum(exp(x)))`, `tf.reduce_logsumexp`, `keras.ops.logsumexp`": [function_logsumexp],
    "`tf.nn.softmax_cross_entropy_with_logits`": [function_softmax_cross_entropy],
    "`tf.nn.sparse_softmax_cross_entropy_with_logits`": [function_sparse_softmax_cross_entropy],
    "`tf.nn.sigmoid_cross_entropy_with_logits`": [function_sigmoid_cross_entropy],
    "`sum(mask * (y_true - y_pred)**2)` with NaN labels": [function_masked_task_distance],
    "`(y_true - y_pred)**2`, `abs(...)`, Huber elementwise on NaN labels": [
        function_masked_elementwise
    ],
    "`tf.nn.log_poisson_loss(targets, log_input)`, `torch.nn.functional.poisson_nll_loss`": [
        function_poisson_nll,
        function_poisson_nll_full,
    ],
    "`0.5 * (log_var + (y - mean)**2 * exp(-log_var))`, `torch.nn.functional.gaussian_nll_loss` (takes a variance)": [
        function_gaussian_nll
    ],
    "`tfa.losses.sigmoid_focal_crossentropy(y_true, y_pred, alpha=0.25, gamma=2.0, from_logits=True)`": [
        function_sigmoid_focal_tfa
    ],
    "`keras.losses.binary_focal_crossentropy(y_true, logits, gamma=g, from_logits=True)`": [
        function_sigmoid_focal_keras
    ],
    "`keras.losses.categorical_focal_crossentropy(from_logits=True)`": [function_softmax_focal],
    "`sum(y * log(y / softmax(s)))`, `keras.losses.kl_divergence`": [function_kl_divergence],
    "`keras.ops.cdist(x, y)`, `sqrt(‖x‖² + ‖y‖² - 2 x·y)`, `tfa.losses.metric_learning.pairwise_distance`": [
        function_pairwise_distance
    ],
    "`keras.ops.std(x, axis)`": [function_std],
    "`tfa.losses.triplet_semihard_loss`, `tfa.losses.triplet_hard_loss`, `tfa.losses.contrastive_loss`": [
        function_metric_learning
    ],
    "a hand-written NT-Xent": [function_info_nce],
}


# --- tests -----------------------------------------------------------------


def test_the_tables_are_parsed():
    rows = migration_rows()
    counts = {section: sum(s == section for s, _ in rows) for section in SECTIONS}
    assert all(counts.values()), f"a table of the page was not found: {counts}"
    lefts = [left for _, left in rows]
    # CHECKS is keyed by the left cell alone.
    assert len(set(lefts)) == len(lefts), "two rows of the page have the same left cell"
    assert "`keras_stable.ops.cosine_similarity` is `+cos`" not in lefts  # Deliberate differences


def test_every_row_has_a_check():
    missing = [row for row in migration_rows() if row[1] not in CHECKS]
    assert not missing, f"rows of docs/migration.md without a check here: {missing}"


def test_no_check_is_stale():
    lefts = {left for _, left in migration_rows()}
    stale = [left for left in CHECKS if left not in lefts]
    assert not stale, f"checks for rows no longer on docs/migration.md: {stale}"


def _params():
    for checks in CHECKS.values():
        for check in checks:
            reason = getattr(check, "mismatch", None)
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            yield pytest.param(check, id=check.__name__, marks=marks)


@pytest.mark.parametrize("check", list(_params()))
def test_row_gives_the_left_number(check):
    check()
