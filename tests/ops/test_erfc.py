"""The float32 `erfc` and `log1p` of `log_ndtr` (`ops/_erfc.py`) against
float64, eager and compiled: within 1 unit in the last place of the
float32 rounding of the exact value, where `keras.ops.erfc` under XLA is
up to 63 units off."""

import math

import numpy as np
import pytest

from keras_stable.ops._erfc import erfc32
from keras_stable.ops._erfc import log1p32
from tests.backend_utils import value


def _ulps(actual, expected):
    """Units in the last place of the float32 rounding of `expected`."""
    expected32 = expected.astype("float32")
    unit = np.spacing(np.abs(expected32)).astype("float64")
    return np.abs(actual.astype("float64") - expected32.astype("float64")) / unit


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_erfc32_within_1_ulp(mode):
    # Down to erfc(9.1) = 1.5e-38, the smallest normal float32 (XLA
    # flushes the subnormals below).
    z = np.linspace(-4.0, 9.1, 6000).astype("float32")
    expected = np.array([math.erfc(v) for v in z.astype("float64")])
    assert _ulps(value(erfc32, [z], mode=mode), expected).max() <= 1


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_erfc32_edges(mode):
    z = np.array([np.inf, -np.inf, np.nan, 10.5, -10.5, 45.0, 0.0], "float32")
    out = value(erfc32, [z], mode=mode)
    np.testing.assert_array_equal(out, [0.0, 2.0, np.nan, 0.0, 2.0, 0.0, 1.0])


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_log1p32_within_1_ulp(mode):
    y = -np.concatenate([np.geomspace(1e-30, 0.5, 3000), np.linspace(0.01, 0.5, 3000)])
    y = y.astype("float32")
    expected = np.log1p(y.astype("float64"))
    assert _ulps(value(log1p32, [y], mode=mode), expected).max() <= 1
