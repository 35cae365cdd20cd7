"""The regression ops: Poisson and Gaussian likelihoods, masked errors.

Values against the float64 references of `tests/reference.py` (inputs
rounded to the dtype under test), gradients against the analytic ones,
eagerly and compiled (`vjp_all_modes`), in float32, float16 and bfloat16;
the naive formulations fail on the same inputs.
"""

import math

import keras
import numpy as np
import pytest

from keras_stable import ops
from tests import reference as ref
from tests.backend_utils import DTYPES
from tests.backend_utils import MODES
from tests.backend_utils import assert_close
from tests.backend_utils import assert_finite
from tests.backend_utils import cast_tensor
from tests.backend_utils import dtype_of
from tests.backend_utils import round_to
from tests.backend_utils import to_numpy
from tests.backend_utils import vjp
from tests.backend_utils import vjp_all_modes

K = keras.ops
INF = np.inf


# --------------------------------------------------------------------------
# poisson_nll
# --------------------------------------------------------------------------

COUNTS = np.array([[0.0, 1.0, 3.0, 0.0, 2.0, 10.0], [1.0, 0.0, 5.0, 4.0, 0.0, 1.0]])
LOG_RATES = np.array([[-20.0, -20.0, 1.0, 0.0, -2.0, 2.5], [5.0, 3.0, -0.5, 1.3, -8.0, 0.0]])


@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_poisson_nll_from_log_rates(dtype, full):
    def fn(z):
        return ops.poisson_nll(COUNTS.astype("float32"), z, full=full)

    out, (grad,) = vjp_all_modes(fn, [cast_tensor(LOG_RATES, dtype)], dtype=dtype)
    z = round_to(LOG_RATES, dtype)
    assert_close(out, round_to(ref.poisson_nll(COUNTS, z, full=full), dtype), dtype)
    assert_close(grad, round_to(np.exp(z) - COUNTS, dtype), dtype)
    assert dtype_of(fn(cast_tensor(LOG_RATES, dtype))) == dtype


