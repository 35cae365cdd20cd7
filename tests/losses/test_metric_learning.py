"""Metric-learning losses against TF Addons' algorithms, in float64.

TF Addons is not installable next to Keras 3, so its algorithms are checked
two ways: `tests/reference.py` holds straightforward one-pair-at-a-time
loops, and `_tfa_*` below are line-by-line NumPy transcriptions of TF
Addons' vectorised code (`tensorflow_addons/losses/triplet.py` and
`metric_learning.py`, the `tile`/masked-min formulation). The two agree on
every batch where each anchor has a positive and a negative; keras_stable's
losses agree with both there, and with the loops everywhere (their
conventions where TF Addons gives NaN or an artefact are the loops').
"""

import keras
import numpy as np
import pytest

from keras_stable import losses
from keras_stable import ops
from tests import reference as ref
from tests.backend_utils import BACKEND
from tests.backend_utils import DTYPES
from tests.backend_utils import KERAS_3_16
from tests.backend_utils import MODES
from tests.backend_utils import assert_close
from tests.backend_utils import assert_finite
from tests.backend_utils import cast_tensor
from tests.backend_utils import to_numpy
from tests.backend_utils import vjp
from tests.backend_utils import vjp_all_modes

K = keras.ops
METRICS = ("L2", "squared-L2", "angular")


# --- TF Addons, transcribed -------------------------------------------------


def _tfa_pairwise_distance(feature, squared=False):
    sq = np.sum(feature**2, axis=1, keepdims=True)
    d2 = np.maximum(sq + sq.T - 2.0 * feature @ feature.T, 0.0)
    error_mask = d2 <= 0.0
    d = d2 if squared else np.sqrt(d2 + error_mask * 1e-16)
    d = d * ~error_mask
    return d * (1.0 - np.eye(len(feature)))


def _tfa_distances(e, metric):
    if metric == "angular":
        n = np.sqrt(np.maximum(np.sum(e**2, axis=1, keepdims=True), 1e-12))
        u = e / n
        return np.maximum(1.0 - u @ u.T, 0.0)
    return _tfa_pairwise_distance(e, squared=metric == "squared-L2")


def _masked_maximum(data, mask, dim=1):
    axis_minimums = np.min(data, dim, keepdims=True)
    return np.max((data - axis_minimums) * mask, dim, keepdims=True) + axis_minimums


def _masked_minimum(data, mask, dim=1):
    axis_maximums = np.max(data, dim, keepdims=True)
    return np.min((data - axis_maximums) * mask, dim, keepdims=True) + axis_maximums


def _tfa_semihard(labels, embeddings, margin=1.0, metric="L2"):
    labels = np.asarray(labels).reshape(-1, 1)
    pdist = _tfa_distances(np.asarray(embeddings, "float64"), metric)
    adjacency = labels == labels.T
    adjacency_not = ~adjacency
    b = labels.size
    pdist_tile = np.tile(pdist, [b, 1])
    mask = np.tile(adjacency_not, [b, 1]) & (pdist_tile > pdist.T.reshape(-1, 1))
    mask_final = (np.sum(mask, 1, keepdims=True) > 0).reshape(b, b).T
    negatives_outside = _masked_minimum(pdist_tile, mask).reshape(b, b).T
    negatives_inside = np.tile(_masked_maximum(pdist, adjacency_not), [1, b])
    semi_hard = np.where(mask_final, negatives_outside, negatives_inside)
    loss_mat = margin + pdist - semi_hard
    mask_positives = adjacency.astype("float64") - np.eye(b)
    with np.errstate(invalid="ignore"):  # no positive pair: 0/0, as in TF Addons
        return np.sum(np.maximum(loss_mat * mask_positives, 0.0)) / np.sum(mask_positives)


