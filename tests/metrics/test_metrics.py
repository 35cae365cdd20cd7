"""Metrics: exact across batches, reset, weights, ignored labels, errors."""

import keras
import numpy as np
import pytest

from keras_stable import losses
from keras_stable import metrics
from tests import reference
from tests.backend_utils import assert_close
from tests.backend_utils import metric_result
from tests.backend_utils import split_batches
from tests.backend_utils import to_numpy
from tests.losses.test_masked_multi_task_distance import ref_loss


def test_cross_entropy_is_exact_across_batches():
    rng = np.random.default_rng(0)
    labels = rng.dirichlet(np.ones(4), size=10).astype("float32")
    logits = (rng.normal(size=(10, 4)) * 3).astype("float32")
    logits[3, 1] = -np.inf
    labels[3] = [0.5, 0.0, 0.5, 0.0]
    sw = rng.uniform(0, 2, size=10).astype("float32")
    m = metrics.StableCrossEntropy()
    whole = metric_result(m, [(labels, logits, sw)])
    per_example = reference.softmax_cross_entropy(labels, logits)
    assert_close(whole, np.sum(per_example * sw) / np.sum(sw))
    assert_close(metric_result(m, split_batches((labels, logits, sw), (3, 5, 2))), whole)
    m.reset_state()
    assert to_numpy(m.result()) == 0.0
    # Same number as Keras's metric where Keras is finite.
    k = keras.metrics.CategoricalCrossentropy(from_logits=True)
    finite = np.arange(10) != 3
    k.update_state(labels[finite], logits[finite], sample_weight=sw[finite])
    assert_close(
        metric_result(m, [(labels[finite], logits[finite], sw[finite])]), to_numpy(k.result())
    )


def test_sparse_cross_entropy_ignores_labels_across_batches():
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 3, size=9).astype("int32")
    labels[[0, 1, 2, 7]] = -1  # the first batch is entirely ignored
    logits = rng.normal(size=(9, 3)).astype("float32")
    m = metrics.StableSparseCrossEntropy(ignore_class=-1)
    ref = reference.sparse_softmax_cross_entropy(labels, logits, ignore_class=-1)
    expected = ref.sum() / 5
    assert_close(metric_result(m, [(labels, logits)]), expected)
    assert_close(metric_result(m, split_batches((labels, logits), (3, 3, 3))), expected)
    assert metric_result(m, [(labels[:3], logits[:3])]) == 0.0
    # Float labels from a data pipeline.
    assert_close(metric_result(m, [(labels.astype("float32"), logits)]), expected)


@pytest.mark.parametrize("squared", [False, True])
@pytest.mark.parametrize("per", ["sample", "task"])
def test_task_distance_is_exact_across_batches(per, squared):
    rng = np.random.default_rng(2)
    y_true = rng.normal(size=(9, 4)).astype("float32")
    y_true[rng.random((9, 4)) < 0.3] = np.nan
    y_true[:3, 2] = np.nan  # a batch where task 2 has no label
    y_pred = rng.normal(size=(9, 4)).astype("float32")
    sw = (rng.random((9, 4)) < 0.8).astype("float32")
    m = metrics.MaskedMultiTaskDistance(per=per, squared=squared, task_mask=[1, 1, 1, 0])
    expected = ref_loss(y_true, y_pred, sw, per=per, squared=squared, task_mask=[1, 1, 1, 0])
    assert_close(metric_result(m, [(y_true, y_pred, sw)]), expected)
    assert_close(metric_result(m, split_batches((y_true, y_pred, sw), (3, 4, 2))), expected)
    m.reset_state()
    assert to_numpy(m.result()) == 0.0


def test_task_distance_sample_weights_per_sample():
    # per="sample", (batch,) weights: a weighted mean over active samples.
    y_true = np.array([[3.0, 4.0], [np.nan, np.nan], [1.0, 0.0]], "float32")
    y_pred = np.zeros((3, 2), "float32")
    m = metrics.MaskedMultiTaskDistance()
    m.update_state(y_true, y_pred, sample_weight=np.array([1.0, 5.0, 3.0], "float32"))
    assert_close(to_numpy(m.result()), (5.0 + 3.0) / 4.0)


