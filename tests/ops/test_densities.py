"""The density ops: `gaussian_kl` (a VAE's KL term) and `mixture_nll`.

Values and gradients against the float64 references of `tests/reference.py`
(inputs rounded to the dtype under test), eagerly and compiled
(`vjp_all_modes`), in float32, float16 and bfloat16; the edge values of the
contract (float16 `lv = 11.5`, `lv` = 89 in float32, a target 40 standard
deviations out, a `-inf` mixture logit); finite differences in float64; the
naive formulations fail on the same inputs; bad shapes.
"""

import math

import keras
import numpy as np
import pytest

from keras_stable import ops
from tests import reference as ref
from tests import reference_log_space as logspace_ref
from tests.backend_utils import DTYPES
from tests.backend_utils import MODES
from tests.backend_utils import assert_close
from tests.backend_utils import assert_finite
from tests.backend_utils import cast_tensor
from tests.backend_utils import dtype_of
from tests.backend_utils import finite_difference
from tests.backend_utils import float64_enabled
from tests.backend_utils import round_to
from tests.backend_utils import to_numpy
from tests.backend_utils import vjp
from tests.backend_utils import vjp_all_modes

K = keras.ops
# The one-mode checks run compiled where there is a compiler (JAX's eager
# dispatch compiles every op on its own).
FAST = MODES[-1]

# --------------------------------------------------------------------------
# gaussian_kl
# --------------------------------------------------------------------------

MEANS = np.array([[0.0, 1.5, -2.0, 0.25], [3.0, 0.0, -0.5, 10.0], [0.0, 0.0, 0.0, 0.0]])
LOG_VARIANCES = np.array([[0.0, 1e-3, -0.3, 0.45], [-8.0, 5.0, -0.6, 2.0], [11.5, -20.0, 0.0, 7.0]])


@pytest.mark.parametrize("dtype", DTYPES)
def test_gaussian_kl_values_and_gradients(dtype):
    g = np.array([1.0, -2.0, 0.5])
    out, (g_mean, g_lv) = vjp_all_modes(
        ops.gaussian_kl,
        [cast_tensor(MEANS, dtype), cast_tensor(LOG_VARIANCES, dtype)],
        wrt=(0, 1),
        cotangent=cast_tensor(g, "float32"),
        dtype=dtype,
    )
    m, v = round_to(MEANS, dtype), round_to(LOG_VARIANCES, dtype)
    # Computed and returned in float32 whatever the input dtype: the
    # reference of the rounded inputs at float32's tolerance.
    assert_close(out, logspace_ref.gaussian_kl(m, v))
    expected_mean, expected_lv = logspace_ref.gaussian_kl_grad(m, v, g)
    assert_close(g_mean, round_to(expected_mean, dtype), dtype)
    assert_close(g_lv, round_to(expected_lv, dtype), dtype)
    assert dtype_of(ops.gaussian_kl(cast_tensor(MEANS, dtype), cast_tensor(MEANS, dtype))) == (
        "float32"
    )


@pytest.mark.parametrize("mode", MODES)
def test_gaussian_kl_float16_log_variance_11_5(mode):
    """float16 `lv = 11.5`: 49351.6 (float32), where the keras-io formula in
    float16 gives inf (`exp(11.5)` = 98715 > 65504)."""
    mean = cast_tensor([[0.0]], "float16")
    lv = cast_tensor([[11.5]], "float16")
    out, (g,) = vjp(lambda v: ops.gaussian_kl(mean, v), [lv], mode=mode)
    assert_close(out, [0.5 * (math.expm1(11.5) - 11.5)])
    assert abs(out[0] - 49351.6) < 0.1
    assert_finite(g)

    def naive(v):
        return -0.5 * K.sum(1 + v - K.square(mean) - K.exp(v), axis=-1)

    plain, (g_plain,) = vjp(naive, [lv], mode=mode)
    assert np.isinf(plain).all()
    assert not np.isfinite(g_plain).all()