def _tfa_hard(labels, embeddings, margin=1.0, soft=False, metric="L2"):
    labels = np.asarray(labels).reshape(-1, 1)
    pdist = _tfa_distances(np.asarray(embeddings, "float64"), metric)
    adjacency = labels == labels.T
    hard_negatives = _masked_minimum(pdist, ~adjacency)
    mask_positives = adjacency.astype("float64") - np.eye(labels.size)
    hard_positives = _masked_maximum(pdist, mask_positives)
    gap = hard_positives - hard_negatives
    loss = np.log1p(np.exp(gap)) if soft else np.maximum(gap + margin, 0.0)
    return np.mean(loss)


def _batch(seed, n=12, dim=4, classes=3):
    """Random embeddings; every label appears at least twice."""
    rng = np.random.default_rng(seed)
    labels = np.concatenate(
        [np.arange(classes), np.arange(classes), rng.integers(0, classes, n - 2 * classes)]
    )
    rng.shuffle(labels)
    return labels.astype("int32"), rng.normal(size=(n, dim)).astype("float32")


@pytest.mark.parametrize("seed", range(4))
def test_reference_loops_equal_tf_addons_transcription(seed):
    labels, e = _batch(seed)
    for metric in METRICS:
        for margin in (0.2, 1.0):
            assert_close(
                ref.triplet_semihard_loss(labels, e, margin, metric),
                _tfa_semihard(labels, e, margin, metric),
                "float64",
                tol=(1e-9, 1e-12),
            )
            for soft in (False, True):
                assert_close(
                    ref.triplet_hard_loss(labels, e, margin, soft, metric),
                    _tfa_hard(labels, e, margin, soft, metric),
                    "float64",
                    tol=(1e-9, 1e-12),
                )


# --- values against the float64 loops ------------------------------------------------------


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("seed", range(3))
def test_triplet_losses_match_tf_addons(seed, metric):
    labels, e = _batch(seed, n=16, dim=5, classes=4)
    semi = losses.TripletSemiHardLoss(margin=0.5, distance_metric=metric)
    out, (grad,) = vjp_all_modes(lambda x: semi(labels, x), [e])
    assert_close(out, ref.triplet_semihard_loss(labels, e, 0.5, metric), tol=(1e-5, 1e-6))
    assert_close(out, _tfa_semihard(labels, e, 0.5, metric), tol=(1e-5, 1e-6))
    assert_finite(grad)
    for soft in (False, True):
        hard = losses.TripletHardLoss(margin=0.5, soft=soft, distance_metric=metric)
        out, (grad,) = vjp_all_modes(lambda x, h=hard: h(labels, x), [e])
        assert_close(out, ref.triplet_hard_loss(labels, e, 0.5, soft, metric), tol=(1e-5, 1e-6))
        assert_close(out, _tfa_hard(labels, e, 0.5, soft, metric), tol=(1e-5, 1e-6))
        assert_finite(grad)
    # The functional twins give the same numbers.
    assert_close(
        to_numpy(ops.triplet_semihard_loss(labels, e, 0.5, metric)),
        ref.triplet_semihard_loss(labels, e, 0.5, metric),
    )
    assert_close(
        to_numpy(ops.triplet_hard_loss(labels, e, 0.5, False, metric)),
        ref.triplet_hard_loss(labels, e, 0.5, False, metric),
    )


def _fd_gradient(fn, x, eps=1e-5):
    x = np.asarray(x, "float64")
    grad = np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        xp, xm = x.copy(), x.copy()
        xp[idx] += eps
        xm[idx] -= eps
        grad[idx] = (fn(xp) - fn(xm)) / (2 * eps)
    return grad


@pytest.mark.parametrize("metric", METRICS)
def test_triplet_gradients_match_finite_differences(metric):
    labels, e = _batch(7, n=8, dim=3, classes=2)
    semi = losses.TripletSemiHardLoss(margin=0.5, distance_metric=metric)
    hard = losses.TripletHardLoss(margin=0.5, distance_metric=metric)
    for loss, fn in (
        (semi, lambda x: ref.triplet_semihard_loss(labels, x, 0.5, metric)),
        (hard, lambda x: ref.triplet_hard_loss(labels, x, 0.5, False, metric)),
    ):
        _, (grad,) = vjp_all_modes(lambda x, fn=loss: fn(labels, x), [e])
        assert_close(grad, _fd_gradient(fn, e), tol=(1e-3, 1e-4))


