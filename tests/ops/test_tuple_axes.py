"""Tuples of axes, negative ones included, for every op that takes them.

`check_axis(..., multiple=True)` (`keras_stable/common/checks.py`) is the
one normalisation: each axis is read modulo the rank, the tuple sorted,
and an axis named twice (after normalisation: `(-1, 2)` on a rank-3
input) is a `ValueError`. `keras.ops.softmax` and `log_softmax` on
TensorFlow (Keras 3.15.1) raise "`axes` must be a valid permutation"
for `axis=(-1, -2)`; these ops give the value. Values and gradients are
checked against float64 NumPy, and against the same call with the
axes written non-negative (identical results).
"""

import keras
import numpy as np
import pytest

from tests.backend_utils import MODES
from tests.backend_utils import assert_close
from tests.backend_utils import vjp
from tests.specs.ops import axes_ops

RNG = np.random.default_rng(5)
X = RNG.normal(size=(2, 3, 4)) * 3.0
COT = RNG.normal(size=(2, 3, 4))
# (written, non-negative): negative axes, mixed signs, unsorted, a list.
AXES = {
    "(-1, -2)": ((-1, -2), (1, 2)),
    "(-2, -1)": ((-2, -1), (1, 2)),
    "(0, -1)": ((0, -1), (0, 2)),
    "(-3, 1)": ((-3, 1), (0, 1)),
    "[-1, 0, -2]": ([-1, 0, -2], (0, 1, 2)),
    "(-3,)": ((-3,), (0,)),
}


# name -> `Axes`: op(x, axis), float64 value and gradient (tests/specs/ops.py).
OPS = axes_ops()
REDUCTIONS = [name for name, spec in OPS.items() if spec.reduces]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("axes", list(AXES))
@pytest.mark.parametrize("name", list(OPS))
def test_tuple_axes_with_negative_entries_match_float64(name, axes, mode):
    op, value, gradient = OPS[name].op, OPS[name].value, OPS[name].gradient
    written, canonical = AXES[axes]
    x = X.astype("float32")
    expected = value(X, canonical)
    cot = COT if expected.shape == X.shape else np.sum(COT, axis=canonical)
    out, (grad,) = vjp(
        lambda t: op(t, axis=written), [x], cotangent=cot.astype("float32"), mode=mode
    )
    assert_close(out, expected, "float32", f"{name} axis={axes} value vs float64")
    assert_close(grad, gradient(X, canonical, cot), "float32", f"{name} axis={axes} gradient")
    # The same computation as with the axes written non-negative.
    same, (same_grad,) = vjp(
        lambda t: op(t, axis=canonical), [x], cotangent=cot.astype("float32"), mode=mode
    )
    np.testing.assert_array_equal(out, same)
    np.testing.assert_array_equal(grad, same_grad)


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("name", REDUCTIONS)
def test_reductions_keep_the_normalised_axes(name, keepdims):
    op, value = OPS[name].op, OPS[name].value
    out = keras.ops.convert_to_numpy(op(X.astype("float32"), axis=(-1, 0), keepdims=keepdims))
    expected = value(X, (0, 2))
    if keepdims:
        expected = np.expand_dims(expected, (0, 2))
    assert out.shape == expected.shape
    assert_close(out, expected, "float32", f"{name} keepdims={keepdims}")


@pytest.mark.parametrize("axis", [(-1, 2), (0, -3), (1, -2, 0), [-1, -1]], ids=str)
@pytest.mark.parametrize("name", list(OPS))
def test_an_axis_named_twice_is_a_value_error(name, axis):
    op = OPS[name].op
    with pytest.raises(ValueError, match="repeats an axis"):
        op(X.astype("float32"), axis=axis)


@pytest.mark.parametrize("name", list(OPS))
def test_an_axis_out_of_range_in_a_tuple_is_a_value_error(name):
    with pytest.raises(ValueError, match=r"Invalid `axis`=-4 .* rank 3"):
        OPS[name].op(X.astype("float32"), axis=(0, -4))
