"""StablePearsonCorrelation and StableR2Score: streaming, exact, finite."""

import keras
import numpy as np
import pytest

from keras_stable import metrics
from tests import reference as ref
from tests.backend_utils import KERAS_3_16
from tests.backend_utils import assert_close
from tests.backend_utils import metric_result
from tests.backend_utils import split_batches
from tests.backend_utils import to_numpy

K = keras.ops


def _data(seed=0, n=20, outputs=3, offset=0.0):
    rng = np.random.default_rng(seed)
    y_true = (rng.normal(size=(n, outputs)) + offset).astype("float32")
    y_pred = (y_true + rng.normal(size=(n, outputs)) * 0.7).astype("float32")
    w = rng.uniform(0.2, 2.0, n).astype("float32")
    return y_true, y_pred, w


# --- the traps ----------------------------------------------------------------------------


def test_pearson_of_constant_predictions_is_nan_in_keras_and_zero_here():
    y_true = np.array([[1.0, 2.0, 3.0], [0.0, 1.0, 5.0]], "float32")
    y_pred = np.array([[0.5, 0.5, 0.5], [1.0, 2.0, 4.0]], "float32")
    k = keras.metrics.PearsonCorrelation()
    k.update_state(y_true, y_pred)
    assert np.isnan(to_numpy(k.result()))
    ours = metric_result(metrics.StablePearsonCorrelation(), [(y_true, y_pred)])
    assert_close(ours, np.mean(ref.pearson_correlation(y_true, y_pred, axis=-1)))
    assert_close(ours, ref.pearson_correlation(y_true[1], y_pred[1], axis=0) / 2)


def test_r2_of_a_constant_target_is_nan_in_keras_and_force_finite_here():
    y = np.full((4, 1), 2.5, "float32")
    k = keras.metrics.R2Score()
    k.update_state(y, y)
    # Keras 3.16 scores it 1.0 too (`force_finite`, as keras_stable).
    assert (to_numpy(k.result()) == 1.0) if KERAS_3_16 else np.isnan(to_numpy(k.result()))
    assert metric_result(metrics.StableR2Score(), [(y, y)]) == 1.0  # perfect
    off = y + np.array([[0.0], [1.0], [0.0], [0.0]], "float32")
    assert metric_result(metrics.StableR2Score(), [(y, off)]) == 0.0  # imperfect
    k.reset_state()
    k.update_state(y, off)
    assert to_numpy(k.result()) == 0.0  # Keras agrees there
    # Over several batches too: the constant stays exactly constant.
    batches = [(y, y)] * 3 + [(y[:1], y[:1])]
    assert metric_result(metrics.StableR2Score(), batches) == 1.0
    assert metric_result(metrics.StablePearsonCorrelation(axis=0), batches) == 0.0


# --- Pearson -------------------------------------------------------------------------------


def test_pearson_per_example_is_keras_where_keras_is_finite():
    y_true, y_pred, w = _data(1)
    for weights in (None, w):
        k = keras.metrics.PearsonCorrelation()
        k.update_state(
            y_true[:7], y_pred[:7], sample_weight=None if weights is None else weights[:7]
        )
        k.update_state(
            y_true[7:], y_pred[7:], sample_weight=None if weights is None else weights[7:]
        )
        ours = metric_result(
            metrics.StablePearsonCorrelation(), split_batches((y_true, y_pred, weights), (7, 13))
        )
        assert_close(ours, to_numpy(k.result()))
        per_row = ref.pearson_correlation(y_true, y_pred, axis=-1)
        expected = (
            per_row.mean() if weights is None else np.sum(per_row * weights) / np.sum(weights)
        )
        assert_close(ours, expected)


@pytest.mark.parametrize("offset", [0.0, 1e3])
def test_pearson_over_the_batch_streams_exactly(offset):
    y_true, y_pred, w = _data(2, n=30, offset=offset)
    y_pred = y_pred + np.float32(offset * 0.5)
    m = metrics.StablePearsonCorrelation(axis=0)
    for weights in (None, w):
        whole = metric_result(m, [(y_true, y_pred, weights)])
        expected = np.mean(
            ref.pearson_correlation(
                y_true, y_pred, axis=0, weights=None if weights is None else weights[:, None]
            )
        )
        assert_close(whole, expected)
        assert_close(
            metric_result(m, split_batches((y_true, y_pred, weights), (3, 11, 1, 15))), expected
        )
    # Keras averages per-batch correlations instead:
    k = keras.metrics.PearsonCorrelation(axis=0)
    for t, p, _ in split_batches((y_true, y_pred, w), (3, 27)):
        k.update_state(t, p)
    assert abs(to_numpy(k.result()) - expected) > 1e-3