@pytest.mark.parametrize("dtype", DTYPES)
def test_half_precision_embeddings(dtype):
    labels, e = _batch(3)
    x = cast_tensor(e, dtype)
    held = to_numpy(x)  # the values a half-precision model output holds
    for loss, expected in (
        (losses.TripletSemiHardLoss(), ref.triplet_semihard_loss(labels, held)),
        (losses.TripletHardLoss(soft=True), ref.triplet_hard_loss(labels, held, soft=True)),
    ):
        out, (grad,) = vjp_all_modes(lambda v, fn=loss: fn(labels, v), [x], dtype=dtype)
        assert keras.backend.standardize_dtype(loss(labels, x).dtype) == "float32"
        assert_close(out, expected, tol=(1e-5, 1e-6))
        assert_finite(grad)


# --- coincident, collapsed and degenerate batches -------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_cdist_triplet_loss_goes_nan_on_duplicates_and_ours_does_not(mode):
    """A hand-written batch-hard loss on `keras.ops.cdist` (a common port of
    TF Addons) differentiates `sqrt` at every zero distance: the diagonal,
    and any duplicated point."""
    labels, e = _batch(1, n=8)
    e[4] = e[0]  # a duplicated point
    same = labels[:, None] == labels[None, :]

    def plain(x):
        d = K.cdist(x, x)
        positive = K.max(K.where(same & ~np.eye(8, dtype=bool), d, -1e9), axis=1)
        negative = K.min(K.where(~same, d, 1e9), axis=1)
        return K.mean(K.relu(positive - negative + 1.0))

    _, (grad,) = vjp(plain, [e], mode=mode)
    assert np.isnan(grad).any()
    for loss in (losses.TripletHardLoss(), losses.TripletSemiHardLoss()):
        value, (grad,) = vjp(lambda x, fn=loss: fn(labels, x), [e], mode=mode)
        assert_finite(grad)
        assert np.isfinite(value)


@pytest.mark.parametrize("metric", METRICS)
def test_collapsed_and_zero_embeddings_have_exact_zero_gradients(metric):
    labels = np.array([0, 0, 1, 1, 2, 2], "int32")
    for e in (np.zeros((6, 3), "float32"), np.tile(np.float32([[1.0, -2.0, 0.5]]), (6, 1))):
        for loss in (
            losses.TripletSemiHardLoss(margin=0.3, distance_metric=metric),
            losses.TripletHardLoss(margin=0.3, distance_metric=metric),
        ):
            out, (grad,) = vjp_all_modes(lambda x, fn=loss: fn(labels, x), [e])
            expected = ref.triplet_semihard_loss(labels, e, 0.3, metric)
            assert_close(out, expected)  # every distance equal: margin (or 0.3 + 1 - 1)
            np.testing.assert_array_equal(grad, 0.0)


def test_batches_without_positives_or_negatives_give_zero():
    e = np.random.default_rng(0).normal(size=(4, 3)).astype("float32")
    for labels in (np.arange(4, dtype="int32"), np.full(4, 7, "int32")):
        for loss in (
            losses.TripletSemiHardLoss(),
            losses.TripletHardLoss(),
            losses.TripletHardLoss(soft=True),
        ):
            out, (grad,) = vjp_all_modes(lambda x, fn=loss, y=labels: fn(y, x), [e])
            assert out == 0.0
            np.testing.assert_array_equal(grad, 0.0)
    # TF Addons: 0/0 = NaN without positives; margin + mean d(a, p) (semi-hard)
    # and margin (hard) with a single label.
    assert np.isnan(_tfa_semihard(np.arange(4), e))
    single = np.full(4, 7)
    assert_close(
        _tfa_semihard(single, e),
        1.0 + ref.pairwise_distance(e)[~np.eye(4, dtype=bool)].mean(),
        "float64",
    )


