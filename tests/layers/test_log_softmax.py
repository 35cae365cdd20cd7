"""LogSoftmax: the checks beyond the spec harness (tests/test_harness.py)."""

import numpy as np

from keras_stable.layers import LogSoftmax
from tests import backend_utils as bu


def test_fully_masked_row_gives_neg_inf_and_zero_gradient():
    layer = LogSoftmax()
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], "float32")
    mask = np.array([[True, True, False], [False] * 3])
    value, (grad,) = bu.vjp_all_modes(
        lambda t, m: layer(t, mask=m), [x, mask], cotangent=np.ones((2, 3))
    )
    np.testing.assert_array_equal(value[1], -np.inf)
    np.testing.assert_array_equal(grad[1], 0.0)
    # Finite entries: the gradient of the log-softmax over [1, 2].
    p = np.exp(value[0, :2])
    bu.assert_close(grad[0, :2], 1.0 - 2.0 * p)