@pytest.mark.parametrize("dtype", DTYPES)
def test_poisson_nll_from_rates(dtype):
    rates = np.exp(LOG_RATES.clip(-5, None))

    def fn(r):
        return ops.poisson_nll(COUNTS.astype("float32"), r, log_input=False)

    out, (grad,) = vjp_all_modes(fn, [cast_tensor(rates, dtype)], dtype=dtype)
    r = round_to(rates, dtype)
    assert_close(out, round_to(ref.poisson_nll(COUNTS, r, log_input=False), dtype), dtype)
    assert_close(grad, round_to(1.0 - COUNTS / r, dtype), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_poisson_nll_rate_zero(dtype):
    """Rate 0 (or log-rate -inf): a zero count contributes exactly 0, a
    positive one +inf, the true value; every gradient is finite."""
    counts = np.array([0.0, 2.0, 0.0, 1.0], "float32")
    rates = np.array([0.0, 0.0, 1.5, 1.5])

    out, (grad,) = vjp_all_modes(
        lambda r: ops.poisson_nll(counts, r, log_input=False),
        [cast_tensor(rates, dtype)],
        dtype=dtype,
    )
    assert out[0] == 0 and out[1] == INF
    np.testing.assert_array_equal(grad[:2], 1.0)  # d(rate)/d(rate); log's part is 0 at 0
    assert_close(grad[2:], 1.0 - counts[2:] / 1.5, dtype)

    log_rates = np.array([-INF, -INF, 0.0, 0.0])
    out, (grad,) = vjp_all_modes(
        lambda z: ops.poisson_nll(counts, z), [cast_tensor(log_rates, dtype)], dtype=dtype
    )
    assert out[0] == 0 and out[1] == INF
    np.testing.assert_array_equal(grad, [0.0, -2.0, 1.0, 0.0])


def test_poisson_nll_full_is_lgamma():
    counts = np.array([0.0, 1.0, 2.0, 3.0, 7.0, 0.5, 2.5, 12.0, 150.0, 1e4, 1e6], "float32")
    zero = np.zeros_like(counts)
    extra = to_numpy(ops.poisson_nll(counts, zero, full=True)) - to_numpy(
        ops.poisson_nll(counts, zero)
    )
    expected = np.array([math.lgamma(c + 1.0) for c in counts.astype("float64")])
    np.testing.assert_allclose(extra, expected, rtol=1e-6, atol=2e-6)
    np.testing.assert_array_equal(extra[:2], 0.0)  # log(0!) = log(1!) = 0 exactly
    assert np.isnan(to_numpy(ops.poisson_nll(np.array([-1.0]), np.array([0.0]), full=True))).all()


@pytest.mark.parametrize("mode", MODES)
def test_keras_poisson_epsilon_is_wrong_on_a_log_link(mode):
    """`keras.losses.poisson` is `y_pred - y_true * log(y_pred + 1e-7)`: at a
    rate of exp(-20) the value is 16.1 instead of 20 and the gradient with
    respect to the log-rate is -0.02 instead of -1."""
    counts = np.array([1.0, 0.0], "float32")
    z = [cast_tensor([-20.0, -2.0])]
    exact = ref.poisson_nll(counts, [-20.0, -2.0]).mean()
    plain, (g_plain,) = vjp(lambda v: keras.losses.poisson(counts, K.exp(v)), z, mode=mode)
    assert abs(plain - exact) > 1.9  # 8.117 vs 10.068
    assert abs(g_plain[0] - (np.exp(-20) - 1) / 2) > 0.45  # -0.0101 vs -0.5
    ours, (g,) = vjp(lambda v: K.mean(ops.poisson_nll(counts, v)), z, mode=mode)
    assert_close(ours, exact)
    assert_close(g, (np.exp([-20.0, -2.0]) - counts) / 2)


# --------------------------------------------------------------------------
# gaussian_nll
# --------------------------------------------------------------------------


def _gaussian_grads(labels, mean, log_variance):
    d = np.asarray(mean, "float64") - np.asarray(labels, "float64")
    log_variance = np.asarray(log_variance, "float64")
    with np.errstate(divide="ignore", over="ignore"):
        scaled = np.where(d == 0, 0.0, np.sign(d) * np.exp(np.log(np.abs(d)) - log_variance))
    return scaled, 0.5 * (1.0 - d * scaled)


@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_gaussian_nll_ordinary_values(dtype, full):
    rng = np.random.default_rng(3)
    labels = rng.normal(size=(4, 3))
    mean = rng.normal(size=(4, 3))
    log_variance = rng.uniform(-3, 3, size=(4, 3))

    def fn(m, lv):
        return ops.gaussian_nll(labels.astype("float32"), m, lv, full=full)

    args = [cast_tensor(mean, dtype), cast_tensor(log_variance, dtype)]
    out, (g_mean, g_lv) = vjp_all_modes(fn, args, wrt=(0, 1), dtype=dtype)
    m, lv = round_to(mean, dtype), round_to(log_variance, dtype)
    assert_close(out, round_to(ref.gaussian_nll(labels, m, lv, full=full), dtype), dtype)
    expected_mean, expected_lv = _gaussian_grads(labels.astype("float32"), m, lv)
    assert_close(g_mean, expected_mean, dtype)
    assert_close(g_lv, expected_lv, dtype)
    assert dtype_of(fn(*args)) == dtype


def test_gaussian_nll_log_variance_broadcasts_from_the_trailing_axes():
    # A per-output log-variance `(outputs,)` and a per-sample one
    # `(batch, 1)` against the float64 reference broadcast NumPy-style; a
    # per-sample `(batch,)` (torch's reading of `input.shape[:-1]`) is a
    # ValueError naming the shapes and the fix, not a silent broadcast.
    rng = np.random.default_rng(4)
    labels, mean = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
    per_output = rng.uniform(-2, 2, size=(3,))
    per_sample = rng.uniform(-2, 2, size=(4, 1))
    for lv in (per_output, per_sample):
        out = to_numpy(ops.gaussian_nll(labels, mean.astype("float32"), lv.astype("float32")))
        assert out.shape == (4, 3)
        assert_close(out, ref.gaussian_nll(labels, mean, np.broadcast_to(lv, (4, 3))))
    with pytest.raises(ValueError, match=r"shape \(4,\).*log_variance\[\.\.\., None\]"):
        ops.gaussian_nll(labels, mean.astype("float32"), per_sample[:, 0].astype("float32"))


# (label, mean, log_variance): exact fits, tiny and huge errors, and
# log-variances of +-100, +-200 (past exp's range), +-1000 (past half of it).
EXTREME = np.array(
    [
        [0.0, 0.0, -100.0],
        [1e-6, 0.0, -100.0],
        [1e20, 0.0, 100.0],
        [1.0, 0.0, 100.0],
        [3.0, 3.0, -200.0],
        [1e-30, 0.0, -200.0],
        [1e30, 0.0, 200.0],
        [0.0, 0.0, -1000.0],
        [2.0, 0.0, 1000.0],
        [1.5, -0.5, 0.3],
    ]
)


def test_gaussian_nll_extreme_log_variance():
    labels, mean, log_variance = (EXTREME[:, i] for i in range(3))

    def fn(m, lv):
        return ops.gaussian_nll(labels.astype("float32"), m, lv)

    out, (g_mean, g_lv) = vjp_all_modes(
        fn, [cast_tensor(mean), cast_tensor(log_variance)], wrt=(0, 1)
    )
    labels32 = labels.astype("float32").astype("float64")
    assert_close(out, ref.gaussian_nll(labels32, mean, log_variance))
    expected_mean, expected_lv = _gaussian_grads(labels32, mean, log_variance)
    # d/dmean = diff * exp(-log_variance) is 7e56 at (1e-30, -200): beyond
    # float32 (documented); it is inf there, never NaN.
    representable = np.abs(expected_mean) < np.finfo("float32").max
    assert representable.sum() == len(EXTREME) - 1
    assert_close(g_mean[representable], expected_mean[representable])
    assert np.isinf(g_mean[~representable]).all()
    assert_close(g_lv, expected_lv)
    assert_finite(g_lv)


@pytest.mark.parametrize("mode", MODES)
def test_naive_gaussian_nll_breaks_at_extreme_log_variance(mode):
    labels = np.array([0.0, 1e20], "float32")
    args = [cast_tensor([0.0, 0.0]), cast_tensor([-100.0, 100.0])]

    def naive(m, lv):
        return 0.5 * (lv + K.square(cast_tensor(labels) - m) * K.exp(-lv))

    def with_division(m, lv):
        return 0.5 * (lv + K.square(cast_tensor(labels) - m) / K.exp(lv))

    for plain in (naive, with_division):
        value, (g_mean, g_lv) = vjp(plain, args, wrt=(0, 1), mode=mode)
        bad = ~np.isfinite(value)
        bad_grad = ~(np.isfinite(g_mean) & np.isfinite(g_lv))
        assert bad.any() or bad_grad.any()  # NaN (0 * inf) or inf (1e40 overflows)
    value, (g_mean, g_lv) = vjp(
        lambda m, lv: ops.gaussian_nll(labels, m, lv), args, wrt=(0, 1), mode=mode
    )
    assert_close(value, [-50.0, 50.0 + 0.5 * 1e40 * np.exp(-100.0)])
    assert_close(g_mean, [0.0, -1e20 * np.exp(-100.0)])
    assert_close(g_lv, [0.5, 0.5 * (1 - 1e40 * np.exp(-100.0))])


@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
def test_gaussian_nll_half_precision_is_computed_in_float32(dtype):
    # exp(100) overflows float16 (and the square of 300 too); float32 holds both.
    labels = np.array([300.0, 0.0, 2.0])
    mean = np.zeros(3)
    log_variance = np.array([10.0, -100.0, 60.0])
    out, grads = vjp_all_modes(
        lambda m, lv: ops.gaussian_nll(cast_tensor(labels, dtype), m, lv),
        [cast_tensor(mean, dtype), cast_tensor(log_variance, dtype)],
        wrt=(0, 1),
        dtype=dtype,
    )
    y, lv = round_to(labels, dtype), round_to(log_variance, dtype)
    assert_close(out, round_to(ref.gaussian_nll(y, 0.0, lv), dtype), dtype)
    for g in grads:
        assert_finite(g)


def test_gaussian_nll_broadcasts_a_shared_log_variance():
    labels = np.array([[1.0, 2.0], [3.0, 4.0]], "float32")
    log_variance = np.array([0.5, -1.0], "float32")
    out = to_numpy(ops.gaussian_nll(labels, np.zeros_like(labels), log_variance, full=True))
    assert_close(out, ref.gaussian_nll(labels, 0.0, log_variance, full=True))


# --------------------------------------------------------------------------
# masked errors
# --------------------------------------------------------------------------

LABELS = np.array(
    [[1.0, np.nan, -2.0, 0.5], [np.nan, np.nan, np.nan, np.nan], [3.0, 4.0, 0.0, -1.0]]
)
PREDS = np.array([[0.5, 1e30, -2.0, 3.0], [0.0, 1.0, -1e30, 2.0], [-1.0, 4.0, 0.25, 1.5]])
OBSERVED = ~np.isnan(LABELS)

MASKED = [
    ("squared", ops.masked_squared_error, ref.masked_squared_error, lambda e: 2 * e),
    ("absolute", ops.masked_absolute_error, ref.masked_absolute_error, np.sign),
    ("huber", ops.masked_huber, ref.masked_huber, lambda e: np.clip(e, -1.0, 1.0)),
    (
        "huber_delta_0.3",
        lambda y, p: ops.masked_huber(y, p, delta=0.3),
        lambda y, p: ref.masked_huber(y, p, delta=0.3),
        lambda e: np.clip(e, -0.3, 0.3),
    ),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name, op, reference, derivative", MASKED, ids=[m[0] for m in MASKED])
def test_masked_errors(name, op, reference, derivative, dtype):
    """Missing labels give exactly 0 with a zero gradient, even under a
    prediction of 1e30; observed ones the exact error and its gradient."""
    out, (grad,) = vjp_all_modes(
        lambda p: op(LABELS.astype("float32"), p), [cast_tensor(PREDS, dtype)], dtype=dtype
    )
    p = round_to(PREDS, dtype)
    assert_close(out, round_to(reference(LABELS, p), dtype), dtype)
    np.testing.assert_array_equal(out[~OBSERVED], 0.0)
    np.testing.assert_array_equal(grad[~OBSERVED], 0.0)
    error = np.where(OBSERVED, p - np.nan_to_num(LABELS), 0.0)
    assert_close(grad, round_to(derivative(error), dtype), dtype)
    assert dtype_of(op(LABELS.astype("float32"), cast_tensor(PREDS, dtype))) == (
        "float32" if dtype == "bfloat16" or dtype == "float16" else dtype
    )


@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
def test_masked_errors_keep_a_half_precision_dtype(dtype):
    labels = cast_tensor([[1.0, np.nan]], dtype)
    out = ops.masked_squared_error(labels, cast_tensor([[300.0, 2.0]], dtype))
    assert dtype_of(out) == dtype
    assert to_numpy(out)[0, 1] == 0


@pytest.mark.parametrize("mode", MODES)
def test_masking_a_nan_label_by_multiplication_leaks_nan(mode):
    labels = np.array([1.0, np.nan, -1.0], "float32")
    keep = np.array([1.0, 0.0, 1.0], "float32")
    x = [cast_tensor([0.0, 0.0, 0.0])]
    value, (grad,) = vjp(
        lambda p: K.sum(cast_tensor(keep) * K.square(cast_tensor(labels) - p)), x, mode=mode
    )
    assert np.isnan(value) and np.isnan(grad[1])
    _, (grad,) = vjp(
        lambda p: K.sum(K.where(keep > 0, K.square(cast_tensor(labels) - p), 0.0)), x, mode=mode
    )
    assert np.isnan(grad[1])
    value, (grad,) = vjp(lambda p: K.sum(ops.masked_squared_error(labels, p)), x, mode=mode)
    assert value == 2
    np.testing.assert_array_equal(grad, [-2.0, 0.0, 2.0])


# --------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------

x23 = np.ones((2, 3), "float32")


@pytest.mark.parametrize(
    "call, match",
    [
        (
            lambda: ops.poisson_nll(np.ones((2, 4)), x23),
            r"labels.shape=\(2, 4\).*log_rate.shape=\(2, 3\)",
        ),
        (lambda: ops.poisson_nll(x23, x23, full=1), r"`full` must be a bool"),
        (lambda: ops.poisson_nll(x23, x23, log_input="no"), r"`log_input` must be a bool"),
        (
            lambda: ops.gaussian_nll(x23, np.ones((2, 4)), x23),
            r"`labels` of shape \(2, 3\) and `mean` of shape \(2, 4\)",
        ),
        (lambda: ops.gaussian_nll(x23, x23, np.ones((4,))), r"`log_variance` of shape \(4,\)"),
        (lambda: ops.gaussian_nll(x23, x23, x23, full=None), r"`full` must be a bool"),
        (
            lambda: ops.masked_squared_error(x23, np.ones((3, 2))),
            r"labels.shape=\(2, 3\).*predictions.shape=\(3, 2\)",
        ),
        (lambda: ops.masked_absolute_error(x23, np.ones((2,))), r"predictions.shape=\(2,\)"),
        (lambda: ops.masked_huber(x23, np.ones((2, 1))), r"predictions.shape=\(2, 1\)"),
        (
            lambda: ops.masked_huber(x23, x23, delta=0.0),
            r"`delta` must be a finite number > 0, got delta=0.0",
        ),
        (lambda: ops.masked_huber(x23, x23, delta=-1), r"delta=-1.0"),
        (lambda: ops.masked_huber(x23, x23, delta=float("inf")), r"delta=inf"),
        (lambda: ops.masked_huber(x23, x23, delta=float("nan")), r"delta=nan"),
        (lambda: ops.masked_huber(x23, x23, delta=True), r"`delta` must be a finite number"),
        (lambda: ops.masked_huber(x23, x23, delta="1"), r"`delta` must be a finite number"),
    ],
)
def test_value_error_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()
