"""keras_stable losses and metrics through `model.compile`: list and dict
forms for multi-output models, sample weights, reductions, jit_compile and
mixed precision. The compiled numbers must equal the classes called directly
on the model's predictions."""

import keras
import numpy as np
import pytest

from keras_stable import losses
from keras_stable import metrics
from tests.backend_utils import BACKEND
from tests.backend_utils import to_numpy

JIT = BACKEND in ("tensorflow", "jax")
N = 16
NAMES = ("cat", "sparse", "tasks", "binary")


def _model(seed=0):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((4,), name="x")
    h = keras.layers.Dense(8, activation="tanh")(inputs)
    outs = [
        keras.layers.Dense(3, name="cat")(h),
        keras.layers.Dense(3, name="sparse")(h),
        keras.layers.Dense(5, name="tasks")(h),
        keras.layers.Dense(2, name="binary")(h),
    ]
    return keras.Model(inputs, outs)


def _data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N, 4)).astype("float32")
    sparse = rng.integers(0, 3, N).astype("int32")
    sparse[[2, 5]] = -1
    tasks = rng.normal(size=(N, 5)).astype("float32")
    tasks[rng.random((N, 5)) < 0.5] = np.nan
    ys = [
        np.eye(3, dtype="float32")[rng.integers(0, 3, N)],
        sparse,
        tasks,
        rng.integers(0, 2, (N, 2)).astype("float32"),
    ]
    return x, ys


def _losses(reduction="sum_over_batch_size"):
    return [
        losses.StableSoftmaxCrossEntropy(label_smoothing=0.1, reduction=reduction),
        losses.StableSparseSoftmaxCrossEntropy(ignore_class=-1, reduction=reduction),
        losses.MaskedMultiTaskDistance(per="task", squared=True, reduction=reduction),
        losses.StableSigmoidCrossEntropy(reduction=reduction),
    ]


def _metrics():
    return [
        [metrics.StableCrossEntropy()],
        [metrics.StableSparseCrossEntropy(ignore_class=-1)],
        [metrics.MaskedMultiTaskDistance(per="task", squared=True)],
        [],
    ]


def _direct(loss_objs, y_pred, ys, sample_weight=None):
    return [
        float(to_numpy(loss(y, p, sample_weight=sample_weight)))
        for loss, y, p in zip(loss_objs, ys, y_pred)
    ]


@pytest.mark.parametrize("form", ["list", "dict"])
def test_multi_output_compile_matches_direct_calls(form):
    x, ys = _data()
    model = _model()
    loss_objs = _losses()
    if form == "list":
        model.compile(optimizer="sgd", loss=loss_objs, metrics=_metrics(), jit_compile=JIT)
        y_fit = ys
    else:
        model.compile(
            optimizer="sgd",
            loss=dict(zip(NAMES, loss_objs)),
            metrics=dict(zip(NAMES, _metrics())),
            jit_compile=JIT,
        )
        y_fit = dict(zip(NAMES, ys))
    result = model.evaluate(x, y_fit, batch_size=N, verbose=0, return_dict=True)
    y_pred = model.predict(x, batch_size=N, verbose=0)
    expected = _direct(loss_objs, y_pred, ys)
    for name, value in zip(NAMES, expected):
        np.testing.assert_allclose(result[f"{name}_loss"], value, rtol=1e-5, err_msg=name)
    np.testing.assert_allclose(result["loss"], sum(expected), rtol=1e-5)
    unsmoothed = float(to_numpy(losses.StableSoftmaxCrossEntropy()(ys[0], y_pred[0])))
    np.testing.assert_allclose(result["cat_stable_cross_entropy"], unsmoothed, rtol=1e-5)
    np.testing.assert_allclose(result["sparse_stable_sparse_cross_entropy"], expected[1], rtol=1e-5)
    np.testing.assert_allclose(result["tasks_masked_multi_task_distance"], expected[2], rtol=1e-5)
    history = model.fit(x, y_fit, batch_size=8, epochs=2, verbose=0)
    for key, values in history.history.items():
        assert np.all(np.isfinite(values)), (key, values)


@pytest.mark.parametrize(
    "reduction", ["sum_over_batch_size", "sum", "mean", "mean_with_sample_weight"]
)
def test_reductions_and_sample_weight_in_compile(reduction):
    x, ys = _data(1)
    sw = np.random.default_rng(1).uniform(0, 2, N).astype("float32")
    model = _model()
    loss_objs = _losses(reduction)
    model.compile(optimizer="sgd", loss=loss_objs, jit_compile=JIT)
    result = model.evaluate(x, ys, sample_weight=sw, batch_size=N, verbose=0, return_dict=True)
    y_pred = model.predict(x, batch_size=N, verbose=0)
    expected = _direct(loss_objs, y_pred, ys, sw)
    np.testing.assert_allclose(result["loss"], sum(expected), rtol=1e-5)


def test_task_sample_weight_masks_tasks_in_fit():
    # A (batch, tasks) sample weight switches tasks off per sample in fit.
    x, ys = _data(2)
    y = np.nan_to_num(ys[2])
    sw = np.zeros((N, 5), "float32")
    sw[np.arange(N), np.arange(N) % 5] = 1.0
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(5)])
    loss = losses.MaskedMultiTaskDistance(per="task")
    model.compile(
        optimizer="sgd",
        loss=loss,
        weighted_metrics=[metrics.MaskedMultiTaskDistance(per="task")],
        jit_compile=JIT,
    )
    result = model.evaluate(x, y, sample_weight=sw, batch_size=N, verbose=0, return_dict=True)
    pred = model.predict(x, batch_size=N, verbose=0)
    expected = float(to_numpy(loss(y, pred, sample_weight=sw)))
    np.testing.assert_allclose(result["loss"], expected, rtol=1e-5)
    np.testing.assert_allclose(result["masked_multi_task_distance"], expected, rtol=1e-5)
    model.fit(x, y, sample_weight=sw, batch_size=8, epochs=1, verbose=0)
    assert all(np.isfinite(to_numpy(w.value)).all() for w in model.weights)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_fit(policy):
    keras.config.set_dtype_policy(policy)
    try:
        x, ys = _data(3)
        model = _model()
        model.compile(optimizer="sgd", loss=_losses(), metrics=_metrics(), jit_compile=JIT)
        history = model.fit(x, ys, batch_size=8, epochs=1, verbose=0)
        for key, values in history.history.items():
            assert np.all(np.isfinite(values)), (policy, key, values)
        y_pred = model.predict(x, batch_size=N, verbose=0)
        for loss, y, p in zip(_losses(), ys, y_pred):
            out = loss(y, p)
            assert keras.backend.standardize_dtype(out.dtype) == "float32"
    finally:
        keras.config.set_dtype_policy("float32")
