"""StableSigmoidCrossEntropy: values vs float64 and Keras, T10 and T12, and
missing (NaN) labels, which count for nothing (issue 12)."""

import keras
import numpy as np
import pytest

from keras_stable import losses
from keras_stable import metrics
from keras_stable import ops as stable_ops
from keras_stable.common.reduction import reduce_losses
from keras_stable.losses import StableSigmoidCrossEntropy
from tests import reference
from tests.backend_utils import BACKEND
from tests.backend_utils import MODES
from tests.backend_utils import NP_DTYPES
from tests.backend_utils import REDUCTIONS
from tests.backend_utils import assert_close
from tests.backend_utils import assert_finite
from tests.backend_utils import to_numpy
from tests.backend_utils import value
from tests.backend_utils import vjp_all_modes


def _data(seed=0):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(6, 3)).astype("float32") * 3
    labels = rng.integers(0, 2, size=(6, 3)).astype("float32")
    sw = rng.uniform(0, 2, size=(6,)).astype("float32")
    return labels, logits, sw


@pytest.mark.parametrize("label_smoothing", [0.0, 0.3])
def test_matches_keras_for_every_reduction(label_smoothing):
    labels, logits, sw = _data()
    for reduction in REDUCTIONS:
        ours = StableSigmoidCrossEntropy(label_smoothing=label_smoothing, reduction=reduction)
        keras_loss = keras.losses.BinaryCrossentropy(
            from_logits=True, label_smoothing=label_smoothing, reduction=reduction
        )
        for weights in (None, sw):
            assert_close(
                to_numpy(ours(labels, logits, sample_weight=weights)),
                to_numpy(keras_loss(labels, logits, sample_weight=weights)),
                what=f"{reduction}, weights={weights is not None}",
            )


def test_extreme_logits_vs_reference():
    labels = np.array([[1.0, 0.0, 1.0, 0.0, 0.5, 1.0]], "float32")
    logits = np.array([[-100.0, 100.0, -1e4, 1e4, 0.5, 30.0]], "float32")
    loss = StableSigmoidCrossEntropy(reduction="none")
    out, (grad,) = vjp_all_modes(lambda x: loss(labels, x), [logits])
    assert_close(out, reference.sigmoid_cross_entropy(labels, logits).mean(-1))
    sig = 0.5 * (1 + np.tanh(logits.astype("float64") / 2))
    assert_close(grad, (sig - labels) / 6)


def test_gradient_at_logit_zero():
    loss = StableSigmoidCrossEntropy(reduction="sum")
    _, (grad,) = vjp_all_modes(
        lambda x: loss(np.array([[0.5, 1.0]], "float32"), x), [np.zeros((1, 2), "float32")]
    )
    assert_close(grad, [[0.0, -0.25]])


def test_probabilities_are_not_clipped():
    loss = StableSigmoidCrossEntropy(from_logits=False, reduction="none")
    labels = np.array([[0.0, 1.0, 0.3]], "float32")
    probs = np.array([[0.0, 1.0, 0.6]], "float32")
    out, (grad,) = vjp_all_modes(lambda p: loss(labels, p), [probs])
    expected = -(0.3 * np.log(0.6) + 0.7 * np.log(0.4)) / 3
    assert_close(out, [expected])
    assert_finite(grad)
    # The true derivatives of -log(1 - p) at p = 0 and -log(p) at p = 1.
    assert_close(grad[0, :2], [1 / 3, -1 / 3])
    # p = 0 with label 1: the saturated -log(1.1754944e-38) = 87.34 (the
    # true value is +inf), where Keras reports 15.94 / 16.12 with grad 0.
    out, (grad,) = vjp_all_modes(
        lambda p: loss(np.array([[1.0]], "float32"), p), [np.array([[0.0]], "float32")]
    )
    assert_close(out, [-np.log(np.finfo(np.float32).tiny)])
    np.testing.assert_array_equal(grad, 0.0)


def test_rank_one_and_trailing_axis():
    labels = np.array([1.0, 0.0], "float32")
    logits = np.array([[2.0], [-1.0]], "float32")
    out = to_numpy(StableSigmoidCrossEntropy(reduction="none")(labels, logits))
    assert_close(out, reference.sigmoid_cross_entropy(labels, logits[:, 0]))


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="label_smoothing"):
        StableSigmoidCrossEntropy(label_smoothing=-1)
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(2, 2\)"):
        StableSigmoidCrossEntropy()(np.zeros((2, 3), "float32"), np.zeros((2, 2), "float32"))


