"""The regression losses: Keras parity where Keras is right, and the traps.

`MaskedMeanSquaredError`, `MaskedMeanAbsoluteError`, `MaskedHuber` and
`StablePoisson` give Keras's numbers on ordinary inputs, for every
reduction, with and without `sample_weight`. On missing (NaN) labels, a
Poisson log link, a zero rate and extreme predicted log-variances the Keras
built-ins (or the naive formula) go NaN or wrong and keras_stable gives the
float64 reference, with finite gradients, eagerly and compiled.
"""

import keras
import numpy as np
import pytest

from keras_stable import losses
from tests import reference as ref
from tests.backend_utils import MODES
from tests.backend_utils import NP_DTYPES
from tests.backend_utils import REDUCTIONS
from tests.backend_utils import assert_close
from tests.backend_utils import assert_finite
from tests.backend_utils import cast_tensor
from tests.backend_utils import to_numpy
from tests.backend_utils import vjp
from tests.backend_utils import vjp_all_modes

K = keras.ops


def _data(seed=0, shape=(6, 3)):
    rng = np.random.default_rng(seed)
    y_true = rng.normal(size=shape).astype("float32") * 2
    y_pred = rng.normal(size=shape).astype("float32") * 2
    sw = rng.uniform(0, 2, size=shape[:1]).astype("float32")
    return y_true, y_pred, sw


PAIRS = [
    ("mse", losses.MaskedMeanSquaredError, keras.losses.MeanSquaredError, {}),
    ("mae", losses.MaskedMeanAbsoluteError, keras.losses.MeanAbsoluteError, {}),
    ("huber", losses.MaskedHuber, keras.losses.Huber, {}),
    ("huber_delta", losses.MaskedHuber, keras.losses.Huber, {"delta": 0.7}),
]
PAIR_IDS = [p[0] for p in PAIRS]
MASKED_REFERENCE = {
    "mse": ref.masked_squared_error,
    "mae": ref.masked_absolute_error,
    "huber": ref.masked_huber,
    "huber_delta": lambda y, p: ref.masked_huber(y, p, delta=0.7),
}


# --------------------------------------------------------------------------
# Keras parity
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name, ours, theirs, kwargs", PAIRS, ids=PAIR_IDS)
def test_masked_losses_match_keras_without_missing_labels(name, ours, theirs, kwargs):
    y_true, y_pred, sw = _data()
    for reduction in REDUCTIONS:
        a = ours(reduction=reduction, **kwargs)
        b = theirs(reduction=reduction, **kwargs)
        for weights in (None, sw):
            assert_close(
                to_numpy(a(y_true, y_pred, sample_weight=weights)),
                to_numpy(b(y_true, y_pred, sample_weight=weights)),
                what=f"{name}, {reduction}, weights={weights is not None}",
            )


@pytest.mark.parametrize("name, ours, theirs, kwargs", PAIRS, ids=PAIR_IDS)
def test_masked_losses_match_keras_on_single_outputs_and_rank_3(name, ours, theirs, kwargs):
    y_true, y_pred, sw = _data(1, (6, 1))
    for labels in (y_true, y_true[:, 0]):  # (batch, 1) and (batch,) labels
        assert_close(
            to_numpy(ours(reduction="none", **kwargs)(labels, y_pred)),
            to_numpy(theirs(reduction="none", **kwargs)(labels, y_pred)),
        )
    y_true, y_pred, _ = _data(2, (4, 3, 2))
    sw = np.random.default_rng(2).uniform(0, 2, size=(4, 3)).astype("float32")
    for weights in (None, sw):  # Keras takes (batch, 3) weights for (batch, 3) losses
        assert_close(
            to_numpy(ours(**kwargs)(y_true, y_pred, sample_weight=weights)),
            to_numpy(theirs(**kwargs)(y_true, y_pred, sample_weight=weights)),
        )


def test_masked_huber_gradient_matches_keras():
    y_true, y_pred, _ = _data(3)
    _, (ours,) = vjp_all_modes(lambda p: losses.MaskedHuber(delta=0.5)(y_true, p), [y_pred])
    _, (theirs,) = vjp(lambda p: keras.losses.Huber(delta=0.5)(y_true, p), [cast_tensor(y_pred)])
    assert_close(ours, theirs)