def test_hard_loss_counts_only_anchors_with_a_positive():
    """TF Addons also averages anchors without a positive, with d(a, p) = 0."""
    labels = np.array([0, 0, 1, 2], "int32")
    e = np.random.default_rng(2).normal(size=(4, 3)).astype("float32")
    ours = to_numpy(losses.TripletHardLoss()(labels, e))
    assert_close(ours, ref.triplet_hard_loss(labels, e))
    assert abs(_tfa_hard(labels, e) - ours) > 1e-3


# --- sample weights, Keras masks and reductions ------------------------------------------


def test_sample_weight_weights_anchors_and_zero_removes_the_sample():
    labels, e = _batch(5)
    w = np.random.default_rng(6).uniform(0.5, 2.0, 12).astype("float32")
    w[[2, 7]] = 0.0
    keep = w != 0
    for loss, fn in (
        (losses.TripletSemiHardLoss(margin=0.3), ref.triplet_semihard_loss),
        (losses.TripletHardLoss(margin=0.3), ref.triplet_hard_loss),
    ):
        out = to_numpy(loss(labels, e, sample_weight=w))
        assert_close(out, fn(labels, e, 0.3, weights=w))
        binary = keep.astype("float32")
        assert_close(
            to_numpy(loss(labels, e, sample_weight=binary)), to_numpy(loss(labels[keep], e[keep]))
        )
    nce = losses.InfoNCELoss(temperature=0.2)
    views = np.random.default_rng(7).normal(size=(2, 12, 4)).astype("float32")
    assert_close(
        to_numpy(nce(None, views, sample_weight=w)), ref.info_nce_loss(views, 0.2, weights=w)
    )


def test_reductions():
    labels, e = _batch(8, n=6, classes=2)
    pairs = to_numpy(losses.TripletSemiHardLoss(reduction="none")(labels, e))
    assert pairs.shape == (6, 6)
    total = to_numpy(losses.TripletSemiHardLoss(reduction="sum")(labels, e))
    n_pairs = np.sum(labels[:, None] == labels[None, :]) - 6
    assert_close(total / n_pairs, ref.triplet_semihard_loss(labels, e))
    assert_close(pairs.sum(), total)
    anchors = to_numpy(losses.TripletHardLoss(reduction="none")(labels, e))
    assert anchors.shape == (6,)
    assert_close(anchors.mean(), ref.triplet_hard_loss(labels, e))
    per_pair = to_numpy(losses.InfoNCELoss(reduction="none")(None, np.ones((2, 3, 2), "float32")))
    assert per_pair.shape == (3,)


def test_keras_mask_removes_samples():
    labels, e = _batch(9)
    masked = keras.layers.Masking(0.0)
    x = e.copy()
    x[[1, 5]] = 0.0
    y_pred = masked(x)
    keep = np.ones(12, bool)
    keep[[1, 5]] = False
    for loss in (losses.TripletSemiHardLoss(), losses.TripletHardLoss()):
        assert_close(to_numpy(loss(labels, y_pred)), to_numpy(loss(labels[keep], e[keep])))


# --- InfoNCE -------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_info_nce_matches_float64(dtype):
    views = np.random.default_rng(10).normal(size=(2, 6, 5)).astype("float32")
    views[1, 2] = views[0, 2]  # identical views of one example
    views[0, 4] = 0.0  # a zero embedding
    x = cast_tensor(views, dtype)
    for temperature in (0.05, 1.0):
        loss = losses.InfoNCELoss(temperature=temperature)
        out, (grad,) = vjp_all_modes(lambda v, fn=loss: fn(None, v), [x], dtype=dtype)
        assert_close(out, ref.info_nce_loss(to_numpy(x), temperature), tol=(1e-4, 1e-5))
        assert_finite(grad)
        np.testing.assert_array_equal(grad[0, 4], 0.0)  # the zero embedding
    assert_close(
        to_numpy(ops.info_nce_loss(views, 0.3)), ref.info_nce_loss(views, 0.3), tol=(1e-5, 1e-6)
    )


