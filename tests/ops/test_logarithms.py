"""`keras_stable/ops/logarithms.py`: the one `safe_log` (the softmax
family's `log(sum(exp(z)))`, the Poisson rate) and `saturated_log`."""

import numpy as np
import pytest

from keras_stable.ops.logarithms import safe_log
from keras_stable.ops.logarithms import saturated_log
from tests.backend_utils import MODES
from tests.backend_utils import assert_close
from tests.backend_utils import vjp

TINY = np.float32(1.1754943508222875e-38)


@pytest.mark.parametrize("mode", MODES)
def test_safe_log_values_and_gradients(mode):
    x = np.array([2.0, 1.0, 1e-30, 0.0, -1.0, np.nan, np.inf], "float32")
    out, (grad,) = vjp(safe_log, [x], mode=mode)
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = np.log(x.astype("float64"))
    assert_close(out, expected, "float32", "value")
    # Exactly 0 at 0 (no 1/0) and for a negative input (its NaN is a
    # constant); NaN flows on through `log`, value and gradient.
    assert_close(grad, [0.5, 1.0, 1e30, 0.0, 0.0, np.nan, 0.0], "float32", "gradient")


@pytest.mark.parametrize("mode", MODES)
def test_saturated_log_values_and_gradients(mode):
    """Saturated below the smallest normal number (a zero gradient there);
    negative and NaN probabilities give NaN with a zero gradient."""
    x = np.array([0.5, TINY, 0.0, -1.0, np.nan], "float32")
    out, (grad,) = vjp(saturated_log, [x], mode=mode)
    log_tiny = np.log(np.float64(TINY))
    assert_close(out, [np.log(0.5), log_tiny, log_tiny, np.nan, np.nan], "float32", "value")
    assert_close(grad, [2.0, 1.0 / np.float64(TINY), 0.0, 0.0, 0.0], "float32", "gradient")
