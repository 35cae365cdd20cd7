"""`sparsemax` against float64 references, on its traps.

The traps: Keras 3.15.1's `keras.ops.sparsemax` gives `[0, 0, 0.25]` for
`[0, 0.5, 1]` (not a distribution; the projection is `[0, 0.25, 0.75]`);
`-inf` and masked entries; a row with nothing left; half precision; and
the gradient, which must be the exact Jacobian product.
"""

import keras
import numpy as np
import pytest

from keras_stable import ops
from tests import reference_log_space as logspace_ref
from tests.backend_utils import DTYPES
from tests.backend_utils import KERAS_3_16
from tests.backend_utils import MODES
from tests.backend_utils import assert_close
from tests.backend_utils import assert_finite
from tests.backend_utils import cast_tensor
from tests.backend_utils import finite_difference
from tests.backend_utils import float64_arithmetic
from tests.backend_utils import float64_enabled
from tests.backend_utils import round_to
from tests.backend_utils import to_numpy
from tests.backend_utils import vjp
from tests.backend_utils import vjp_all_modes
from tests.migration.page import compiled


def _data(seed=0):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(6, 5)).astype("float32")
    logits[0] = [0.0, 0.5, 1.0, -np.inf, 0.25]
    logits[1] = [-np.inf] * 5  # nothing left
    logits[2] = [1e4, -1e4, 0.0, 1e4 - 0.5, 3.0]  # large, shift-invariant
    logits[3] = [2.0, 2.0, 2.0, 2.0, 2.0]  # uniform
    return logits


@pytest.mark.parametrize("dtype", DTYPES)
def test_matches_reference_with_exact_jacobian(dtype):
    logits = _data()
    cot = np.random.default_rng(1).normal(size=logits.shape)
    out, (grad,) = vjp_all_modes(
        ops.sparsemax, [cast_tensor(logits, dtype)], cotangent=cot, dtype=dtype
    )
    x = round_to(logits, dtype)
    assert_close(out, round_to(logspace_ref.sparsemax(x), dtype), dtype)
    assert_close(grad, round_to(logspace_ref.sparsemax_grad(x, cot), dtype), dtype)
    assert_finite(grad)
    valid = np.isfinite(x).any(-1)
    assert_close(out.sum(-1), valid.astype("float64"), dtype)
    np.testing.assert_array_equal(out[1], 0.0)
    np.testing.assert_array_equal(grad[1], 0.0)
    assert out[0, 3] == 0.0 and grad[0, 3] == 0.0


def test_keras_sparsemax_is_wrong_where_ours_is_exact():
    x = np.array([[0.0, 0.5, 1.0]], "float32")
    keras_out = to_numpy(keras.ops.sparsemax(x))
    out = to_numpy(ops.sparsemax(x))
    assert_close(out, [[0.0, 0.25, 0.75]])
    if KERAS_3_16:  # fixed upstream: Keras's number is now ours
        assert_close(keras_out, out)
    else:
        assert abs(keras_out.sum() - 1.0) > 0.5  # [0, 0, 0.25] in Keras 3.15.1


def test_half_precision_and_axis():
    x = keras.ops.convert_to_tensor(np.array([[65504.0, -65504.0, 65503.5]], "float16"))
    out = ops.sparsemax(x)
    assert keras.backend.standardize_dtype(out.dtype) == "float16"
    assert_close(to_numpy(out), logspace_ref.sparsemax(to_numpy(x)), "float16")
    logits = _data(2)
    out = to_numpy(ops.sparsemax(logits.T, axis=0))
    assert_close(out, logspace_ref.sparsemax(logits.T, axis=0))


def test_mask_and_nan_under_it():
    logits = _data(3)
    logits[4, 2] = np.nan
    mask = np.ones(logits.shape, bool)
    mask[4, 2] = False
    mask[5] = False
    cot = np.random.default_rng(4).normal(size=logits.shape)
    out, (grad,) = vjp_all_modes(lambda x: ops.sparsemax(x, mask=mask), [logits], cotangent=cot)
    assert_close(out, logspace_ref.sparsemax(logits, mask=mask))
    assert_close(grad, logspace_ref.sparsemax_grad(logits, cot, mask=mask))
    assert out[4, 2] == 0.0 and grad[4, 2] == 0.0
    np.testing.assert_array_equal(out[5], 0.0)
    np.testing.assert_array_equal(grad[5], 0.0)


def test_tuple_axes_and_symbolic_unknown_batch():
    x = np.random.default_rng(6).normal(size=(2, 3, 4)).astype("float32")

    def three(t):
        return (
            ops.sparsemax(t, axis=(0, 2)),
            ops.sparsemax(t, axis=None),
            ops.sparsemax(t, axis=()),
        )

    pair, whole, alone = (to_numpy(o) for o in compiled(three)(x))
    assert_close(pair, logspace_ref.sparsemax(x, axis=(0, 2)))
    assert_close(whole, logspace_ref.sparsemax(x, axis=(0, 1, 2)))
    assert_close(alone, np.ones_like(x))
    symbolic = ops.sparsemax(keras.KerasTensor((None, 3, 4)), axis=(1, 2))
    assert tuple(symbolic.shape) == (None, 3, 4)


def test_plus_inf_and_nan_as_softmax():
    x = np.array([[np.inf, 0.0, 1.0], [np.nan, 0.0, 1.0], [1.0, 2.0, 3.0]], "float32")
    out = to_numpy(ops.sparsemax(x))
    assert np.isnan(out[0, 0]) and (out[0, 1:] == 0.0).all()
    assert np.isnan(out[1]).all()
    assert_close(out[2], [0.0, 0.0, 1.0])


@float64_arithmetic
def test_gradient_equals_finite_differences_in_float64():
    logits = np.random.default_rng(5).normal(size=(3, 6)) * 0.5
    with float64_enabled():
        out, (grad,) = vjp(
            lambda x: keras.ops.multiply(ops.sparsemax(x), np.arange(6.0)), [logits], mode=MODES[-1]
        )
    np.testing.assert_allclose(
        out, logspace_ref.sparsemax(logits) * np.arange(6.0), rtol=1e-12, atol=1e-15
    )
    fd = finite_difference(lambda v: logspace_ref.sparsemax(v) * np.arange(6.0), logits)
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: ops.sparsemax(np.ones((2, 3), "float32"), axis=2), r"`axis`=2"),
        (lambda: ops.sparsemax(np.ones((2, 3), "float32"), axis="1"), r"`axis` must be an int"),
        (
            lambda: ops.sparsemax(np.ones((2, 3), "float32"), mask=np.ones((4,), bool)),
            r"`mask` of shape \(4,\)",
        ),
    ],
)
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()