@pytest.mark.parametrize("mode", MODES)
def test_hand_written_nt_xent_is_nan_in_float16(mode):
    """The usual `logits - 1e9 * eye` (or `* (1 - eye)`) self-mask: 1e9 is
    inf in float16, and inf * 0 = NaN off the diagonal."""
    views = np.random.default_rng(11).normal(size=(2, 4, 3)).astype("float16")
    eye = K.convert_to_tensor(np.eye(8, dtype="float16"))
    big = K.cast(K.convert_to_tensor(np.float32(1e9)), "float16")  # inf

    def plain(v):
        z = K.reshape(v, (8, 3))
        z = z / K.sqrt(K.sum(z * z, axis=1, keepdims=True))
        logits = K.matmul(z, K.transpose(z)) / 0.1 - big * eye
        log_p = K.log_softmax(logits, axis=-1)
        partner = np.concatenate([np.arange(4, 8), np.arange(4)])
        return -K.mean(K.take_along_axis(log_p, partner[:, None], axis=1))

    value, _ = vjp(plain, [views], mode=mode)
    assert np.isnan(value)
    value, (grad,) = vjp(lambda v: losses.InfoNCELoss()(None, v), [views], mode=mode)
    assert_close(value, ref.info_nce_loss(views.astype("float32"), 0.1), tol=(1e-3, 1e-3))
    assert_finite(grad)


# --- contrastive and cosine -------------------------------------------------------------------


def test_contrastive_loss_is_tf_addons_formula():
    rng = np.random.default_rng(12)
    labels = rng.integers(0, 2, 10)
    d = rng.uniform(0, 2, 10).astype("float32")
    d[:2] = 0.0
    w = rng.uniform(0, 2, 10).astype("float32")
    for margin in (1.0, 0.5):
        loss = losses.ContrastiveLoss(margin=margin)
        expected = ref.contrastive_loss(labels, d, margin)
        assert_close(to_numpy(loss(labels, d)), expected.mean())
        assert_close(to_numpy(loss(labels, d[:, None], sample_weight=w)), np.mean(expected * w))
        out, (grad,) = vjp_all_modes(lambda x, fn=loss: fn(labels, x), [d])
        y = labels.astype("float64")
        analytic = (2 * y * d - 2 * (1 - y) * np.maximum(margin - d, 0)) / 10
        assert_close(grad, analytic)
    assert_close(to_numpy(ops.contrastive_loss(labels, d)), ref.contrastive_loss(labels, d))


def test_contrastive_similar_label_zero_is_the_keras_io_convention():
    # The keras-io siamese tutorial labels a similar pair 0: `similar_label=0`
    # gives, on its labels, TF Addons' loss of the flipped labels, in the
    # value, the gradient and a saved config.
    rng = np.random.default_rng(13)
    labels = rng.integers(0, 2, 12)
    d = rng.uniform(0, 2, 12).astype("float32")
    d[:2] = 0.0
    flipped = 1 - labels
    tutorial = losses.ContrastiveLoss(margin=0.7, similar_label=0)
    expected = ref.contrastive_loss(flipped, d, 0.7)
    assert_close(to_numpy(tutorial(labels, d)), expected.mean())
    assert_close(to_numpy(ops.contrastive_loss(labels, d, 0.7, similar_label=0)), expected)
    _, (grad,) = vjp_all_modes(lambda x: tutorial(labels, x), [d])
    _, (grad_flipped,) = vjp_all_modes(
        lambda x: losses.ContrastiveLoss(margin=0.7)(flipped, x), [d]
    )
    assert_close(grad, grad_flipped)
    # A similar pair at distance 0 costs nothing under its own convention.
    assert to_numpy(tutorial(np.array([0]), np.array([0.0], "float32"))) == 0.0
    assert to_numpy(losses.ContrastiveLoss()(np.array([1]), np.array([0.0], "float32"))) == 0.0
    clone = losses.ContrastiveLoss.from_config(tutorial.get_config())
    assert clone.similar_label == 0
    assert_close(to_numpy(clone(labels, d)), expected.mean())