# --------------------------------------------------------------------------
# Missing labels (issue 12): NaN in y_true counts for nothing
# --------------------------------------------------------------------------


MISSING_TRUE = np.array(
    [[1.0, np.nan, 0.0], [np.nan, np.nan, np.nan], [0.3, 1.0, np.nan], [0.0, 1.0, 1.0]],
    "float32",
)
# Extreme logits under the missing labels: whatever they are, they count for nothing.
MISSING_LOGITS = np.array(
    [[0.5, 1e4, -2.5], [1.0, -1e4, 3.0], [-1.0, 0.5, -1e4], [0.25, 2.0, -0.75]], "float32"
)
MISSING_SW = np.array([0.5, 3.0, 1.0, 2.0], "float32")


def _sigmoid64(x):
    return 0.5 * (1.0 + np.tanh(np.asarray(x, "float64") / 2.0))


def _ref_missing(labels, logits, label_smoothing=0.0, axis=-1):
    """float64: per-example mean over the observed labels along `axis`, the
    examples with one, and d(per-example) / d(logits)."""
    labels = np.asarray(labels, "float64")
    observed = ~np.isnan(labels)
    smoothed = np.where(observed, labels, 0.0) * (1 - label_smoothing) + 0.5 * label_smoothing
    elementwise = np.where(observed, reference.sigmoid_cross_entropy(smoothed, logits), 0.0)
    count = observed.sum(axis)
    per_example = np.where(count > 0, elementwise.sum(axis) / np.maximum(count, 1), 0.0)
    slope = np.where(observed, _sigmoid64(logits) - smoothed, 0.0)
    grad = slope / np.expand_dims(np.maximum(count, 1), axis)
    return per_example, count > 0, grad


def _reduce_ref(per_example, valid, sw, reduction):
    """float64 reduction; returns the value and d(value) / d(per-example)."""
    weighted = np.where(valid, per_example * sw, 0.0)
    divisor = {
        "sum_over_batch_size": valid.sum(),
        "mean": valid.sum(),
        "sum": 1.0,
        "mean_with_sample_weight": sw[valid].sum(),
        "none": 1.0,
    }[reduction]
    value = weighted if reduction == "none" else weighted.sum() / divisor
    return value, np.where(valid, sw, 0.0) / divisor


@pytest.mark.parametrize("from_logits", [True, False])
def test_keras_is_nan_on_a_missing_label_even_with_sample_weight_0(from_logits):
    """The trap of issue 12: the example holding the NaN label is weighted
    out, and Keras's BinaryCrossentropy still returns NaN (`0 * NaN`); torch
    refuses probability targets outside [0, 1] outright."""
    y_true = MISSING_TRUE[[0, 3]]
    y_pred = MISSING_LOGITS[[0, 3]]
    if not from_logits:
        y_pred = np.array([[0.6, 0.999, 0.1], [0.5, 0.8, 0.3]], "float32")
    sw = np.array([0.0, 1.0], "float32")
    theirs = keras.losses.BinaryCrossentropy(from_logits=from_logits)
    if BACKEND == "torch" and not from_logits:
        with pytest.raises(RuntimeError, match="between 0 and 1"):
            theirs(y_true, y_pred, sample_weight=sw)
    else:
        assert np.isnan(to_numpy(theirs(y_true, y_pred, sample_weight=sw)))
    ours = StableSigmoidCrossEntropy(from_logits=from_logits)
    out, (grad,) = vjp_all_modes(lambda p: ours(y_true, p, sample_weight=sw), [y_pred])
    # The finite value of the other entries: Keras's number with the NaN
    # replaced by any label (its example has weight 0 anyway).
    filled = np.nan_to_num(y_true, nan=0.0)
    assert_close(out, to_numpy(theirs(filled, y_pred, sample_weight=sw)))
    assert np.isfinite(out)
    assert_finite(grad)
    np.testing.assert_array_equal(grad[0], 0.0)  # weight 0, NaN label included
    assert np.all(grad[1] != 0)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_missing_labels_count_for_nothing(reduction, dtype):
    """Value: the mean over the observed labels of each example, examples
    without one left out of the reduction's count; the gradient of a
    missing entry is exactly 0; eagerly and compiled, in every dtype."""
    logits = MISSING_LOGITS
    if dtype != "float32":
        logits = logits.astype(NP_DTYPES[dtype]).astype("float32")
    loss = StableSigmoidCrossEntropy(label_smoothing=0.1, reduction=reduction)
    out, (grad,) = vjp_all_modes(
        lambda p: loss(MISSING_TRUE, p, sample_weight=MISSING_SW),
        [keras.ops.cast(logits, dtype)],
        dtype=dtype,
    )
    per_example, valid, d_per_example = _ref_missing(MISSING_TRUE, logits, 0.1)
    expected, d_value = _reduce_ref(per_example, valid, MISSING_SW, reduction)
    assert_close(out, expected)  # float32 result, from logits exact in float32
    assert_close(grad, d_per_example * d_value[:, None], dtype)
    np.testing.assert_array_equal(grad[np.isnan(MISSING_TRUE)], 0.0)
    assert np.all(grad[~np.isnan(MISSING_TRUE)] != 0)