def test_pearson_rank_one_inputs_and_all_axes():
    rng = np.random.default_rng(3)
    t = rng.normal(size=12).astype("float32")
    p = (t + rng.normal(size=12)).astype("float32")
    expected = ref.pearson_correlation(t, p, axis=0)
    assert_close(
        metric_result(metrics.StablePearsonCorrelation(), split_batches((t, p), (5, 7))), expected
    )
    t2, p2 = t.reshape(4, 3), p.reshape(4, 3)
    m = metrics.StablePearsonCorrelation(axis=None)
    assert_close(metric_result(m, split_batches((t2, p2), (1, 3))), expected)
    assert_close(metric_result(metrics.StablePearsonCorrelation(axis=(0, 1)), [(t2, p2)]), expected)


def test_pearson_keras_mask_and_zero_weights_count_for_nothing():
    y_true, y_pred, _ = _data(4, n=10)
    y_true[2] = np.nan  # a masked sample's NaN counts for nothing
    w = np.ones(10, "float32")
    w[2] = 0.0
    keep = w > 0
    for axis in (-1, 0):
        m = metrics.StablePearsonCorrelation(axis=axis)
        expected = metric_result(m, [(y_true[keep], y_pred[keep])])
        assert_close(metric_result(m, [(y_true, y_pred, w)]), expected)
        masked = keras.layers.Masking(0.0)(np.where(keep[:, None], y_pred, 0.0).astype("float32"))
        assert_close(metric_result(m, [(y_true, masked)]), expected)


# --- R2 -------------------------------------------------------------------------------------


@pytest.mark.parametrize("aggregation", [None, "uniform_average", "variance_weighted_average"])
def test_r2_matches_float64_and_keras_across_batches(aggregation):
    y_true, y_pred, w = _data(5)
    y_true[:, 2] = 1.5  # a constant column
    y_pred[:, 2] = y_true[:, 2]  # predicted perfectly
    multioutput = {
        None: "raw_values",
        "uniform_average": "uniform_average",
        "variance_weighted_average": "variance_weighted",
    }[aggregation]
    m = metrics.StableR2Score(class_aggregation=aggregation)
    for weights in (None, w):
        expected = ref.r2_score(y_true, y_pred, weights, multioutput)
        assert_close(metric_result(m, [(y_true, y_pred, weights)]), expected)
        assert_close(
            metric_result(m, split_batches((y_true, y_pred, weights), (6, 1, 13))), expected
        )
    # Keras, without the constant column, gives the same number.
    k = keras.metrics.R2Score(class_aggregation=aggregation)
    k.update_state(y_true[:, :2], y_pred[:, :2], sample_weight=w)
    fresh = metrics.StableR2Score(class_aggregation=aggregation)
    assert_close(metric_result(fresh, [(y_true[:, :2], y_pred[:, :2], w)]), to_numpy(k.result()))


def test_r2_with_a_large_offset_is_exact_where_keras_loses_digits():
    y_true, y_pred, _ = _data(6, n=64, outputs=1, offset=3e3)
    expected = ref.r2_score(y_true, y_pred)
    ours = metric_result(metrics.StableR2Score(), split_batches((y_true, y_pred), (16, 16, 32)))
    assert_close(ours, expected, tol=(1e-5, 1e-5))
    k = keras.metrics.R2Score()
    for t, p in split_batches((y_true, y_pred), (16, 16, 32)):
        k.update_state(t, p)
    assert abs(to_numpy(k.result()) - expected) > 1e-3