@pytest.mark.parametrize("mode", MODES)
def test_gaussian_kl_finite_exactly_where_representable(mode):
    """float32: `lv = 89` gives 2.245e38 (`exp(89)` alone is inf) with a
    finite gradient; 89.41 is the last finite value; above, the value is
    +inf (the true KL is beyond float32) and the log-variance's gradient
    +inf, never NaN; `0.5 * mean**2` is finite up to |mean| = 2.6e19."""
    lv = np.array([[88.0, 89.0, 89.4, 89.5, 100.0, 0.0]])
    mean = np.array([[0.0, 0.0, 0.0, 0.0, 0.0, 2.5e19]])
    args = [cast_tensor(mean[0, :, None]), cast_tensor(lv[0, :, None])]
    out, (g_mean, g_lv) = vjp(ops.gaussian_kl, args, wrt=(0, 1), mode=mode)
    expected = logspace_ref.gaussian_kl(mean[0, :, None], lv[0, :, None])
    finite = np.array([True, True, True, False, False, True])
    assert_close(out[finite], expected[finite])
    assert np.isposinf(out[~finite]).all()
    assert_finite(g_mean, "mean gradient")
    assert_close(g_lv[finite, 0], 0.5 * np.expm1(lv[0, finite]))
    assert np.isposinf(g_lv[~finite]).all()


def test_gaussian_kl_small_log_variances_have_no_cancellation():
    """`expm1(lv) - lv` by its series near 0: relative error of float32."""
    lv = np.array([1e-6, -1e-4, 1e-3, 0.1, -0.49, 0.49, 0.51])
    out = to_numpy(ops.gaussian_kl(cast_tensor(lv[:, None]) * 0, cast_tensor(lv[:, None])))
    np.testing.assert_allclose(
        out, logspace_ref.gaussian_kl(0 * lv[:, None], lv[:, None]), rtol=3e-7
    )


def test_gaussian_kl_float64_finite_differences():
    rng = np.random.default_rng(1)
    mean, lv = rng.normal(size=(3, 4)), rng.normal(size=(3, 4)) * 2
    with float64_enabled():
        _, (g_mean, g_lv) = vjp(
            lambda m, v: ops.gaussian_kl(m, v),
            [K.convert_to_tensor(mean, "float64"), K.convert_to_tensor(lv, "float64")],
            wrt=(0, 1),
            mode=FAST,
        )
    np.testing.assert_allclose(
        g_lv, finite_difference(lambda v: logspace_ref.gaussian_kl(mean, v), lv), rtol=1e-7
    )
    np.testing.assert_allclose(
        g_mean,
        finite_difference(lambda m: logspace_ref.gaussian_kl(m, lv), mean),
        rtol=1e-7,
        atol=1e-9,
    )


def test_gaussian_kl_axes():
    out = to_numpy(ops.gaussian_kl(MEANS.astype("float32"), LOG_VARIANCES.astype("float32"), 0))
    assert_close(out, logspace_ref.gaussian_kl(MEANS, LOG_VARIANCES, axis=0))
    out = to_numpy(ops.gaussian_kl(MEANS.astype("float32"), LOG_VARIANCES.astype("float32"), None))
    assert_close(out, logspace_ref.gaussian_kl(MEANS, LOG_VARIANCES, axis=None))


def test_gaussian_kl_bad_shapes():
    with pytest.raises(ValueError, match=r"`mean`.*`log_variance`.*\(2, 3\).*\(2, 4\)"):
        ops.gaussian_kl(np.zeros((2, 3), "float32"), np.zeros((2, 4), "float32"))
    with pytest.raises(ValueError, match="axis"):
        ops.gaussian_kl(np.zeros((2, 3), "float32"), np.zeros((2, 3), "float32"), axis=2)


# --------------------------------------------------------------------------
# mixture_nll
# --------------------------------------------------------------------------