def test_poisson_matches_keras_on_rates_and_log_rates():
    rng = np.random.default_rng(4)
    counts = rng.poisson(2.0, size=(6, 3)).astype("float32")
    rates = rng.uniform(0.5, 3.0, size=(6, 3)).astype("float32")
    sw = rng.uniform(0, 2, size=(6,)).astype("float32")
    log_rates = np.log(rates)
    for reduction in REDUCTIONS:
        theirs = keras.losses.Poisson(reduction=reduction)
        from_rates = losses.StablePoisson(log_input=False, reduction=reduction)
        from_logs = losses.StablePoisson(reduction=reduction)
        for weights in (None, sw):
            expected = to_numpy(theirs(counts, rates, sample_weight=weights))
            # Keras adds 1e-7 to the rate: a relative 1e-7 / rate here.
            assert_close(to_numpy(from_rates(counts, rates, sample_weight=weights)), expected)
            assert_close(to_numpy(from_logs(counts, log_rates, sample_weight=weights)), expected)


# --------------------------------------------------------------------------
# Missing labels
# --------------------------------------------------------------------------

MISSING_TRUE = np.array(
    [[1.0, np.nan, -2.0], [np.nan, np.nan, np.nan], [3.0, 0.5, np.nan], [0.0, 1.0, 2.0]], "float32"
)
MISSING_PRED = np.array(
    [[0.5, 7.0, -2.5], [1.0, 2.0, 3.0], [-1.0, 0.5, 1e30], [0.2, 1.3, 0.0]], "float32"
)


@pytest.mark.parametrize("name, ours, theirs, kwargs", PAIRS, ids=PAIR_IDS)
def test_keras_is_nan_on_a_missing_label_even_with_sample_weight_0(name, ours, theirs, kwargs):
    y_true = MISSING_TRUE[[0, 3]]
    y_pred = MISSING_PRED[[0, 3]]
    sw = np.array([0.0, 1.0], "float32")  # the example with the NaN label is weighted out
    plain = to_numpy(theirs(**kwargs)(y_true, y_pred, sample_weight=sw))
    assert np.isnan(plain)  # 0 * NaN = NaN in the reduction
    value = to_numpy(ours(**kwargs)(y_true, y_pred, sample_weight=sw))
    assert_close(value, to_numpy(theirs(**kwargs)(y_true[1:], y_pred[1:])) / 2)  # Keras's /batch


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name, ours, theirs, kwargs", PAIRS, ids=PAIR_IDS)
def test_missing_labels_count_for_nothing(name, ours, theirs, kwargs, reduction):
    """Value = the mean over observed entries, examples with none left out;
    the gradient of a missing entry is exactly 0, eagerly and compiled."""
    sw = np.array([0.5, 3.0, 1.0, 2.0], "float32")
    loss = ours(reduction=reduction, **kwargs)
    out, (grad,) = vjp_all_modes(lambda p: loss(MISSING_TRUE, p, sample_weight=sw), [MISSING_PRED])
    per_example, valid = ref.mean_over_observed(
        MASKED_REFERENCE[name](MISSING_TRUE, MISSING_PRED), MISSING_TRUE
    )
    weighted = np.where(valid, per_example * sw, 0.0)
    expected = {
        "sum_over_batch_size": weighted.sum() / valid.sum(),
        "mean": weighted.sum() / valid.sum(),
        "sum": weighted.sum(),
        "mean_with_sample_weight": weighted.sum() / sw[valid].sum(),
        "none": weighted,
    }[reduction]
    assert_close(out, expected)
    np.testing.assert_array_equal(grad[np.isnan(MISSING_TRUE)], 0.0)
    assert_finite(grad)
    assert np.abs(grad[~np.isnan(MISSING_TRUE)]).sum() > 0


def test_batch_without_any_label_gives_zero_and_zero_gradient():
    y_true = np.full((3, 2), np.nan, "float32")
    for loss in (
        losses.MaskedMeanSquaredError(),
        losses.MaskedHuber(),
        losses.MaskedMeanAbsoluteError(),
    ):
        out, (grad,) = vjp_all_modes(
            lambda p, loss=loss: loss(y_true, p), [np.ones((3, 2), "float32")]
        )
        assert out == 0
        np.testing.assert_array_equal(grad, 0.0)