def test_metric_matches_loss_value():
    rng = np.random.default_rng(3)
    y_true = rng.normal(size=(6, 3)).astype("float32")
    y_pred = rng.normal(size=(6, 3)).astype("float32")
    for per in ("sample", "task"):
        m = metrics.MaskedMultiTaskDistance(per=per)
        m.update_state(y_true, y_pred)
        assert_close(
            to_numpy(m.result()), to_numpy(losses.MaskedMultiTaskDistance(per=per)(y_true, y_pred))
        )


def test_registered_names_are_distinct():
    loss_name = keras.saving.get_registered_name(losses.MaskedMultiTaskDistance)
    metric_name = keras.saving.get_registered_name(metrics.MaskedMultiTaskDistance)
    assert loss_name == "keras_stable>MaskedMultiTaskDistance"
    assert metric_name == "keras_stable>MaskedMultiTaskDistanceMetric"
    assert keras.saving.get_registered_object(metric_name) is metrics.MaskedMultiTaskDistance


def test_states_are_sum_aggregated():
    m = metrics.MaskedMultiTaskDistance(per="task", task_mask=[True, True])
    for metric in (m, metrics.StableCrossEntropy(), metrics.StableSparseCrossEntropy()):
        assert metric.variables
        for v in metric.variables:
            assert v.aggregation == "sum", (metric.name, v.path)
            assert keras.backend.standardize_dtype(v.dtype) == "float32"


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="per"):
        metrics.MaskedMultiTaskDistance(per="all")
    with pytest.raises(ValueError, match="task_mask"):
        metrics.MaskedMultiTaskDistance(task_mask=[0.5, 1])
    with pytest.raises(ValueError, match="ignore_class"):
        metrics.StableSparseCrossEntropy(ignore_class="pad")
    m = metrics.MaskedMultiTaskDistance(per="task", task_mask=[True, False])
    with pytest.raises(ValueError, match=r"task_mask.*\(2, 3\)"):
        m.update_state(np.zeros((2, 3), "float32"), np.zeros((2, 3), "float32"))
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(2, 4\)"):
        metrics.StableCrossEntropy().update_state(
            np.zeros((2, 3), "float32"), np.zeros((2, 4), "float32")
        )


# --------------------------------------------------------------------------
# Missing (NaN) labels: the masked regression metrics and the binary CE
# --------------------------------------------------------------------------

MASKED_METRICS = [
    ("mse", metrics.MaskedMeanSquaredError, {}, reference.masked_squared_error),
    ("mae", metrics.MaskedMeanAbsoluteError, {}, reference.masked_absolute_error),
    ("huber", metrics.MaskedHuber, {"delta": 0.7}, lambda y, p: reference.masked_huber(y, p, 0.7)),
]
KERAS_METRICS = {
    "mse": keras.metrics.MeanSquaredError,
    "mae": keras.metrics.MeanAbsoluteError,
}


def _missing_regression_data(seed=4):
    rng = np.random.default_rng(seed)
    y_true = (rng.normal(size=(9, 3)) * 2).astype("float32")
    y_true[rng.random((9, 3)) < 0.3] = np.nan
    y_true[1] = np.nan  # an example without any label, in the first batch
    y_true[0, 0] = 1.0
    y_pred = (rng.normal(size=(9, 3)) * 2).astype("float32")
    y_pred[1, 2] = 1e30  # under missing labels: counts for nothing
    sw = rng.uniform(0.2, 2.0, size=9).astype("float32")
    return y_true, y_pred, sw


