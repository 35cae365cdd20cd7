"""StableSoftmaxCrossEntropy: values vs float64 and Keras, traps T8-T10."""

import keras
import numpy as np
import pytest

from keras_stable.losses import StableSoftmaxCrossEntropy
from tests import reference
from tests.backend_utils import MODES
from tests.backend_utils import REDUCTIONS
from tests.backend_utils import assert_close
from tests.backend_utils import assert_finite
from tests.backend_utils import to_numpy
from tests.backend_utils import value
from tests.backend_utils import vjp_all_modes


def _data(seed=0):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(6, 4)).astype("float32") * 3
    labels = rng.dirichlet(np.ones(4), size=6).astype("float32")
    sw = rng.uniform(0, 2, size=(6,)).astype("float32")
    return labels, logits, sw


def test_matches_keras_for_every_reduction():
    labels, logits, sw = _data()
    for reduction in REDUCTIONS:
        ours = StableSoftmaxCrossEntropy(reduction=reduction)
        keras_loss = keras.losses.CategoricalCrossentropy(from_logits=True, reduction=reduction)
        for weights in (None, sw):
            assert_close(
                to_numpy(ours(labels, logits, sample_weight=weights)),
                to_numpy(keras_loss(labels, logits, sample_weight=weights)),
                what=f"{reduction}, weights={weights is not None}",
            )


@pytest.mark.parametrize("label_smoothing", [0.0, 0.2])
def test_values_and_gradients_vs_reference(label_smoothing):
    labels, logits, _ = _data(1)
    logits[0, 1] = -np.inf
    labels[0] = [0.3, 0.0, 0.7, 0.0]
    loss = StableSoftmaxCrossEntropy(label_smoothing=label_smoothing)
    out, (grad,) = vjp_all_modes(lambda x: loss(labels, x), [logits])
    expected = np.mean(
        reference.softmax_cross_entropy(labels, logits, label_smoothing=label_smoothing)
    )
    assert_close(out, expected)
    assert_finite(grad)
    assert grad[0, 1] == 0.0
    # Gradient of the mean: (softmax - smoothed labels) / batch, finite rows.
    valid = np.isfinite(logits)
    n = valid.sum(-1, keepdims=True)
    smoothed = labels * (1 - label_smoothing) + np.where(valid, label_smoothing / n, 0.0)
    probs = np.exp(reference.log_softmax(logits))
    assert_close(grad, (probs - smoothed) / 6, tol=(1e-5, 1e-6))


def test_neg_inf_logit_on_zero_label_is_finite_where_keras_is_nan():
    labels = np.array([[1.0, 0.0, 0.0]], "float32")
    logits = np.array([[2.0, -np.inf, 0.0]], "float32")
    for mode in MODES:
        out = value(lambda x: StableSoftmaxCrossEntropy()(labels, x), [logits], mode)
        assert_close(out, 0.126928, tol=(1e-5, 1e-6))
    keras_value = to_numpy(keras.losses.CategoricalCrossentropy(from_logits=True)(labels, logits))
    assert np.isnan(keras_value)  # the trap, eagerly (T8)


def test_overflowing_logits_stay_exact():
    labels = np.array([[0.0, 1.0, 0.0]], "float32")
    logits = np.array([[1000.0, 999.0, 0.0]], "float32")
    expected = reference.softmax_cross_entropy(labels, logits)[0]
    assert_close(to_numpy(StableSoftmaxCrossEntropy()(labels, logits)), expected)
    for half in ("float16", "bfloat16"):
        f16 = keras.ops.convert_to_tensor(np.array([[20.0, -20.0], [100.0, -100.0]]), half)
        out = StableSoftmaxCrossEntropy(reduction="none")(
            np.array([[0.0, 1.0]] * 2, "float32"), f16
        )
        assert keras.backend.standardize_dtype(out.dtype) == "float32"
        assert_close(to_numpy(out), [40.0, 200.0])  # T9


def test_probabilities_are_not_clipped():
    loss = StableSoftmaxCrossEntropy(from_logits=False)
    # p = 0 on a zero-label class: contributes 0, finite gradient.
    labels = np.array([[1.0, 0.0, 0.0]], "float32")
    probs = np.array([[0.8, 0.0, 0.2]], "float32")
    out, (grad,) = vjp_all_modes(lambda p: loss(labels, p), [probs])
    assert_close(out, -np.log(0.8))
    assert_finite(grad)
    assert grad[0, 1] == 0.0
    # Renormalised like Keras.
    probs2 = np.array([[0.4, 0.1, 0.1]], "float32")
    assert_close(
        to_numpy(loss(labels, probs2)),
        to_numpy(keras.losses.CategoricalCrossentropy()(labels, probs2)),
    )
    # p = 0 on the true class: the saturated -log(1.1754944e-38) = 87.34
    # (the true value is +inf), where Keras reports 16.118 with grad 0 (T10).
    bad = np.array([[0.0, 0.5, 0.5]], "float32")
    out, (grad,) = vjp_all_modes(lambda p: loss(labels, p), [bad])
    assert_close(out, -np.log(np.finfo(np.float32).tiny))
    assert_finite(grad)
    assert grad[0, 0] == 0.0
    keras_value = to_numpy(keras.losses.CategoricalCrossentropy()(labels, bad))
    assert_close(keras_value, -np.log(1e-7), tol=(1e-4, 1e-4))


def test_zero_weight_removes_an_infinite_example():
    labels = np.array([[1.0, 0.0], [0.0, 1.0]], "float32")
    logits = np.array([[-np.inf, 0.0], [0.0, 1.0]], "float32")  # row 0 is +inf
    sw = np.array([0.0, 1.0], "float32")
    out = to_numpy(StableSoftmaxCrossEntropy()(labels, logits, sample_weight=sw))
    assert_close(out, reference.softmax_cross_entropy(labels[1:], logits[1:])[0] / 2)


def test_class_axis():
    labels, logits, _ = _data(2)
    out = StableSoftmaxCrossEntropy(axis=0, reduction="none")(labels.T, logits.T)
    assert_close(to_numpy(out), reference.softmax_cross_entropy(labels, logits))


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="label_smoothing"):
        StableSoftmaxCrossEntropy(label_smoothing=-0.1)
    with pytest.raises(ValueError, match="label_smoothing"):
        StableSoftmaxCrossEntropy(label_smoothing=1.0)
    with pytest.raises(ValueError, match="from_logits"):
        StableSoftmaxCrossEntropy(from_logits="yes")
    with pytest.raises(ValueError, match="axis"):
        StableSoftmaxCrossEntropy(axis=1.5)
    with pytest.raises(ValueError, match="reduction"):
        StableSoftmaxCrossEntropy(reduction="avg")
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(2, 4\)"):
        StableSoftmaxCrossEntropy()(np.zeros((2, 3), "float32"), np.zeros((2, 4), "float32"))
    with pytest.raises(ValueError, match=r"sample_weight.*\(3,\)"):
        StableSoftmaxCrossEntropy()(
            np.zeros((2, 3), "float32"), np.zeros((2, 3), "float32"), sample_weight=np.ones(3)
        )
