"""Data-parallel training: two replicas give the numbers of one device.

The model of `_models.py` has one output per keras_stable loss and the
three keras_stable metrics, so one `fit` covers them all. On 32 samples in
batches of 16 (8 per replica), for 2 epochs:

- TensorFlow, `tf.distribute.MirroredStrategy` over two logical CPU devices
  (configured before TensorFlow initialises, hence a fresh process): the
  per-epoch losses and metrics equal those of one device within float32
  tolerance.
- JAX, `keras.distribution.DataParallel` over two host devices (the pytest
  process has two: tests/conftest.py sets `XLA_FLAGS`): the same.
- PyTorch: Keras has no distribution API for torch (`keras.distribution`
  is JAX-only, and `fit` does not drive `torch.distributed`), so nothing is
  tested there.

What "the same" means for losses that are not sums over samples is
documented in docs/saving_and_distribution.md and pinned down here:

- `tf.distribute` computes each loss on each replica's shard and averages
  the replicas. A loss that is a mean over samples agrees with one device;
  a loss that divides by a per-batch count (`ignore_class`, NaN labels) or
  takes a norm across the batch (`MaskedMultiTaskDistance(per="task")`)
  equals the mean over replicas of the loss on each shard, i.e. one device
  with the per-replica batch size. The test data has the same number of
  valid labels in every shard, so the first kind agrees with one device.
- JAX `DataParallel` computes the loss of the global batch (the compiled
  step is partitioned by XLA, its meaning is that of one device): every
  loss, `per="task"` included, equals one device with the global batch.
- The stateful metrics sum their states across replicas, so on both
  backends they equal one device with any batching.
"""

import pathlib

import keras
import numpy as np
import pytest

import keras_stable  # noqa: F401  (registers the classes)
from tests.backend_utils import assert_close
from tests.integration import _models
from tests.integration._fresh_process import run_fresh

BACKEND = keras.backend.backend()
REPO = pathlib.Path(__file__).resolve().parent.parent.parent
GLOBAL_BATCH = 16
EPOCHS = 2
TOL = (1e-5, 1e-6)  # float32: the replicas add partial sums in another order


def assert_logs_close(actual, expected, what):
    assert actual.keys() == expected.keys(), what
    for name in expected:
        assert_close(actual[name], expected[name], what=f"{what}: {name}", tol=TOL)


# --------------------------------------------------------------------------
# TensorFlow: MirroredStrategy, in a fresh process
# --------------------------------------------------------------------------

_MIRRORED = """
import sys
import tensorflow as tf

# Two logical CPU devices: only possible before TensorFlow initialises.
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
)
import keras
import numpy as np

sys.path.insert(0, {repo!r})
from tests.integration import _models

one = tf.distribute.get_strategy()
two = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
assert two.num_replicas_in_sync == 2
x, y = _models.make_data(n=32)
xa, ya = _models.asymmetric_data()


def build(strategy, per):
    with strategy.scope():
        return _models.compile_model(
            _models.build_model(), per=per, optimizer=keras.optimizers.SGD(0.05)
        )


def evaluate(model, x, y, batch):
    logs = model.evaluate(x, y, batch_size=batch, verbose=0, return_dict=True)
    return {{k: float(v) for k, v in logs.items()}}


def fit(model):
    history = model.fit(x, y, batch_size={batch}, epochs={epochs}, shuffle=False, verbose=0)
    return history.history


out = {{"fit_one": fit(build(one, "sample")), "fit_two": fit(build(two, "sample"))}}
task_one, task_two = build(one, "task"), build(two, "task")
out["task_one_global"] = evaluate(task_one, x, y, {batch})
out["task_one_shard"] = evaluate(task_one, x, y, {batch} // 2)
out["task_two"] = evaluate(task_two, x, y, {batch})
out["asym_one_global"] = evaluate(task_one, xa, ya, {batch})
out["asym_one_shard"] = evaluate(task_one, xa, ya, {batch} // 2)
out["asym_two"] = evaluate(task_two, xa, ya, {batch})
fit_task_two = task_two.fit(x, y, batch_size={batch}, epochs=1, shuffle=False, verbose=0)
out["fit_task_two"] = fit_task_two.history
report(out)
"""


