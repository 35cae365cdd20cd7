"""StableSparseSoftmaxCrossEntropy: values vs float64 and Keras, labels, T11."""

import keras
import numpy as np
import pytest

from keras_stable.losses import StableSparseSoftmaxCrossEntropy
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
    labels = rng.integers(0, 4, size=(6,)).astype("int32")
    labels[[1, 4]] = -1
    sw = rng.uniform(0, 2, size=(6,)).astype("float32")
    return labels, logits, sw


def test_matches_keras_for_every_reduction():
    labels, logits, sw = _data()
    for ignore_class in (None, -1):
        y = labels if ignore_class is not None else np.abs(labels)
        for reduction in REDUCTIONS:
            ours = StableSparseSoftmaxCrossEntropy(ignore_class=ignore_class, reduction=reduction)
            keras_loss = keras.losses.SparseCategoricalCrossentropy(
                from_logits=True, ignore_class=ignore_class, reduction=reduction
            )
            for weights in (None, sw):
                assert_close(
                    to_numpy(ours(y, logits, sample_weight=weights)),
                    to_numpy(keras_loss(y, logits, sample_weight=weights)),
                    what=f"{ignore_class}, {reduction}, weights={weights is not None}",
                )


def test_values_and_gradients_vs_reference():
    labels, logits, _ = _data(1)
    logits[0, (labels[0] + 1) % 4] = -np.inf
    loss = StableSparseSoftmaxCrossEntropy(ignore_class=-1)
    out, (grad,) = vjp_all_modes(lambda x: loss(labels, x), [logits])
    ref = reference.sparse_softmax_cross_entropy(labels, logits, ignore_class=-1)
    assert_close(out, ref.sum() / 4)  # mean over the 4 non-ignored examples
    assert_finite(grad)
    np.testing.assert_array_equal(grad[labels == -1], 0.0)


@pytest.mark.parametrize("reduction", ["sum_over_batch_size", "sum", "mean", "none"])
def test_all_ignored_gives_zero_and_zero_gradient(reduction):
    labels = np.array([-1, -1], "int32")
    logits = np.array([[1.0, 2.0, 3.0], [-np.inf, 0.0, 1.0]], "float32")
    loss = StableSparseSoftmaxCrossEntropy(ignore_class=-1, reduction=reduction)
    out, (grad,) = vjp_all_modes(lambda x: loss(labels, x), [logits])
    np.testing.assert_array_equal(out, 0.0)
    np.testing.assert_array_equal(grad, 0.0)


def test_labels_stay_exact_integers():
    # Keras casts labels to the loss dtype: 2049 becomes 2048 in float16.
    logits = np.zeros((1, 2050), "float32")
    logits[0, 2049] = 10.0
    labels = np.array([2049], "int32")
    expected = reference.sparse_softmax_cross_entropy(labels, logits)[0]
    ours = StableSparseSoftmaxCrossEntropy(dtype="float16")(labels, logits)
    assert_close(to_numpy(ours), expected, "float16")
    keras_value = to_numpy(
        keras.losses.SparseCategoricalCrossentropy(from_logits=True, dtype="float16")(
            labels, logits
        )
    )
    assert abs(keras_value - expected) > 5  # the label landed on class 2048


def test_float_labels():
    logits = np.array([[0.0, 3.0, 1.0], [2.0, 0.0, 0.0], [1.0, 1.0, 1.0]], "float32")
    int_loss = StableSparseSoftmaxCrossEntropy(reduction="none")(np.array([1, 0, 2]), logits)
    for mode in MODES:
        out = value(
            lambda y: StableSparseSoftmaxCrossEntropy(reduction="none")(y, logits),
            [np.array([1.0, 0.0, 2.0], "float32")],
            mode,
        )
        assert_close(out, to_numpy(int_loss))
        # (batch, 1) labels, as Keras's data adapters often produce.
        out = value(
            lambda y: StableSparseSoftmaxCrossEntropy(reduction="none")(y, logits),
            [np.array([[1.0], [0.0], [2.0]], "float32")],
            mode,
        )
        assert_close(out, to_numpy(int_loss))
        # A fractional or NaN label: NaN, not a truncated class.
        out = value(
            lambda y: StableSparseSoftmaxCrossEntropy(reduction="none", ignore_class=0)(y, logits),
            [np.array([1.5, np.nan, 0.0], "float32")],
            mode,
        )
        assert np.isnan(out[:2]).all() and out[2] == 0.0


def test_float64_labels_are_read_in_float64():
    """A float64 label of 3 + 1e-10 is fractional: NaN, not class 3 (Keras's
    torch and JAX `floor` returns float32, but the comparison with the
    float64 label promotes back to float64)."""
    from tests.backend_utils import float64_enabled

    logits = np.zeros((2, 5), "float32")
    with float64_enabled():
        labels = keras.ops.convert_to_tensor(np.array([3.0 + 1e-10, 2.0]))
        out = to_numpy(StableSparseSoftmaxCrossEntropy(reduction="none")(labels, logits))
    assert np.isnan(out[0]) and abs(out[1] - np.log(5.0)) < 1e-6


def test_out_of_range_label_is_nan():
    out = to_numpy(StableSparseSoftmaxCrossEntropy()(np.array([3]), np.zeros((1, 3), "float32")))
    assert np.isnan(out)


def test_probabilities():
    probs = np.array([[0.5, 0.0, 0.5], [0.2, 0.3, 0.5]], "float32")
    loss = StableSparseSoftmaxCrossEntropy(from_logits=False, reduction="none")
    out, (grad,) = vjp_all_modes(lambda p: loss(np.array([0, 1]), p), [probs])
    assert_close(out, [np.log(2.0), -np.log(0.3)])
    assert_finite(grad)
    out = to_numpy(loss(np.array([1]), probs[:1]))
    # The saturated -log(1.1754944e-38) = 87.34 (the true value is +inf);
    # Keras: 16.118 with a zero gradient.
    assert_close(out, [-np.log(np.finfo(np.float32).tiny)])


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="ignore_class"):
        StableSparseSoftmaxCrossEntropy(ignore_class=1.0)
    with pytest.raises(ValueError, match=r"labels.*\(2, 2\).*\(2, 3\)"):
        StableSparseSoftmaxCrossEntropy()(np.zeros((2, 2), "int32"), np.zeros((2, 3), "float32"))
    with pytest.raises(ValueError, match="bool"):
        StableSparseSoftmaxCrossEntropy()(np.zeros((2,), bool), np.zeros((2, 3), "float32"))
