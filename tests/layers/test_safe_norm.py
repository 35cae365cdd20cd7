"""SafeNorm: the checks beyond the spec harness (tests/test_harness.py)."""

import numpy as np
import pytest

from keras_stable.layers import SafeNorm
from tests import backend_utils as bu
from tests import reference


def test_keepdims():
    layer = SafeNorm(axis=1, keepdims=True)
    restored = SafeNorm.from_config(layer.get_config())
    assert restored.keepdims is True and restored.axis == 1
    x = np.random.default_rng(0).normal(size=(2, 3, 4)).astype("float32")
    out = restored(x)
    assert tuple(out.shape) == restored.compute_output_shape((2, 3, 4)) == (2, 1, 4)
    bu.assert_close(bu.to_numpy(out), reference.safe_norm(x, axis=1, keepdims=True))
    # The last axis reduced with keepdims: a (batch, time) mask still leads.
    steps = np.array([[True, True, False], [False] * 3])
    assert SafeNorm(keepdims=True).compute_mask(x, steps) is steps
    # The masked axis reduced: consumed.
    assert restored.compute_mask(x, steps) is None


def test_zero_vector_value_and_gradient_are_exactly_zero():
    layer = SafeNorm()
    x = np.array([[0.0, 0.0, 0.0], [3.0, 4.0, 0.0]], "float32")
    value, (grad,) = bu.vjp_all_modes(lambda t: layer(t), [x])
    np.testing.assert_array_equal(value, [0.0, 5.0])
    np.testing.assert_array_equal(grad[0], 0.0)
    bu.assert_close(grad[1], [0.6, 0.8, 0.0])


def test_bad_keepdims():
    with pytest.raises(ValueError, match="keepdims"):
        SafeNorm(keepdims=1)
