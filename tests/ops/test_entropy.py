"""`entropy` against float64 references, on its traps.

The traps: a class of probability 0 (`-inf` logit or masked) makes the
hand-written `-sum(softmax(x) * log_softmax(x))` NaN (`0 * -inf`), value
and gradient; a row with nothing left; half precision; a nearly one-hot
row, whose small entropy `log(1 + tiny)` rounds away.
"""

import keras
import numpy as np
import pytest

from keras_stable import ops
from tests import reference_log_space as logspace_ref
from tests.backend_utils import DTYPES
from tests.backend_utils import MODES
from tests.backend_utils import assert_close
from tests.backend_utils import assert_finite
from tests.backend_utils import cast_tensor
from tests.backend_utils import finite_difference
from tests.backend_utils import float64_enabled
from tests.backend_utils import round_to
from tests.backend_utils import to_numpy
from tests.backend_utils import value
from tests.backend_utils import vjp
from tests.backend_utils import vjp_all_modes
from tests.migration.page import compiled


def _data(seed=0):
    rng = np.random.default_rng(seed)
    logits = (rng.normal(size=(6, 4)) * 3).astype("float32")
    logits[0] = [0.0, -np.inf, 0.0, 0.0]
    logits[1] = [0.0, -30.0, -np.inf, -200.0]  # nearly one-hot
    logits[2] = [-np.inf] * 4  # nothing left
    logits[3] = [10.0, 10.0, 10.0, 10.0]  # uniform, log 4
    return logits


@pytest.mark.parametrize("dtype", DTYPES)
def test_matches_reference_with_finite_gradients(dtype):
    logits = _data()
    cot = np.random.default_rng(1).normal(size=6)
    out, (grad,) = vjp_all_modes(
        ops.entropy, [cast_tensor(logits, dtype)], cotangent=cot, dtype=dtype
    )
    x = round_to(logits, dtype)
    assert_close(out, round_to(logspace_ref.entropy(x), dtype), dtype)
    assert_close(grad, round_to(logspace_ref.entropy_grad(x, cot), dtype), dtype)
    assert_finite(grad)
    assert out[2] == 0.0
    np.testing.assert_array_equal(grad[2], 0.0)
    assert grad[0, 1] == 0.0


def test_edge_values_exact():
    rows = np.array([[0.0, -np.inf, -np.inf], [0.0, 0.0, -np.inf], [-np.inf] * 3], "float32")
    out, (grad,) = vjp_all_modes(ops.entropy, [rows])
    np.testing.assert_array_equal(out, np.float32([0.0, np.log(2.0), 0.0]))
    np.testing.assert_array_equal(grad, 0.0)
    # A nearly one-hot row keeps its entropy, where log(1 + 9e-14) rounds to 0.
    out = value(ops.entropy, [np.array([0.0, -30.0], "float32")], mode=MODES[-1])
    assert_close(out, logspace_ref.entropy([0.0, -30.0]))


def test_half_precision_is_computed_in_float32():
    x = keras.ops.convert_to_tensor(np.array([65504.0, -65504.0], "float16"))
    out = ops.entropy(x)
    assert keras.backend.standardize_dtype(out.dtype) == "float16"
    assert to_numpy(out) == 0.0
    out = ops.entropy(cast_tensor([[20.0, 20.0, -20.0]], "bfloat16"))
    assert_close(to_numpy(out), [np.log(2.0)], "bfloat16")


def test_naive_formula_is_nan_where_ours_is_zero():
    x = np.array([[0.0, -np.inf]], "float32")

    def naive(t):
        return -keras.ops.sum(keras.ops.softmax(t) * keras.ops.log_softmax(t), axis=-1)

    out, (grad,) = vjp(naive, [x])
    assert np.isnan(out).all() or np.isnan(grad).any()
    out, (grad,) = vjp_all_modes(ops.entropy, [x])
    assert out[0] == 0.0
    np.testing.assert_array_equal(grad, 0.0)


def test_mask_and_nan_under_it():
    logits = _data(2)
    logits[4, 2] = np.nan
    mask = np.ones((6, 4), bool)
    mask[4, 2] = False
    mask[5] = False
    out, (grad,) = vjp_all_modes(lambda x: ops.entropy(x, mask=mask), [logits])
    assert_close(out, logspace_ref.entropy(logits, mask=mask))
    assert_close(grad, logspace_ref.entropy_grad(logits, np.ones(6), mask=mask))
    assert out[5] == 0.0
    assert grad[4, 2] == 0.0
    np.testing.assert_array_equal(grad[5], 0.0)


def test_tuple_axes_keepdims_and_scalar_axes():
    x = np.random.default_rng(3).normal(size=(2, 3, 4)).astype("float32")

    def both(t):
        return ops.entropy(t, axis=(0, 2), keepdims=True), ops.entropy(t, axis=None)

    kept, whole = (to_numpy(o) for o in compiled(both)(x))
    assert kept.shape == (1, 3, 1)
    assert_close(kept[0, :, 0], logspace_ref.entropy(x, axis=(0, 2)))
    assert_close(whole, logspace_ref.entropy(x, axis=None))


def test_plus_inf_is_nan_as_softmax():
    x = np.array([[np.inf, 0.0], [1.0, 2.0]], "float32")
    out = to_numpy(ops.entropy(x))
    assert np.isnan(out[0]) and np.isnan(to_numpy(ops.softmax(x))[0, 0])
    assert np.isfinite(out[1])


def test_gradient_equals_finite_differences_in_float64():
    logits = np.random.default_rng(4).normal(size=(3, 5)) * 2
    with float64_enabled():
        out, (grad,) = vjp(lambda x: ops.entropy(x, axis=0), [logits], mode=MODES[-1])
    np.testing.assert_allclose(out, logspace_ref.entropy(logits, axis=0), rtol=1e-12)
    fd = finite_difference(lambda v: logspace_ref.entropy(v, axis=0), logits)
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: ops.entropy(np.ones((2, 3), "float32"), axis=2), r"`axis`=2"),
        (lambda: ops.entropy(np.ones((2, 3), "float32"), axis="1"), r"`axis` must be an int"),
        (
            lambda: ops.entropy(np.ones((2, 3), "float32"), mask=np.ones((4,), bool)),
            r"`mask` of shape \(4,\)",
        ),
    ],
)
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()
