"""`GaussianSampling` beyond the harness (tests/specs/blocks.py): the keras-io
`Sampling` layer's numbers with the same seed, and half precision at a
log-variance where that layer overflows."""

import keras
import numpy as np
import pytest

from keras_stable.layers import GaussianSampling
from tests.backend_utils import assert_close
from tests.backend_utils import assert_finite
from tests.backend_utils import dtype_of
from tests.backend_utils import round_to
from tests.backend_utils import to_numpy
from tests.backend_utils import vjp
from tests.harness.common import dtype_policy
from tests.migration.transcriptions import KerasIOSampling

SHAPE = (64, 8)


def _eps():
    """The first draw of a seed-1337 generator: the layer at mean 0, lv 0."""
    zeros = np.zeros(SHAPE, "float32")
    return to_numpy(GaussianSampling(seed=1337)([zeros, zeros]))


def test_same_numbers_as_keras_io_sampling():
    rng = np.random.default_rng(0)
    mean = rng.normal(size=SHAPE).astype("float32")
    lv = rng.normal(size=SHAPE).astype("float32")
    ours = to_numpy(GaussianSampling(seed=1337)([mean, lv]))
    theirs = to_numpy(KerasIOSampling()([mean, lv]))
    assert_close(ours, theirs)
    assert_close(ours, mean + np.exp(0.5 * lv.astype("float64")) * _eps())


def test_mixed_float16_log_variance_24():
    """`lv = 24` under mixed_float16: keras-io's `exp(0.5 * lv)` in float16
    is inf (from lv = 22.2), so every sample is inf or NaN. Ours computes in
    float32: each sample is `exp(12) * eps` rounded to float16, finite
    wherever it is below 65504 (|eps| < 0.4), inf only where the sample
    itself is beyond float16; its gradients are finite."""
    eps = _eps()
    mean = np.zeros(SHAPE, "float32")
    lv = np.full(SHAPE, 24.0, "float32")
    with dtype_policy("mixed_float16"):
        layer = GaussianSampling(seed=1337)
        ours = layer([mean, lv])
        # keras-io's formula in the compute dtype (its float32 `eps` times a
        # float16 tensor is an error on TensorFlow, inf on JAX and torch).
        h_mean, h_lv = keras.ops.cast(mean, "float16"), keras.ops.cast(lv, "float16")
        h_eps = keras.ops.cast(eps, "float16")
        theirs = to_numpy(h_mean + keras.ops.exp(0.5 * h_lv) * h_eps)
        _, (g_mean, g_lv) = vjp(
            lambda m, v: GaussianSampling(seed=1337)([m, v]), [mean, lv], wrt=(0, 1)
        )
    assert dtype_of(ours) == "float16"
    ours = to_numpy(ours)
    expected = round_to(np.exp(12.0) * eps, "float16")
    assert_close(ours, expected, "float16")
    finite = np.isfinite(ours)
    assert 0.25 < finite.mean() < 0.5, finite.mean()  # P(|eps| < 0.4) = 0.31
    assert not np.isfinite(theirs).any()
    assert_finite(g_mean)
    assert_finite(g_lv)
    assert_close(g_lv, 0.5 * np.exp(12.0) * eps, tol=(1e-5, 1e-3))


def test_bad_inputs():
    layer = GaussianSampling(seed=1)
    zeros = np.zeros((2, 3), "float32")
    with pytest.raises(ValueError, match=r"`\[mean, log_variance\]`"):
        layer(zeros)
    with pytest.raises(ValueError, match=r"`mean`.*`log_variance`.*\(2, 3\).*\(2, 4\)"):
        layer([zeros, np.zeros((2, 4), "float32")])
    with pytest.raises(ValueError, match="`seed`"):
        GaussianSampling(seed=1.5)
