"""StableSigmoidCrossEntropy: values vs float64 and Keras, T10 and T12."""

import keras
import numpy as np
import pytest

from keras_stable.losses import StableSigmoidCrossEntropy
from tests import reference
from tests.backend_utils import assert_close
from tests.backend_utils import assert_finite
from tests.backend_utils import to_numpy
from tests.backend_utils import vjp_all_modes

REDUCTIONS = ("sum_over_batch_size", "sum", "mean", "mean_with_sample_weight", "none")


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