RNG = np.random.default_rng(7)
B, M, D = 3, 4, 2
Y = RNG.normal(size=(B, D)) * 2
LOGITS = RNG.normal(size=(B, M))
MIX_MEANS = RNG.normal(size=(B, M, D)) * 2
LOG_SCALES = RNG.normal(size=(B, M, D)) * 0.5


def _mixture_grads(y, logits, mean, log_scale, g):
    """Analytic float64 gradients of `mixture_nll` (axis -1)."""
    z = (y[:, None, :] - mean) / np.exp(log_scale)
    log_density = np.sum(-0.5 * z**2 - log_scale - 0.5 * np.log(2 * np.pi), -1)
    r = ref.softmax(ref.log_softmax(logits) + log_density)  # responsibilities
    pi = ref.softmax(logits)
    g = g[:, None]
    return (
        g * (pi - r),
        -(g * r)[..., None] * z / np.exp(log_scale),
        -(g * r)[..., None] * (z**2 - 1),
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_mixture_nll_values_and_gradients(dtype):
    g = np.array([1.0, 0.5, -1.0])
    args = [cast_tensor(a, dtype) for a in (Y, LOGITS, MIX_MEANS, LOG_SCALES)]
    out, grads = vjp_all_modes(
        ops.mixture_nll, args, wrt=(1, 2, 3), cotangent=cast_tensor(g), dtype=dtype
    )
    rounded = [round_to(a, dtype) for a in (Y, LOGITS, MIX_MEANS, LOG_SCALES)]
    assert_close(out, logspace_ref.mixture_nll(*rounded))
    for got, expected in zip(grads, _mixture_grads(*rounded, g)):
        assert_close(got, round_to(expected, dtype), dtype)
    assert dtype_of(ops.mixture_nll(*args)) == "float32"


@pytest.mark.parametrize("mode", MODES)
def test_mixture_nll_forty_standard_deviations(mode):
    """One component, one dimension, y = 40: 0.5 * 40**2 + 0.5 * log(2 pi)
    = 800.919 and d/d(mean) = -40, where the naive -log(pi * N) is inf with a
    NaN gradient."""
    y, logits = cast_tensor([[40.0]]), cast_tensor([[0.0]])
    mean, log_scale = cast_tensor([[[0.0]]]), cast_tensor([[[0.0]]])
    out, (g_logits, g_mean, g_scale) = vjp(
        ops.mixture_nll, [y, logits, mean, log_scale], wrt=(1, 2, 3), mode=mode
    )
    assert_close(out, [800.0 + 0.5 * math.log(2 * math.pi)])
    assert abs(out[0] - 800.919) < 1e-3
    np.testing.assert_array_equal(g_logits, 0.0)
    assert_close(g_mean, [[[-40.0]]])
    assert_close(g_scale, [[[1.0 - 1600.0]]])

    def naive(y, logits, mean, log_scale):
        pi = K.exp(logits) / K.sum(K.exp(logits), axis=-1, keepdims=True)
        sigma = K.exp(log_scale)
        z = (K.expand_dims(y, 1) - mean) / sigma
        density = K.prod(K.exp(-0.5 * z * z) / (sigma * math.sqrt(2 * math.pi)), axis=-1)
        return -K.log(K.sum(pi * density, axis=-1))

    plain, (g_plain,) = vjp(naive, [y, logits, mean, log_scale], wrt=(2,), mode=mode)
    assert np.isposinf(plain).all()
    assert np.isnan(g_plain).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_mixture_nll_minus_inf_logit_has_zero_gradient(dtype):
    """A component with logit -inf takes no part: its logit, mean and
    log-scale gradients are exactly 0, the others those of the mixture
    without it."""
    logits = LOGITS.copy()
    logits[:, 1] = -np.inf
    args = [cast_tensor(a, dtype) for a in (Y, logits, MIX_MEANS, LOG_SCALES)]
    out, (g_logits, g_mean, g_scale) = vjp_all_modes(
        ops.mixture_nll, args, wrt=(1, 2, 3), dtype=dtype
    )
    for grad in (g_logits, g_mean, g_scale):
        assert_finite(grad)
        np.testing.assert_array_equal(grad[:, 1], 0.0)
    keep = [0, 2, 3]
    rounded = [round_to(a, dtype) for a in (Y, LOGITS, MIX_MEANS, LOG_SCALES)]
    without = [rounded[0], rounded[1][:, keep], rounded[2][:, keep], rounded[3][:, keep]]
    assert_close(out, logspace_ref.mixture_nll(*without))
    for got, expected in zip((g_logits, g_mean, g_scale), _mixture_grads(*without, np.ones(B))):
        assert_close(got[:, keep], round_to(expected, dtype), dtype)


def test_mixture_nll_every_logit_minus_inf():
    logits = np.full((1, 2), -np.inf, "float32")
    out, grads = vjp(
        ops.mixture_nll,
        [Y[:1].astype("float32"), logits, MIX_MEANS[:1, :2], LOG_SCALES[:1, :2]],
        wrt=(1, 2, 3),
        mode=FAST,
    )
    assert np.isposinf(out).all()
    for grad in grads:
        np.testing.assert_array_equal(grad, 0.0)


def test_mixture_nll_extreme_scales():
    """Tiny and huge scales: exact where the true value is representable."""
    y = np.array([[0.0], [1e20], [1e-3]])
    mean = np.zeros((3, 1, 1))
    log_scale = np.array([[[-50.0]], [[50.0]], [[-45.0]]])
    logits = np.zeros((3, 1))
    out, grads = vjp(
        ops.mixture_nll, [cast_tensor(a) for a in (y, logits, mean, log_scale)], wrt=(1, 2, 3)
    )
    assert_close(out, logspace_ref.mixture_nll(y, logits, mean, log_scale))
    for grad in grads:
        assert_finite(grad)


def test_mixture_nll_component_axis_first():
    """`axis=0`: logits `(M, B)`, means `(M, B, D)`, y `(B, D)`."""
    logits = np.moveaxis(LOGITS, -1, 0)
    mean, log_scale = np.moveaxis(MIX_MEANS, 1, 0), np.moveaxis(LOG_SCALES, 1, 0)
    out = to_numpy(
        ops.mixture_nll(*[a.astype("float32") for a in (Y, logits, mean, log_scale)], axis=0)
    )
    assert_close(out, logspace_ref.mixture_nll(Y, LOGITS, MIX_MEANS, LOG_SCALES))


def test_mixture_nll_float64_finite_differences():
    with float64_enabled():
        _, grads = vjp(
            ops.mixture_nll,
            [K.convert_to_tensor(a, "float64") for a in (Y, LOGITS, MIX_MEANS, LOG_SCALES)],
            wrt=(1, 2, 3),
            mode=FAST,
        )
    fns = (
        lambda x: logspace_ref.mixture_nll(Y, x, MIX_MEANS, LOG_SCALES),
        lambda x: logspace_ref.mixture_nll(Y, LOGITS, x, LOG_SCALES),
        lambda x: logspace_ref.mixture_nll(Y, LOGITS, MIX_MEANS, x),
    )
    for grad, fn, x in zip(grads, fns, (LOGITS, MIX_MEANS, LOG_SCALES)):
        np.testing.assert_allclose(grad, finite_difference(fn, x), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize(
    "shapes, name",
    [
        (((3, 2), (3, 4), (3, 4, 3), (3, 4, 3)), "y"),
        (((3, 2), (3, 4), (3, 5, 2), (3, 5, 2)), "mean"),
        (((3, 2), (3, 4), (3, 4, 2), (3, 4, 1)), "log_scale"),
        (((2, 2), (3, 4), (3, 4, 2), (3, 4, 2)), "y"),
    ],
)
def test_mixture_nll_bad_shapes(shapes, name):
    args = [np.zeros(s, "float32") for s in shapes]
    pattern = rf"`{name}` must have shape.*y\.shape=.*logits\.shape=.*mean\.shape=.*log_scale"
    with pytest.raises(ValueError, match=pattern):
        ops.mixture_nll(*args)