@pytest.mark.tensorflow
def test_mirrored_strategy_matches_one_device(tmp_path):
    out = run_fresh(
        _MIRRORED.format(repo=str(REPO), batch=GLOBAL_BATCH, epochs=EPOCHS),
        "tensorflow",
        cwd=tmp_path,
    )

    # Every loss and metric, every epoch: two replicas == one device.
    one, two = out["fit_one"], out["fit_two"]
    assert one.keys() == two.keys()
    assert {f"{name}_loss" for name in _models.OUTPUTS} <= one.keys()
    assert len([k for k in one if not k.endswith("loss")]) == 3, one.keys()
    for name in one:
        assert len(one[name]) == EPOCHS
        assert_close(two[name], one[name], what=name, tol=TOL)
    assert one["loss"][1] < one["loss"][0]  # it trains

    # per="task" under tf.distribute: each replica's norm over its own shard,
    # averaged across replicas == one device with the per-replica batch.
    assert_logs_close(out["task_two"], out["task_one_shard"], "per='task', 2 replicas vs batch 8")
    assert abs(out["task_two"]["tasks_loss"] - out["task_one_global"]["tasks_loss"]) > 1e-3
    # ... while the stateful per-task metric is the global one.
    metric = "tasks_masked_multi_task_distance"
    assert_close(out["task_two"][metric], out["task_one_global"][metric], what=metric, tol=TOL)
    assert_close(
        out["task_one_shard"][metric], out["task_one_global"][metric], what=metric, tol=TOL
    )

    # Shards with different numbers of ignored labels: the loss averages per
    # replica (== one device with batch 8, != the global mean) while the
    # metric keeps global sums and counts (== one device with any batch).
    loss, metric = "log_probs_loss", "log_probs_stable_sparse_cross_entropy"
    assert_close(out["asym_two"][loss], out["asym_one_shard"][loss], what=loss, tol=TOL)
    assert abs(out["asym_two"][loss] - out["asym_one_global"][loss]) > 1e-3
    assert_close(out["asym_two"][metric], out["asym_one_global"][metric], what=metric, tol=TOL)

    # Training with per="task" on two replicas is finite.
    assert all(np.isfinite(v).all() for v in out["fit_task_two"].values())


# --------------------------------------------------------------------------
# JAX: keras.distribution.DataParallel, in the pytest process
# --------------------------------------------------------------------------


def _with_distribution(distribution, fn):
    previous = keras.distribution.distribution()
    keras.distribution.set_distribution(distribution)
    try:
        return fn()
    finally:
        keras.distribution.set_distribution(previous)


@pytest.mark.jax
def test_data_parallel_matches_one_device():
    import jax

    devices = jax.devices()
    if len(devices) < 2:
        pytest.skip("needs XLA_FLAGS=--xla_force_host_platform_device_count=2 before JAX starts")
    data_parallel = keras.distribution.DataParallel(devices=devices[:2])
    x, y = _models.make_data(n=32)
    xa, ya = _models.asymmetric_data()

    def build(per):
        return _models.compile_model(
            _models.build_model(), per=per, optimizer=keras.optimizers.SGD(0.05)
        )

    def fit():
        model = build("sample")
        history = model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
        return history.history, model

    def evaluate_task():
        model = build("task")
        return [
            model.evaluate(xs, ys, batch_size=GLOBAL_BATCH, verbose=0, return_dict=True)
            for xs, ys in ((x, y), (xa, ya))
        ]

    one, _ = fit()
    two, model = _with_distribution(data_parallel, fit)
    # The variables really are replicated over the two devices.
    assert len(model.trainable_variables[0].value.sharding.device_set) == 2

    assert one.keys() == two.keys()
    assert len([k for k in one if not k.endswith("loss")]) == 3, one.keys()
    for name in one:
        assert_close(two[name], one[name], what=name, tol=TOL)

    # The global batch's meaning, whatever the loss: per="task" and shards
    # with different counts of ignored labels agree with one device.
    task_one = evaluate_task()
    task_two = _with_distribution(data_parallel, evaluate_task)
    for what, got, expected in zip(("symmetric", "asymmetric"), task_two, task_one):
        assert_logs_close(got, expected, f"per='task', {what} shards")


# --------------------------------------------------------------------------
# PyTorch: nothing to test through Keras
# --------------------------------------------------------------------------


@pytest.mark.torch
def test_torch_has_no_keras_data_parallel():
    """Keras 3.15's distribution API is not implemented for torch.

    `keras.distribution.list_devices()` fails there, and `fit` does not
    drive `torch.distributed`; data-parallel equivalence is asserted on
    TensorFlow and JAX only (docs/saving_and_distribution.md).
    """
    try:
        keras.distribution.list_devices()
    except Exception as error:  # AttributeError in Keras 3.15
        pytest.skip(f"keras.distribution is not implemented for torch ({type(error).__name__})")
    pytest.skip(
        "keras.distribution answers on torch now, but data parallelism is only asserted on TF and JAX"
    )