def test_missing_labels_from_probabilities():
    probs = np.array(
        [[0.6, 0.0, 0.1], [0.5, 1.0, 0.2], [0.5, 0.8, 1.0], [0.1, 0.9, 0.7]], "float32"
    )
    loss = StableSigmoidCrossEntropy(from_logits=False, reduction="none")
    out, (grad,) = vjp_all_modes(lambda p: loss(MISSING_TRUE, p), [probs])
    observed = ~np.isnan(MISSING_TRUE)
    elementwise = reference.sigmoid_cross_entropy_from_probabilities(
        np.nan_to_num(MISSING_TRUE), probs
    )
    per_example, _ = reference.mean_over_observed(
        np.where(observed, elementwise, 0.0), MISSING_TRUE
    )
    assert_close(out, per_example)
    assert_finite(grad)
    np.testing.assert_array_equal(grad[~observed], 0.0)


def test_an_example_without_labels_counts_for_nothing():
    y_true = np.array([[np.nan, np.nan], [1.0, 0.0]], "float32")
    logits = np.array([[3.0, -1e4], [0.5, -0.5]], "float32")
    loss = StableSigmoidCrossEntropy()
    out, (grad,) = vjp_all_modes(lambda p: loss(y_true, p), [logits])
    assert_close(
        out, to_numpy(keras.losses.BinaryCrossentropy(from_logits=True)(y_true[1:], logits[1:]))
    )
    np.testing.assert_array_equal(grad[0], 0.0)
    assert_finite(grad)
    # A batch without any label: 0, with a zero gradient.
    nothing = np.full((2, 2), np.nan, "float32")
    out, (grad,) = vjp_all_modes(lambda p: loss(nothing, p), [logits])
    assert out == 0.0
    np.testing.assert_array_equal(grad, 0.0)


def test_missing_labels_on_other_axes_and_ranks():
    rng = np.random.default_rng(7)
    labels = rng.integers(0, 2, (3, 4, 2)).astype("float32")
    labels[rng.random(labels.shape) < 0.3] = np.nan
    labels[1, :, 0] = np.nan  # a slice along axis 1 with nothing observed
    logits = rng.normal(size=(3, 4, 2)).astype("float32") * 3
    loss = StableSigmoidCrossEntropy(axis=1, reduction="none")
    out, (grad,) = vjp_all_modes(lambda p: loss(labels, p), [logits])
    per_example, _, d_per_example = _ref_missing(labels, logits, axis=1)
    assert_close(out, per_example)
    assert_close(grad, d_per_example)
    # (batch,) labels against (batch, 1) logits, and rank 1 on both sides.
    flat = np.array([1.0, np.nan, 0.0], "float32")
    column = np.array([[2.0], [-1e4], [0.5]], "float32")
    for y_pred in (column, column[:, 0]):
        out, (grad,) = vjp_all_modes(lambda p: StableSigmoidCrossEntropy()(flat, p), [y_pred])
        expected = reference.sigmoid_cross_entropy(flat[[0, 2]], column[[0, 2], 0]).sum() / 2
        assert_close(out, expected)
        assert grad.reshape(-1)[1] == 0.0


