"""Dice and Tversky (ops and classes): Keras's numbers where Keras is right,
an empty target predicted empty a perfect match, Tversky's weights as in
the paper. (Their specs for the harness are in tests/specs/losses.py.)"""

import keras
import numpy as np
import pytest

import keras_stable
from keras_stable import ops
from tests import reference_sequences as ref
from tests.backend_utils import KERAS_3_16
from tests.backend_utils import assert_close
from tests.backend_utils import assert_finite
from tests.backend_utils import finite_difference
from tests.backend_utils import tensor
from tests.backend_utils import to_numpy
from tests.backend_utils import vjp_all_modes


def _data(seed=0, shape=(4, 3, 5)):
    rng = np.random.default_rng(seed)
    y_true = (rng.random(shape) > 0.5).astype("float32")
    y_pred = rng.random(shape).astype("float32")
    y_pred[0, 0, :2] = [0.0, 1.0]  # the ends of [0, 1]
    y_true[1], y_pred[1] = 0.0, 0.0  # empty against empty
    y_true[2] = 0.0  # empty target, non-empty prediction: loss 1
    return y_true, y_pred


CASES = [
    ("dice", {}, ref.dice_loss, ops.dice_loss),
    ("tversky", {}, ref.tversky_loss, ops.tversky_loss),
    ("tversky_recall", {"alpha": 0.2, "beta": 0.8}, ref.tversky_loss, ops.tversky_loss),
    ("tversky_fp_only", {"alpha": 1.0, "beta": 0.0}, ref.tversky_loss, ops.tversky_loss),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
@pytest.mark.parametrize("axis", [(1, 2), None, 2])
def test_values_and_gradients(case, axis):
    _, kwargs, reference, op = case
    y_true, y_pred = _data()
    out, (grad,) = vjp_all_modes(lambda p: op(y_true, p, axis=axis, **kwargs), [y_pred])
    expected = reference(y_true, y_pred, axis=axis, **kwargs)
    assert_close(out, expected, "float32")
    assert_finite(grad)
    fd = finite_difference(lambda p: reference(y_true, p, axis=axis, **kwargs), y_pred)
    if axis == (1, 2):
        fd[1] = 0.0  # empty against empty: the value jumps, the gradient is 0
    assert_close(grad, fd, "float32", tol=(1e-4, 1e-5))
    if axis == (1, 2):
        assert out[1] == 0.0 and np.all(grad[1] == 0.0)
        assert out[2] == 1.0 and np.all(grad[2] == 0.0)


def test_keras_parity_where_keras_is_right():
    y_true, y_pred = _data(1)
    y_true[1, 0, 0] = 1.0  # no empty-empty image: Keras is right on all
    axis = (1, 2)
    ours = ops.dice_loss(y_true, y_pred, axis=axis)
    theirs = keras.losses.dice(y_true, y_pred, axis=axis)
    assert_close(to_numpy(ours), to_numpy(theirs), "float32")  # Keras's 1e-7
    for alpha, beta in [(0.5, 0.5), (0.2, 0.8)]:
        ours = ops.tversky_loss(y_true, y_pred, alpha=alpha, beta=beta, axis=axis)
        # Keras 3.15.1 weights the false negatives by `alpha` (fixed in 3.16).
        swapped = {} if KERAS_3_16 else {"alpha": beta, "beta": alpha}
        theirs = keras.losses.tversky(
            y_true, y_pred, **{"alpha": alpha, "beta": beta, **swapped}, axis=axis
        )
        assert_close(to_numpy(ours), to_numpy(theirs), "float32")


def test_keras_docstring_example():
    y_true = [[[[1.0], [1.0]], [[0.0], [0.0]]], [[[1.0], [1.0]], [[0.0], [0.0]]]]
    y_pred = [[[[0.0], [1.0]], [[0.0], [1.0]]], [[[0.4], [0.0]], [[0.0], [0.9]]]]
    y_true, y_pred = np.array(y_true, "float32"), np.array(y_pred, "float32")
    per_image = keras_stable.losses.StableDice(axis=(1, 2, 3), reduction=None)(y_true, y_pred)
    assert_close(to_numpy(per_image), [0.5, 0.75757575], "float32")
    assert_close(to_numpy(keras_stable.losses.StableDice()(y_true, y_pred)), 0.6164384, "float32")
    tversky = keras_stable.losses.StableTversky(axis=(1, 2, 3), reduction=None)
    assert_close(to_numpy(tversky(y_true, y_pred)), [0.5, 0.75757575], "float32")


def test_empty_against_empty_is_a_perfect_match():
    empty = np.zeros((2, 4, 4, 1), "float32")
    for loss in (
        keras_stable.losses.StableDice(axis=(1, 2, 3)),
        keras_stable.losses.StableTversky(alpha=0.3, beta=0.7, axis=(1, 2, 3)),
        keras_stable.losses.StableDice(),
    ):
        out, (grad,) = vjp_all_modes(lambda p, loss=loss: loss(empty, p), [empty])
        assert out == 0.0 and np.all(grad == 0.0), type(loss).__name__
    assert float(to_numpy(keras.losses.Dice(axis=(1, 2, 3))(empty, empty))) == 1.0


@pytest.mark.parametrize("alpha,beta", [(0.5, 0.5), (0.3, 0.7), (1.0, 1.0), (2.0, 0.25)])
def test_perfect_binary_prediction_is_zero(alpha, beta):
    # FP and FN are sums of products that are exactly 0 here.
    y_true = (np.random.default_rng(5).uniform(size=(3, 32, 32, 1)) < 0.3).astype("float32")
    out = to_numpy(ops.tversky_loss(y_true, y_true, alpha=alpha, beta=beta, axis=(1, 2, 3)))
    assert np.all(out == 0.0), out


def test_tversky_alpha_weights_false_positives():
    y_true = np.array([[1.0, 0.0, 0.0]], "float32")
    over = np.array([[1.0, 1.0, 1.0]], "float32")  # two false positives
    under = np.array([[0.0, 0.0, 0.0]], "float32") + np.array([[0.5, 0, 0]], "float32")
    loss = keras_stable.losses.StableTversky(alpha=1.0, beta=0.0, axis=1, reduction="none")
    assert_close(to_numpy(loss(y_true, over)), [1.0 - 1.0 / 3.0], "float32")
    assert_close(to_numpy(loss(y_true, under)), [0.0], "float32")  # FN are free


def test_half_precision_and_sample_weight():
    y_true, y_pred = _data(2)
    half = tensor(y_pred, "float16")
    out = ops.dice_loss(y_true, half, axis=(1, 2))
    assert keras.backend.standardize_dtype(out.dtype) == "float16"
    expected = ref.dice_loss(y_true, to_numpy(half), axis=(1, 2))
    assert_close(to_numpy(out), expected, "float16")
    weights = np.array([1.0, 2.0, 0.0, 0.5], "float32")
    loss = keras_stable.losses.StableTversky(alpha=0.4, beta=0.6, axis=(1, 2))
    value = to_numpy(loss(y_true, y_pred, sample_weight=weights))
    per_image = ref.tversky_loss(y_true, y_pred, 0.4, 0.6, axis=(1, 2))
    assert_close(value, np.sum(weights * per_image) / 4, "float32")


def test_bad_input():
    y = np.zeros((2, 3), "float32")
    with pytest.raises(ValueError, match="same shape"):
        ops.dice_loss(y, np.zeros((2, 4), "float32"))
    with pytest.raises(ValueError, match="Invalid `axis`=2"):
        ops.tversky_loss(y, y, axis=2)
    with pytest.raises(ValueError, match="`alpha` must be a finite number >= 0"):
        keras_stable.losses.StableTversky(alpha=-0.1)
    with pytest.raises(ValueError, match="`beta` must be a finite number >= 0"):
        keras_stable.losses.StableTversky(beta=True)
    with pytest.raises(ValueError, match="`axis` must be"):
        keras_stable.losses.StableDice(axis="1")


@pytest.mark.parametrize("p", [1e-21, 1e-30, 1e-36])
def test_confident_background_on_an_empty_target_is_finite_compiled(p):
    # A well-trained model on an empty slice: the denominator sum(p) is
    # tiny and its square subnormal, which XLA flushes to 0 (issue #38,
    # item 3: NaN/inf gradients under XLA on TF and JAX). The exact loss is
    # 1 (no overlap is possible) and its gradient 0 (the numerator is 0).
    y_true = np.zeros((2, 4, 4, 1), "float32")
    y_pred = np.full((2, 4, 4, 1), p, "float32")
    for loss in (
        keras_stable.losses.StableDice(axis=(1, 2, 3)),
        keras_stable.losses.StableTversky(alpha=0.3, beta=0.7, axis=(1, 2, 3)),
        keras_stable.losses.StableDice(),
    ):
        out, (grad,) = vjp_all_modes(lambda q, loss=loss: loss(y_true, q), [y_pred])
        assert out == 1.0 and np.all(grad == 0.0), (type(loss).__name__, out, grad)
    # A target with foreground: the gradient is the exact ratio's.
    y_true[0, 0, 0, 0] = 1.0
    out, (grad,) = vjp_all_modes(lambda q: ops.dice_loss(y_true, q, axis=(1, 2, 3)), [y_pred])
    expected = ref.dice_loss(y_true, y_pred.astype("float64"), axis=(1, 2, 3))
    assert_close(out, expected, "float32")
    assert_finite(grad)