@pytest.mark.parametrize("mode", MODES)
def test_missing_labels_through_fit(mode):
    """A model trained on partly missing labels: Keras's MSE turns the
    weights NaN, MaskedMeanSquaredError trains."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 4)).astype("float32")
    y = (x @ rng.normal(size=(4, 3))).astype("float32")
    y[rng.random(y.shape) < 0.3] = np.nan

    def train(loss):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        jit = mode == "compiled"
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss=loss, jit_compile=jit)
        history = model.fit(x, y, batch_size=8, epochs=3, verbose=0)
        return history.history["loss"], model.get_weights()

    plain, weights = train(keras.losses.MeanSquaredError())
    assert np.isnan(plain[-1]) and np.isnan(weights[0]).any()
    ours, weights = train(losses.MaskedMeanSquaredError())
    assert np.all(np.isfinite(ours)) and ours[-1] < ours[0]
    assert all(np.isfinite(w).all() for w in weights)


# --------------------------------------------------------------------------
# StablePoisson
# --------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_poisson_log_link(mode):
    """`y_pred = exp(z)` with z = -20: Keras 8.117 (exact 10.068), and a
    gradient with respect to z of -0.0101 instead of -0.5."""
    y_true = np.array([[1.0, 0.0]], "float32")
    z = np.array([[-20.0, -2.0]], "float32")
    exact = ref.poisson_nll(y_true, z).mean()
    exact_grad = (np.exp(z.astype("float64")) - y_true) / 2
    plain, (g_plain,) = vjp(
        lambda v: keras.losses.Poisson()(y_true, K.exp(v)), [cast_tensor(z)], mode=mode
    )
    assert abs(plain - exact) / exact > 0.19
    assert abs(g_plain[0, 0] - exact_grad[0, 0]) / abs(exact_grad[0, 0]) > 0.9
    ours, (g,) = vjp(lambda v: losses.StablePoisson()(y_true, v), [cast_tensor(z)], mode=mode)
    assert_close(ours, exact)
    assert_close(g, exact_grad)


@pytest.mark.parametrize("mode", MODES)
def test_poisson_zero_rate(mode):
    """`y_pred = 0`: Keras reports a finite loss and a gradient of -5e6; the
    true loss is +inf for a positive count, 0 for a zero count."""
    y_true = np.array([[1.0, 0.0], [0.0, 2.0]], "float32")
    rates = np.array([[0.0, 0.5], [0.0, 0.5]], "float32")
    plain, (g_plain,) = vjp(
        lambda p: keras.losses.Poisson(reduction="none")(y_true, p), [cast_tensor(rates)], mode=mode
    )
    assert np.isfinite(plain[0]) and g_plain[0, 0] < -1e6
    loss = losses.StablePoisson(log_input=False, reduction="none")
    out, (g,) = vjp(lambda p: loss(y_true, p), [cast_tensor(rates)], mode=mode)
    assert out[0] == np.inf
    assert_close(out[1], (0.5 - 2 * np.log(0.5)) / 2)
    assert_finite(g)
    assert_close(g, [[0.5, 0.5], [0.5, (1 - 2 / 0.5) / 2]])


@pytest.mark.parametrize("full", [False, True])
@pytest.mark.parametrize("dtype", ("float32", "float16", "bfloat16"))
def test_poisson_values_vs_reference(dtype, full):
    rng = np.random.default_rng(5)
    counts = rng.poisson(3.0, size=(5, 4)).astype("float32")
    z = rng.uniform(-6, 4, size=(5, 4)).astype("float32")
    if dtype != "float32":
        z = z.astype(NP_DTYPES[dtype]).astype("float32")
    loss = losses.StablePoisson(full=full, reduction="none")
    out, (g,) = vjp_all_modes(lambda v: loss(counts, v), [cast_tensor(z, dtype)])
    assert_close(out, ref.poisson_nll(counts, z, full=full).mean(-1))
    assert_close(g, (np.exp(z.astype("float64")) - counts) / 4, dtype)


# --------------------------------------------------------------------------
# StableGaussianNLL
# --------------------------------------------------------------------------


def test_gaussian_nll_extreme_log_variances():
    y_true = np.array([0.0, 1e20, 2.0, 1e-6, 5.0], "float32")
    y_pred = np.array(
        [[0.0, -100.0], [0.0, 100.0], [2.0, -1000.0], [0.0, -100.0], [0.0, 1000.0]], "float32"
    )
    loss = losses.StableGaussianNLL(reduction="none")
    out, (g,) = vjp_all_modes(lambda p: loss(y_true, p), [y_pred])
    assert_close(out, ref.gaussian_nll(y_true, y_pred[:, 0], y_pred[:, 1]))
    assert_finite(g)
    assert_close(g[:3, 0], [0.0, -1e20 * np.exp(-100.0), 0.0])
    assert_close(g[3, 0], -1e-6 * np.exp(100.0), tol=(1e-5, 0))
    diff = y_true.astype("float64") - y_pred[:, 0]
    with np.errstate(over="ignore", invalid="ignore"):  # 0 * exp(1000) = 0 * inf
        scaled = np.where(diff == 0, 0.0, diff**2 * np.exp(-y_pred[:, 1].astype("float64")))
    assert_close(g[:, 1], 0.5 * (1 - scaled))


@pytest.mark.parametrize("mode", MODES)
def test_naive_gaussian_nll_in_a_loss_goes_nan(mode):
    y_true = np.array([0.0, 1e20], "float32")
    y_pred = [cast_tensor([[0.0, -100.0], [0.0, 100.0]])]

    def naive(p):
        mean, log_var = p[:, 0], p[:, 1]
        return K.mean(0.5 * (log_var + K.square(cast_tensor(y_true) - mean) * K.exp(-log_var)))

    plain, (g_plain,) = vjp(naive, y_pred, mode=mode)
    assert not np.isfinite(plain) or not np.isfinite(g_plain).all()
    ours, (g,) = vjp(lambda p: losses.StableGaussianNLL()(y_true, p), y_pred, mode=mode)
    assert_close(ours, (-50.0 + 50.0 + 0.5 * 1e40 * np.exp(-100.0)) / 2)
    assert_finite(g)


@pytest.mark.parametrize("dtype", ("float32", "float16", "bfloat16"))
def test_gaussian_nll_target_shapes_and_dtypes(dtype):
    rng = np.random.default_rng(6)
    y_pred = rng.normal(size=(4, 3, 2)).astype("float32")
    if dtype != "float32":
        y_pred = y_pred.astype(NP_DTYPES[dtype]).astype("float32")
    y_true = rng.normal(size=(4, 3)).astype("float32")
    loss = losses.StableGaussianNLL(full=True, reduction="none")
    out, _ = vjp_all_modes(lambda p: loss(y_true, p), [cast_tensor(y_pred, dtype)])
    expected = ref.gaussian_nll(y_true, y_pred[..., 0], y_pred[..., 1], full=True).mean(-1)
    assert_close(out, expected)
    assert (
        keras.backend.standardize_dtype(loss(y_true, cast_tensor(y_pred, dtype)).dtype) == "float32"
    )
    single = to_numpy(
        loss(y_true[:, :1], cast_tensor(y_pred[:, 0], dtype))
    )  # (batch, 1) targets, (batch, 2) head
    assert_close(
        single, ref.gaussian_nll(y_true[:, 0], y_pred[:, 0, 0], y_pred[:, 0, 1], full=True)
    )
    flat = to_numpy(loss(y_true[:, 0], cast_tensor(y_pred[:, 0], dtype)))  # (batch,) targets
    assert_close(flat, single)


# --------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, match",
    [
        (
            lambda: losses.MaskedHuber(delta=0),
            r"`delta` must be a finite number > 0, got delta=0.0",
        ),
        (lambda: losses.MaskedHuber(delta=-0.5), r"delta=-0.5"),
        (lambda: losses.MaskedHuber(delta="1"), r"`delta` must be a finite number"),
        (lambda: losses.StablePoisson(log_input=1), r"`log_input` must be a bool"),
        (lambda: losses.StablePoisson(full="no"), r"`full` must be a bool"),
        (lambda: losses.StableGaussianNLL(full=None), r"`full` must be a bool"),
        (lambda: losses.MaskedMeanSquaredError(reduction="avg"), r"`reduction`='avg'"),
        (
            lambda: losses.StableGaussianNLL()(np.zeros((4,)), np.zeros((4, 3))),
            r"`y_pred` must stack the mean and the log-variance.*y_pred.shape=\(4, 3\)",
        ),
        (
            lambda: losses.StableGaussianNLL()(np.zeros((4, 3)), np.zeros((4, 2))),
            r"`y_true`.*expected \(4,\).*y_true.shape=\(4, 3\)",
        ),
        (
            lambda: losses.MaskedMeanAbsoluteError()(np.zeros((4, 3)), np.zeros((4, 2))),
            r"y_true.shape=\(4, 3\) and y_pred.shape=\(4, 2\)",
        ),
        (
            lambda: losses.StablePoisson()(np.zeros((4, 3)), np.zeros((3, 3))),
            r"y_true.shape=\(4, 3\) and y_pred.shape=\(3, 3\)",
        ),
    ],
)
def test_value_error_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()
