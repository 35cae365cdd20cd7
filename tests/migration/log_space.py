"""The checks of the log-space rows of the page's "Functions" table.

TensorFlow Probability is not installed: its functions are transcribed from
its source in float64 NumPy (`tfp.math.log1mexp` reads `x` as `-|x|`), and
each check also shows the hand-written formula failing where the
replacement is finite.
"""

import math

import numpy as np
from keras import ops as kops

import keras_stable as ks
from tests import reference_log_space as logspace_ref
from tests.migration.page import F64
from tests.migration.page import _normal
from tests.migration.page import _rng
from tests.migration.page import agree
from tests.migration.page import compiled
from tests.migration.page import tensors


def _tfp_log1mexp(x):
    """`tfp.math.log1mexp`: `log(1 - exp(-|x|))`, Maechler's switch."""
    x = np.abs(np.asarray(x, F64))
    return np.where(x < math.log(2.0), np.log(-np.expm1(-x)), np.log1p(-np.exp(-x)))


def _tfp_log_ndtr(x):
    """`tfp.math.log_ndtr` (= `Normal(0, 1).log_cdf`) in float64: `log(ndtr)`
    from `erfc`, exact in float64 for these moderate `x`."""
    x = np.asarray(x, F64)
    return np.log(0.5 * np.vectorize(math.erfc)(-x / math.sqrt(2.0)))


def _tfp_softplus_inverse(x):
    """`tfp.math.softplus_inverse`: `log(expm1(x))` (its thresholds only
    matter in the float32 tails)."""
    return np.log(np.expm1(np.asarray(x, F64)))


def function_log1mexp():
    magnitude = _rng(130).uniform(0.01, 5.0, (6, 4)).astype("float32")
    right = compiled(lambda a: ks.ops.log1mexp(-kops.abs(a)))(magnitude)
    agree(right, _tfp_log1mexp(magnitude), "numpy tfp.math.log1mexp")
    (x,) = tensors(-magnitude)
    agree(right, kops.log(1.0 - kops.exp(x)), "log(1 - exp(x))")
    # Near 0 the hand-written form rounds 1 - exp(x) to 0: -inf, where the
    # value is -18.42.
    tiny = np.array([-1e-8], "float32")
    assert np.isneginf(np.asarray(kops.convert_to_numpy(kops.log(1.0 - kops.exp(tiny[0])))))
    agree(ks.ops.log1mexp(tiny), logspace_ref.log1mexp(tiny), "x = -1e-8")


def function_log_ndtr():
    x = _normal(131, (6, 4), scale=3.0)
    right = compiled(ks.ops.log_ndtr)(x)
    agree(right, _tfp_log_ndtr(x), "numpy tfp.math.log_ndtr")
    (t,) = tensors(x)
    agree(right, kops.log(0.5 * kops.erfc(-t / math.sqrt(2.0))), "log(ndtr(x)) via erfc")
    # Far in the tail the hand-written form underflows to -inf.
    far = np.array([-40.0], "float32")
    plain = kops.convert_to_numpy(kops.log(0.5 * kops.erfc(-far / math.sqrt(2.0))))
    assert np.isneginf(np.asarray(plain)).all()
    agree(ks.ops.log_ndtr(far), logspace_ref.log_ndtr(far), "x = -40")


def function_softplus_inverse():
    x = _rng(132).uniform(0.1, 20.0, (6, 4)).astype("float32")
    right = compiled(ks.ops.softplus_inverse)(x)
    agree(right, _tfp_softplus_inverse(x), "numpy tfp.math.softplus_inverse")
    (t,) = tensors(x)
    agree(right, kops.log(kops.expm1(t)), "log(expm1(x))")
    # expm1 overflows float32 past 88.7: the hand-written form is inf.
    big = np.array([100.0], "float32")
    assert np.isposinf(np.asarray(kops.convert_to_numpy(kops.log(kops.expm1(big[0])))))
    agree(ks.ops.softplus_inverse(big), [100.0], "x = 100")


def function_logaddexp():
    x1, x2 = _normal(133, (6, 4), scale=10.0), _normal(134, (4,), scale=10.0)
    right, left = compiled(lambda a, b: (ks.ops.logaddexp(a, b), kops.logaddexp(a, b)))(x1, x2)
    agree(right, left, "keras.ops.logaddexp")
    agree(right, np.logaddexp(np.asarray(x1, F64), np.asarray(x2, F64)), "numpy")