@pytest.mark.parametrize("weighted", [False, True], ids=["no_sw", "sw"])
@pytest.mark.parametrize(
    "name, cls, kwargs, elementwise", MASKED_METRICS, ids=[m[0] for m in MASKED_METRICS]
)
def test_masked_regression_metrics_are_exact_across_batches(
    name, cls, kwargs, elementwise, weighted
):
    """Streamed over two batches: the float64 value over the concatenated
    data with the NaN labels dropped (each example's mean over its observed
    labels, examples without one left out), weighted by `sample_weight`."""
    y_true, y_pred, sw = _missing_regression_data()
    sw = sw if weighted else None
    m = cls(**kwargs)
    per_example, valid = reference.mean_over_observed(elementwise(y_true, y_pred), y_true)
    w = np.ones(len(y_true)) if sw is None else sw.astype("float64")
    expected = np.sum(np.where(valid, per_example * w, 0.0)) / np.sum(w[valid])
    assert_close(metric_result(m, split_batches((y_true, y_pred, sw), (4, 5))), expected)
    assert_close(metric_result(m, [(y_true, y_pred, sw)]), expected)
    # The loss's `mean_with_sample_weight` on the whole batch is the same number.
    loss = m.loss_class(reduction="mean_with_sample_weight", **kwargs)
    assert_close(to_numpy(loss(y_true, y_pred, sample_weight=sw)), expected)
    m.reset_state()
    assert to_numpy(m.result()) == 0.0
    # A batch without any label leaves the result at 0, not NaN.
    assert metric_result(m, [(np.full((2, 3), np.nan, "float32"), y_pred[:2])]) == 0.0
    if name in KERAS_METRICS:
        # Keras's metric is NaN from the first batch holding a NaN label on,
        # and gives the same number without missing labels.
        k = KERAS_METRICS[name]()
        k.update_state(y_true, y_pred, sample_weight=sw)
        assert np.isnan(to_numpy(k.result()))
        complete = ~np.isnan(y_true).any(-1)
        k = KERAS_METRICS[name]()
        k.update_state(y_true[complete], y_pred[complete])
        assert_close(metric_result(m, [(y_true[complete], y_pred[complete])]), to_numpy(k.result()))


def test_binary_cross_entropy_skips_missing_labels_across_batches():
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 2, (8, 3)).astype("float32")
    labels[rng.random((8, 3)) < 0.3] = np.nan
    labels[5] = np.nan
    logits = (rng.normal(size=(8, 3)) * 3).astype("float32")
    sw = rng.uniform(0.2, 2.0, 8).astype("float32")
    observed = ~np.isnan(labels)
    elementwise = np.where(
        observed, reference.sigmoid_cross_entropy(np.nan_to_num(labels), logits), 0.0
    )
    per_example, valid = reference.mean_over_observed(elementwise, labels)
    expected = np.sum(np.where(valid, per_example * sw, 0.0)) / np.sum(sw[valid])
    m = metrics.StableBinaryCrossEntropy()
    assert_close(metric_result(m, split_batches((labels, logits, sw), (3, 5))), expected)
    k = keras.metrics.BinaryCrossentropy(from_logits=True)
    k.update_state(labels, logits, sample_weight=sw)
    assert np.isnan(to_numpy(k.result()))


def test_masked_regression_metrics_register_apart_from_their_losses():
    for name in ("MaskedMeanSquaredError", "MaskedMeanAbsoluteError", "MaskedHuber"):
        metric_cls = getattr(metrics, name)
        assert keras.saving.get_registered_name(getattr(losses, name)) == f"keras_stable>{name}"
        registered = keras.saving.get_registered_name(metric_cls)
        assert registered == f"keras_stable>{name}Metric"
        assert keras.saving.get_registered_object(registered) is metric_cls
        metric = metric_cls()
        assert metric.variables
        for v in metric.variables:
            assert v.aggregation == "sum", (metric.name, v.path)
    with pytest.raises(ValueError, match="delta"):
        metrics.MaskedHuber(delta=0.0)
    assert metrics.MaskedHuber(delta=0.5).get_config()["delta"] == 0.5
