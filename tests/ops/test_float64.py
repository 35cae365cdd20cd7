"""float64 in, float64 out, to float64's round-off, for every public op.

Keras's torch and JAX backends follow JAX's default promotion and compute
float64 in float32 in some ops (`maximum`, `matmul` on torch; `tanh` on
JAX), so an op composed of them would return float64 holding float32
round-off. Every op is checked here against its float64 NumPy reference
(`tests/reference*.py`; the cases are in each op's spec, tests/specs/ops.py) at float64's tolerance; JAX runs under
`jax.enable_x64`. The core ops' edge grid is checked the same way in
`test_values_and_gradients.py`. The one exception is documented:
`linear_softmax_cross_entropy` computes and returns float32 (its block
loops hold float32 accumulators), for float64 inputs too.
"""

import keras
import numpy as np
import pytest

from keras_stable import ops
from tests import reference as ref
from tests.backend_utils import assert_close
from tests.backend_utils import float64_enabled
from tests.backend_utils import vjp
from tests.specs.ops import float64_cases

rng = np.random.default_rng(64)
# (id, op, reference, arguments) from every op's spec: each float argument
# is given as float64.
CASES = float64_cases()


@pytest.mark.parametrize("name, op, reference, args", CASES, ids=[c[0] for c in CASES])
def test_float64_in_float64_out(name, op, reference, args):
    with float64_enabled():
        tensors = [keras.ops.convert_to_tensor(np.asarray(a)) for a in args]
        out = op(*tensors)
        dtype = keras.backend.standardize_dtype(out.dtype)
        out = np.asarray(keras.ops.convert_to_numpy(out), "float64")
    assert dtype == "float64", f"{name} returned {dtype}"
    assert_close(out, reference(*args), "float64", what=f"{name} in float64")


def test_the_large_vocabulary_head_is_float32_as_documented():
    hidden, kernel = rng.normal(size=(5, 3)), rng.normal(size=(3, 7))
    tokens = np.array([0, 6, 3, 2, 5])
    with float64_enabled():
        out = ops.linear_softmax_cross_entropy(
            keras.ops.convert_to_tensor(hidden), keras.ops.convert_to_tensor(kernel), tokens
        )
        assert keras.backend.standardize_dtype(out.dtype) == "float32"
        out = keras.ops.convert_to_numpy(out)
    expected = ref.sparse_softmax_cross_entropy(tokens, hidden @ kernel)
    assert_close(out, expected, "float32")


def test_the_float64_helpers_values_and_gradients():
    """`common.dtypes`' `maximum`, `minimum`, `mean` and `tanh` in float64:
    NumPy's values; a tie's gradient goes to the first argument, a NaN
    propagates, and `tanh`'s derivative is `1 - tanh**2` (1 at 0)."""
    from keras_stable.common import dtypes

    a = np.array([-3.0, -1e-9, 0.0, 0.0, 1e-9, 0.7, 25.0, np.nan])
    b = np.array([1.0, 0.0, 0.0, 2.0, -1.0, 0.7, 30.0, 1.0])
    with float64_enabled():
        ta, tb = keras.ops.convert_to_tensor(a), keras.ops.convert_to_tensor(b)
        for fn, expected in ((dtypes.maximum, np.fmax), (dtypes.minimum, np.fmin)):
            out = fn(ta, tb)
            assert keras.backend.standardize_dtype(out.dtype) == "float64"
            got = np.asarray(keras.ops.convert_to_numpy(out))
            np.testing.assert_array_equal(got[:-1], expected(a, b)[:-1])
            assert np.isnan(got[-1]) and np.isnan(keras.ops.convert_to_numpy(fn(tb, ta))[-1])
            _, (ga, gb) = vjp(fn, [ta, tb], wrt=(0, 1), mode="eager")
            chosen = got[:-1] == a[:-1]
            np.testing.assert_array_equal(ga[:-1], chosen.astype("float64"))
            np.testing.assert_array_equal(gb[:-1], 1.0 - chosen)
        x = np.array([[1.0 / 3.0, -2.0, 1e-300], [5.0, 0.1, -0.2]])
        got = keras.ops.convert_to_numpy(dtypes.mean(keras.ops.convert_to_tensor(x), axis=0))
        assert_close(got, x.mean(axis=0), "float64")
        t = a[:-1]
        value, (grad,) = vjp(dtypes.tanh, [keras.ops.convert_to_tensor(t)], mode="eager")
    assert_close(value, np.tanh(t), "float64")
    assert_close(grad, 1.0 - np.tanh(t) ** 2, "float64")