@pytest.mark.parametrize("mode", MODES)
def test_missing_labels_through_fit(mode):
    """A multi-label model trained on partly missing labels: Keras's
    BinaryCrossentropy turns the weights NaN, StableSigmoidCrossEntropy
    trains."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 4)).astype("float32")
    y = (x @ rng.normal(size=(4, 3)) > 0).astype("float32")
    y[rng.random(y.shape) < 0.3] = np.nan

    def train(loss):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        jit = mode == "compiled"
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss, jit_compile=jit)
        history = model.fit(x, y, batch_size=8, epochs=3, verbose=0)
        return history.history["loss"], model.get_weights()

    plain, weights = train(keras.losses.BinaryCrossentropy(from_logits=True))
    assert np.isnan(plain[-1]) and np.isnan(weights[0]).any()
    ours, weights = train(StableSigmoidCrossEntropy())
    assert np.all(np.isfinite(ours)) and ours[-1] < ours[0]
    assert all(np.isfinite(w).all() for w in weights)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.3])
def test_without_missing_labels_the_value_is_unchanged_bit_for_bit(label_smoothing):
    """No NaN label: the number of 0.1.0's formula (Keras's mean over the
    last axis, then the reduction), to the last bit. Eagerly for every
    reduction; compiled for the per-example values - the reduced value of
    0.1.0 was not stable there: XLA turned its division by the constant
    batch size into a multiplication by the reciprocal (one ulp off the
    eager value), where the count of labelled examples now divides it as
    eagerly."""
    labels, logits, sw = _data(5)

    def before(y_true, y_pred, sample_weight, reduction):
        s = label_smoothing
        y_true = y_true * (1.0 - s) + 0.5 * s if s else y_true
        values = keras.ops.mean(stable_ops.sigmoid_cross_entropy(y_true, y_pred), axis=-1)
        return reduce_losses(values, sample_weight, reduction=reduction)

    for reduction in REDUCTIONS:
        loss = StableSigmoidCrossEntropy(label_smoothing=label_smoothing, reduction=reduction)
        for weights in (None, sw):
            args = [labels, logits] + ([] if weights is None else [weights])

            def ours(y, p, w=None, loss=loss):
                return loss(y, p, sample_weight=w)

            def old(y, p, w=None, reduction=reduction):
                return before(y, p, w, reduction)

            what = f"{reduction}, weights={weights is not None}"
            np.testing.assert_array_equal(value(ours, args), value(old, args), err_msg=what)
            if reduction == "none":
                for mode in MODES[1:]:
                    np.testing.assert_array_equal(
                        value(ours, args, mode), value(old, args, mode), err_msg=what
                    )


@pytest.mark.parametrize(
    "cls", [losses.StableSigmoidCrossEntropy, losses.StableSigmoidFocalCrossEntropy]
)
def test_labels_outside_the_unit_interval_raise(cls):
    """Binary labels must lie in [0, 1]: NumPy labels outside it are a
    `ValueError` naming `y_true`, its shape and the bad range (tensors are
    not read: a compiled step cannot raise on values); NaN (a missing
    label) is allowed."""
    logits = np.zeros((2, 3), "float32")
    with pytest.raises(ValueError, match=r"`y_true` must hold labels in \[0, 1\].*2\.0.*\(2, 3\)"):
        cls()(np.array([[0.0, 1.0, 2.0], [0.0, 0.5, 1.0]], "float32"), logits)
    with pytest.raises(ValueError, match=r"from -1\.0 to -1\.0"):
        cls()([[0.0, 1.0, -1.0], [0.0, 0.5, 1.0]], logits)
    value = cls()(np.array([[0.0, np.nan, 1.0], [0.0, 0.5, 1.0]], "float32"), logits)
    assert np.isfinite(to_numpy(value))
    metric = metrics.StableBinaryCrossEntropy()
    with pytest.raises(ValueError, match=r"`y_true` must hold labels in \[0, 1\]"):
        metric.update_state(np.array([[3.0, 0.0, 0.0]], "float32"), logits[:1])
