"""`kl_divergence` against float64 references, on its traps.

The traps: a zero label (`0 * log(0)`: a single `where` still leaks NaN
into the gradient), and a saturated softmax output (Keras clips the
probabilities at 1e-7: 16.1 instead of 30 for the logits `[0, 30, -30]`).
"""

import keras
import numpy as np
import pytest

from keras_stable import ops
from tests import reference as ref
from tests.backend_utils import DTYPES
from tests.backend_utils import assert_close
from tests.backend_utils import assert_finite
from tests.backend_utils import cast_tensor
from tests.backend_utils import finite_difference
from tests.backend_utils import float64_enabled
from tests.backend_utils import round_to
from tests.backend_utils import to_numpy
from tests.backend_utils import vjp
from tests.backend_utils import vjp_all_modes


def _data(seed=0):
    rng = np.random.default_rng(seed)
    logits = (rng.normal(size=(5, 4)) * 3).astype("float32")
    labels = rng.dirichlet(np.ones(4), size=5).astype("float32")
    labels[0] = [1.0, 0.0, 0.0, 0.0]  # one-hot: zero labels
    logits[1] = [0.0, 30.0, -30.0, -200.0]  # saturated
    labels[1] = [1.0, 0.0, 0.0, 0.0]
    logits[2, 3] = -np.inf  # a zero label on an impossible class
    labels[2] = [0.25, 0.25, 0.5, 0.0]
    return labels, logits


@pytest.mark.parametrize("dtype", DTYPES)
def test_matches_reference_with_finite_gradients(dtype):
    labels, logits = _data()
    out, (grad_labels, grad_logits) = vjp_all_modes(
        ops.kl_divergence, [labels, cast_tensor(logits, dtype)], wrt=(0, 1), dtype=dtype
    )
    expected = ref.kl_divergence(labels, round_to(logits, dtype))
    assert_close(out, round_to(expected, dtype), dtype)
    assert_finite(grad_labels)
    assert_finite(grad_logits)
    assert grad_logits[2, 3] == 0.0
    # A zero label has a zero gradient (the derivative of y log y is -inf).
    np.testing.assert_array_equal(grad_labels[0, 1:], 0.0)


def test_masked_and_fully_masked_rows():
    labels, logits = _data(1)
    mask = np.ones((5, 4), bool)
    mask[3, 1] = False
    labels[3] = [0.5, 0.0, 0.5, 0.0]
    mask[4] = False
    out, (grad,) = vjp_all_modes(lambda x: ops.kl_divergence(labels, x, mask=mask), [logits])
    assert_close(out, ref.kl_divergence(labels, logits, mask=mask))
    assert out[4] == 0.0
    np.testing.assert_array_equal(grad[4], 0.0)
    assert grad[3, 1] == 0.0


def test_gradient_equals_finite_differences_in_float64():
    rng = np.random.default_rng(4)
    labels = rng.dirichlet(np.ones(5), size=3)
    logits = rng.normal(size=(3, 5)) * 2
    with float64_enabled():
        _, (g_labels, g_logits) = vjp(
            lambda y, x: ops.kl_divergence(y, x, axis=0), [labels, logits], wrt=(0, 1)
        )
    fd = finite_difference(lambda v: ref.kl_divergence(v, logits, axis=0), labels)
    np.testing.assert_allclose(g_labels, fd, rtol=1e-6, atol=1e-7)
    fd = finite_difference(lambda v: ref.kl_divergence(labels, v, axis=0), logits)
    np.testing.assert_allclose(g_logits, fd, rtol=1e-6, atol=1e-7)


def test_saturated_softmax_is_exact_where_keras_clips():
    labels = np.array([[1.0, 0.0, 0.0]], "float32")
    logits = np.array([[0.0, 30.0, -30.0]], "float32")
    keras_loss = keras.losses.KLDivergence(reduction="none")
    keras_value = to_numpy(keras_loss(labels, keras.activations.softmax(cast_tensor(logits))))
    assert keras_value[0] < 16.2  # log(1 / 1e-7), every backend
    out, (grad,) = vjp_all_modes(lambda x: ops.kl_divergence(labels, x), [logits])
    assert_close(out, [30.0])
    assert_close(grad, [[-1.0, 1.0, 0.0]], tol=(1e-5, 1e-6))


def test_zero_label_hand_written_single_where_leaks_nan():
    """The single-where fix of `0 * log(0)` still has a NaN gradient."""
    labels = keras.ops.convert_to_tensor(np.array([[1.0, 0.0]], "float32"))
    logits = np.array([[1.0, 2.0]], "float32")

    def single_where(y):
        term = keras.ops.where(y > 0, y * keras.ops.log(y), 0.0)
        return keras.ops.sum(term - y * keras.ops.log_softmax(cast_tensor(logits)))

    _, (grad,) = vjp(single_where, [labels])
    assert np.isnan(grad).any()
    _, (grad,) = vjp_all_modes(lambda y: ops.kl_divergence(y, logits), [labels])
    assert_finite(grad)


def test_impossible_class_and_bad_labels():
    logits = np.array([[0.0, -np.inf, 1.0]] * 2, "float32")
    labels = np.array([[0.5, 0.5, 0.0], [1.2, -0.2, 0.0]], "float32")
    out, (grad,) = vjp_all_modes(lambda x: ops.kl_divergence(labels, x), [logits])
    assert out[0] == np.inf
    assert np.isnan(out[1])  # a negative label
    assert_finite(grad[0])


def test_probabilities_match_keras_where_its_clip_is_inactive():
    labels, logits = _data(2)
    labels, logits = labels[2:], logits[2:]
    labels[0] = [0.25, 0.25, 0.5, 0.0]
    logits[0, 3] = 0.0
    probs = np.exp(ref.log_softmax(logits)).astype("float32")
    labels = np.maximum(labels, 0.01)  # Keras clips zero labels to 1e-7
    labels /= labels.sum(-1, keepdims=True)
    ours = ops.kl_divergence(labels, probs, from_logits=False)
    keras_value = keras.losses.KLDivergence(reduction="none")(labels, probs)
    assert_close(to_numpy(ours), to_numpy(keras_value), tol=(1e-5, 1e-6))


@pytest.mark.parametrize(
    "call, match",
    [
        (
            lambda: ops.kl_divergence(np.ones((2, 4), "float32"), np.ones((2, 3), "float32")),
            r"labels.shape=\(2, 4\).*logits.shape=\(2, 3\)",
        ),
        (
            lambda: ops.kl_divergence(
                np.ones((2, 3), "float32"), np.ones((2, 3), "float32"), axis=2
            ),
            r"`axis`=2",
        ),
        (
            lambda: ops.kl_divergence(
                np.ones((2, 3), "float32"), np.ones((2, 3), "float32"), axis="1"
            ),
            r"`axis` must be an int",
        ),
        (
            lambda: ops.kl_divergence(
                np.ones((2, 3), "float32"), np.ones((2, 3), "float32"), mask=np.ones((4,), bool)
            ),
            r"`mask` of shape \(4,\)",
        ),
    ],
)
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()