@pytest.mark.parametrize("bad", [2, -1, 0.5, True, "0", None])
def test_contrastive_similar_label_must_be_zero_or_one(bad):
    with pytest.raises(ValueError, match="`similar_label` must be 1"):
        losses.ContrastiveLoss(similar_label=bad)
    with pytest.raises(ValueError, match="`similar_label` must be 1"):
        ops.contrastive_loss(np.zeros(2), np.zeros(2, "float32"), similar_label=bad)


@pytest.mark.parametrize(
    "reduction", ["sum_over_batch_size", "sum", "mean_with_sample_weight", "none"]
)
def test_cosine_similarity_loss_is_keras_where_keras_is_right(reduction):
    rng = np.random.default_rng(13)
    y_true = rng.normal(size=(5, 4)).astype("float32")
    y_pred = rng.normal(size=(5, 4)).astype("float32")
    w = rng.uniform(0, 2, 5).astype("float32")
    for axis in (-1, 0):
        ours = losses.StableCosineSimilarity(axis=axis, reduction=reduction)
        theirs = keras.losses.CosineSimilarity(axis=axis, reduction=reduction)
        for weights in (None, w if axis == -1 else None):
            assert_close(
                to_numpy(ours(y_true, y_pred, sample_weight=weights)),
                to_numpy(theirs(y_true, y_pred, sample_weight=weights)),
            )
    # Keras's sign: identical vectors give -1.
    assert_close(to_numpy(losses.StableCosineSimilarity()(y_true, y_true)), -1.0)


@pytest.mark.parametrize("mode", MODES)
def test_cosine_similarity_loss_at_a_zero_vector(mode):
    y_true = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]], "float32")
    y_pred = np.array([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]], "float32")
    keras_loss = keras.losses.CosineSimilarity()
    value, (plain,) = vjp(lambda p: keras_loss(y_true, p), [y_pred], mode=mode)
    if (BACKEND == "tensorflow" and mode == "eager") or (BACKEND == "torch" and KERAS_3_16):
        # Finite but 1e6-sized (1 / sqrt(1e-12)): eager TF, and torch from
        # Keras 3.16 on.
        assert np.abs(plain[0]).max() > 1e5
    else:
        assert np.isnan(plain[0]).all()
    ours = losses.StableCosineSimilarity()
    out, (grad,) = vjp(lambda p: ours(y_true, p), [y_pred], mode=mode)
    assert_close(out, value)
    np.testing.assert_array_equal(grad[0], 0.0)
    assert_close(grad[1], plain[1])
    # The zero vector on the y_true side, and a tiny one.
    out, (grad,) = vjp(lambda t: ours(t, y_pred[1:]), [np.zeros((1, 3), "float32")], mode=mode)
    assert out == 0.0 and not grad.any()
    _, (grad,) = vjp(
        lambda p: ours(y_true[:1], p), [np.array([[0.0, 1e-30, 0.0]], "float32")], mode=mode
    )
    assert_finite(grad)


# --- bad input ------------------------------------------------------------------------------


