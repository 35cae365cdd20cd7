"""L2Normalize: the checks beyond the spec harness (tests/test_harness.py)."""

import numpy as np

from keras_stable.layers import L2Normalize
from tests import backend_utils as bu


def test_zero_vector_maps_to_zero_with_zero_gradient():
    layer = L2Normalize()
    x = np.array([[0.0, 0.0], [3.0, 4.0]], "float32")
    value, (grad,) = bu.vjp_all_modes(
        lambda t: layer(t), [x], cotangent=np.array([[1.0, 2.0], [1.0, 0.0]])
    )
    np.testing.assert_array_equal(value[0], 0.0)
    np.testing.assert_array_equal(grad[0], 0.0)
    bu.assert_close(grad[1], [0.64 / 5, -0.48 / 5])