def test_r2_all_constant_targets_and_adjusted_score():
    y = np.array([[1.0, 2.0], [1.0, 2.0], [1.0, 2.0]], "float32")
    p = y + np.array([[0.0, 0.0], [0.0, 0.5], [0.0, 0.0]], "float32")
    # variance-weighted with every target constant: uniform (scikit-learn).
    m = metrics.StableR2Score(class_aggregation="variance_weighted_average")
    assert metric_result(m, [(y, p)]) == 0.5
    assert np.array_equal(
        metric_result(metrics.StableR2Score(class_aggregation=None), [(y, p)]), [1.0, 0.0]
    )
    # Adjusted R2: Keras's number for one output.
    y_true, y_pred, _ = _data(7, n=12, outputs=1)
    k = keras.metrics.R2Score(num_regressors=3)
    k.update_state(y_true, y_pred)
    assert_close(
        metric_result(metrics.StableR2Score(num_regressors=3), [(y_true, y_pred)]),
        to_numpy(k.result()),
    )
    r2 = ref.r2_score(y_true, y_pred)
    assert_close(
        metric_result(
            metrics.StableR2Score(num_regressors=3), split_batches((y_true, y_pred), (5, 7))
        ),
        1 - (1 - r2) * 11 / 8,
    )
    # Too few samples: the plain R2 (Keras warns and does the same).
    assert_close(metric_result(metrics.StableR2Score(num_regressors=11), [(y_true, y_pred)]), r2)


def test_r2_rank_one_inputs_and_half_precision():
    y_true, y_pred, _ = _data(8, n=9, outputs=1)
    expected = ref.r2_score(y_true, y_pred)
    assert_close(metric_result(metrics.StableR2Score(), [(y_true[:, 0], y_pred[:, 0])]), expected)
    assert_close(metric_result(metrics.StableR2Score(), [(y_true[:, 0], y_pred)]), expected)
    for dtype in ("float16", "bfloat16"):
        held = K.cast(K.convert_to_tensor(y_pred), dtype)
        m = metrics.StableR2Score()
        m.update_state(y_true, held)
        assert keras.backend.standardize_dtype(m.result().dtype) == "float32"
        assert_close(to_numpy(m.result()), ref.r2_score(y_true, to_numpy(held)))


def test_metrics_run_compiled_in_fit_and_evaluate():
    rng = np.random.default_rng(9)
    x = rng.normal(size=(32, 4)).astype("float32")
    y = (x @ rng.normal(size=(4, 2))).astype("float32")
    y[:, 1] = 3.0  # a constant target column
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    model.compile(
        optimizer="sgd",
        loss="mse",
        metrics=[metrics.StableR2Score(), metrics.StablePearsonCorrelation(axis=0)],
        jit_compile=keras.backend.backend() != "torch",
    )
    logs = model.evaluate(x, y, batch_size=8, verbose=0, return_dict=True)
    y_pred = to_numpy(model.predict(x, verbose=0))
    assert_close(logs["stable_r2_score"], ref.r2_score(y, y_pred), tol=(1e-4, 1e-5))
    assert_close(
        logs["stable_pearson_correlation"],
        np.mean(ref.pearson_correlation(y, y_pred, axis=0)),
        tol=(1e-4, 1e-5),
    )


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="class_aggregation"):
        metrics.StableR2Score(class_aggregation="mean")
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="num_regressors"):
            metrics.StableR2Score(num_regressors=bad)
    with pytest.raises(ValueError, match=r"\(batch, outputs\)"):
        metrics.StableR2Score().update_state(
            np.zeros((2, 3, 4), "float32"), np.zeros((2, 3, 4), "float32")
        )
    m = metrics.StableR2Score()
    m.update_state(np.zeros((2, 3), "float32"), np.zeros((2, 3), "float32"))
    with pytest.raises(ValueError, match="3 outputs"):
        m.update_state(np.zeros((2, 2), "float32"), np.zeros((2, 2), "float32"))
    with pytest.raises(ValueError, match="same shape"):
        metrics.StablePearsonCorrelation().update_state(
            np.zeros((2, 3), "float32"), np.zeros((2, 4), "float32")
        )
    with pytest.raises(ValueError, match="axis"):
        metrics.StablePearsonCorrelation(axis=2).update_state(
            np.zeros((2, 3), "float32"), np.zeros((2, 3), "float32")
        )
    with pytest.raises(ValueError, match="axis"):
        metrics.StablePearsonCorrelation(axis="rows")