def test_bad_arguments_raise_naming_the_argument():
    e = np.zeros((4, 3), "float32")
    with pytest.raises(ValueError, match="distance_metric"):
        losses.TripletSemiHardLoss(distance_metric="cosine")
    with pytest.raises(ValueError, match="distance_metric"):
        losses.TripletHardLoss(distance_metric=lambda x: x)
    with pytest.raises(ValueError, match="margin"):
        losses.TripletHardLoss(margin="1")
    # TF Addons takes a tensor margin; here it is a documented difference.
    tensor_margin = keras.ops.ones(())
    for make in (losses.TripletSemiHardLoss, losses.TripletHardLoss, losses.ContrastiveLoss):
        with pytest.raises(ValueError, match="`margin` must be a float.*tensor-valued margin"):
            make(margin=tensor_margin)
    with pytest.raises(ValueError, match="soft"):
        losses.TripletHardLoss(soft=1)
    for t in (0.0, -0.1, float("inf"), True):
        with pytest.raises(ValueError, match="temperature"):
            losses.InfoNCELoss(temperature=t)
    loss = losses.TripletSemiHardLoss()
    with pytest.raises(
        ValueError, match=r"`y_true` must hold integer class labels of shape \(batch,\).*\(4, 2\)"
    ):
        loss(np.zeros((4, 2), "int32"), e)
    with pytest.raises(ValueError, match=r"`y_true`.*dtype bool"):
        loss(np.zeros(4, bool), e)
    with pytest.raises(ValueError, match=r"one label per embedding.*\(3,\).*\(4, 3\)"):
        loss(np.zeros(3, "int32"), e)
    with pytest.raises(ValueError, match=r"`y_pred` must hold embeddings of shape \(batch, dim\)"):
        loss(np.zeros(4, "int32"), np.zeros((4, 3, 2), "float32"))
    with pytest.raises(ValueError, match="`sample_weight` of shape"):
        loss(np.zeros(4, "int32"), e, sample_weight=np.ones((4, 2), "float32"))
    nce = losses.InfoNCELoss()
    for bad in (
        np.zeros((4, 3), "float32"),
        np.zeros((3, 4, 3), "float32"),
        np.zeros((4, 2, 3), "float32"),
    ):
        with pytest.raises(ValueError, match=r"two views stacked as \(2, batch, dim\)"):
            nce(None, bad)
    with pytest.raises(ValueError, match="same shape"):
        losses.ContrastiveLoss()(np.zeros(4, "int32"), np.zeros(3, "float32"))


# --- memory ---------------------------------------------------------------------------------


def _jaxpr_sizes(jaxpr):
    """The element count of every value of a jaxpr: inputs, constants and
    the outputs of every equation, sub-jaxprs (`pjit`, `cond`, `while`,
    `scan`, custom derivatives) included."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)  # a ClosedJaxpr
    for var in (*jaxpr.constvars, *jaxpr.invars):
        yield int(np.prod(var.aval.shape))
    for eqn in jaxpr.eqns:
        for var in eqn.outvars:
            yield int(np.prod(getattr(var.aval, "shape", ())))
        for param in eqn.params.values():
            for sub in param if isinstance(param, (tuple, list)) else (param,):
                if hasattr(getattr(sub, "jaxpr", sub), "eqns"):
                    yield from _jaxpr_sizes(sub)


@pytest.mark.jax
def test_triplet_losses_need_quadratic_memory_in_value_and_gradient():
    """No intermediate of the jitted value-and-gradient has `batch**3`
    elements: semi-hard mining sorts each anchor's distances instead of
    TF Addons' `[anchor, positive, negative]` mask."""
    import jax

    b, dim = 64, 8
    labels, e = _batch(14, n=b, dim=dim, classes=5)
    w = np.random.default_rng(15).uniform(0.0, 2.0, b).astype("float32")
    w[:3] = 0.0

    def largest(fn):
        jaxpr = jax.make_jaxpr(jax.jit(jax.value_and_grad(fn)))(K.convert_to_tensor(e))
        return max(_jaxpr_sizes(jaxpr))

    def tfa_style(x):  # the cubic mask, to show the check sees it
        d = ops.pairwise_distance(x)
        negative = K.convert_to_tensor(labels[:, None] != labels[None, :])
        outside = negative[:, None, :] & (d[:, None, :] > d[:, :, None])
        return K.sum(K.min(K.where(outside, d[:, None, :], 1e9), axis=2))

    assert largest(tfa_style) >= b**3
    for metric in METRICS:
        for fn in (
            lambda x, m=metric: ops.triplet_semihard_loss(labels, x, 0.5, m),
            lambda x, m=metric: ops.triplet_hard_loss(labels, x, 0.5, False, m),
            lambda x, m=metric: losses.TripletSemiHardLoss(0.5, m)(labels, x, sample_weight=w),
            lambda x, m=metric: losses.TripletHardLoss(0.5, True, m)(labels, x, sample_weight=w),
        ):
            assert largest(fn) < b**3
