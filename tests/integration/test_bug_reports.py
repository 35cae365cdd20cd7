"""The two bug reports keras_stable exists for, replayed on Keras 3.

1. Multi-task regression with a one-task-at-a-time mask: the per-task
   distance `norm(ystar - y2, axis=0)` of every switched-off task is 0, and
   its gradient `x/||x||` is 0/0 = NaN under XLA (TF `jit_compile=True`) and
   on JAX. `MaskedMultiTaskDistance(per="task")` trains; the switched-off
   tasks' output columns get exactly zero gradient.
2. A hand-written softmax `exp(s) / sum(exp(s))` followed by `-sum(y log p)`
   in a small 2-3-2 network with large initial weights: logits above 88
   (float32) or 11 (float16) overflow `exp` and the loss is NaN.
   `StableSoftmaxCrossEntropy` on the logits trains 500 steps.
"""

import keras
import numpy as np
import pytest
from keras import ops

from keras_stable.losses import MaskedMultiTaskDistance
from keras_stable.losses import StableSoftmaxCrossEntropy
from tests.backend_utils import BACKEND
from tests.backend_utils import assert_finite
from tests.backend_utils import to_numpy
from tests.backend_utils import vjp_all_modes

JIT = BACKEND in ("tensorflow", "jax")

# --- bug report 1: masked multi-task distance ------------------------------------

TASKS = 30
FEATURES = 4
BATCH = 16


def _task_data(seed=0):
    rng = np.random.default_rng(seed)
    true_w = rng.normal(size=(FEATURES, TASKS)).astype("float32")
    x = rng.normal(size=(BATCH * TASKS, FEATURES)).astype("float32")
    y = x @ true_w + 0.01 * rng.normal(size=(BATCH * TASKS, TASKS)).astype("float32")
    # Step i trains task i % TASKS only: a (batch, tasks) one-hot weight.
    active = np.repeat(np.arange(TASKS), BATCH)
    mask = np.eye(TASKS, dtype="float32")[active]
    return x, y.astype("float32"), mask


def _linear_model():
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(TASKS)])


def _per_task_loss(model, x, y):
    pred = model.predict(x, batch_size=len(x), verbose=0)
    return np.sqrt(np.sum((pred - y) ** 2, axis=0))


def test_masked_multi_task_model_trains_with_finite_weights():
    x, y, mask = _task_data()
    model = _linear_model()
    loss = MaskedMultiTaskDistance(per="task")
    model.compile(optimizer=keras.optimizers.SGD(0.02), loss=loss, jit_compile=JIT)
    before = _per_task_loss(model, x, y)
    # 4 passes over the 30 tasks, one task per step, in order.
    history = model.fit(
        x, y, sample_weight=mask, batch_size=BATCH, epochs=4, shuffle=False, verbose=0
    )
    assert np.all(np.isfinite(history.history["loss"]))
    for w in model.weights:
        assert_finite(to_numpy(w.value), w.path)
    after = _per_task_loss(model, x, y)
    assert np.all(after < before), (before, after)
    assert history.history["loss"][-1] < history.history["loss"][0]


def test_switched_off_columns_get_exactly_zero_gradient():
    x, y, mask = _task_data(1)
    x, y, mask = x[:BATCH], y[:BATCH], mask[:BATCH]  # task 0 active
    rng = np.random.default_rng(2)
    kernel = rng.normal(size=(FEATURES, TASKS)).astype("float32")
    bias = np.zeros((TASKS,), "float32")
    loss = MaskedMultiTaskDistance(per="task")

    def fn(kernel, bias):
        return loss(y, ops.matmul(ops.convert_to_tensor(x), kernel) + bias, sample_weight=mask)

    out, (g_kernel, g_bias) = vjp_all_modes(fn, [kernel, bias], wrt=(0, 1))
    assert_finite(out)
    np.testing.assert_array_equal(g_kernel[:, 1:], 0.0)
    np.testing.assert_array_equal(g_bias[1:], 0.0)
    assert np.all(g_kernel[:, 0] != 0)


def _norm_loss(task):
    """The bug report's loss, with `keras.ops.norm` and a fixed task mask."""
    ymask = np.diag(np.eye(TASKS, dtype="float32")[task])

    def norm_loss(y_true, y_pred):
        y2 = ops.matmul(y_pred, ymask)
        ystar = ops.matmul(y_true, ymask)
        dist = ops.norm(ystar - y2, axis=0)
        return ops.mean(ops.square(dist)) / ops.cast(ops.shape(y_pred)[0], "float32")

    return norm_loss


def test_keras_ops_norm_formulation_is_nan_under_xla_and_jax():
    x, y, _ = _task_data()
    x, y = x[:BATCH], y[:BATCH]
    model = _linear_model()
    model.compile(optimizer=keras.optimizers.SGD(0.02), loss=_norm_loss(0), jit_compile=JIT)
    history = model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)
    kernel = to_numpy(model.weights[0].value)
    bias = to_numpy(model.weights[1].value)
    n_nan = int(np.isnan(kernel).sum() + np.isnan(bias).sum())
    # The loss value itself is finite: only the gradient is poisoned.
    assert np.isfinite(history.history["loss"][0])
    if BACKEND in ("tensorflow", "jax"):
        # TF under XLA and JAX: at least every switched-off column is NaN
        # after one step (the masking matmul's backward `NaN * 0` can spread
        # it to the active column too: measured 150 of 150 here).
        assert n_nan >= (FEATURES + 1) * (TASKS - 1), n_nan
    else:
        # torch: `vector_norm`'s backward special-cases ||x|| = 0 (gradient 0),
        # so the same code happens to stay finite here (docs/traps/norm-at-zero.md).
        assert n_nan == 0


def test_stable_loss_is_finite_where_keras_ops_norm_is_nan():
    # The same one-step comparison through the loss function alone.
    x, y, mask = _task_data()
    x, y, mask = x[:BATCH], y[:BATCH], mask[:BATCH]
    pred = (x @ np.ones((FEATURES, TASKS), "float32")).astype("float32")
    y_masked = y * mask
    _, (g_stable,) = vjp_all_modes(
        lambda p: MaskedMultiTaskDistance(per="task", squared=True)(y, p, sample_weight=mask),
        [pred],
    )
    assert_finite(g_stable)
    np.testing.assert_array_equal(g_stable[:, 1:], 0.0)
    if BACKEND == "jax":
        _, (g_norm,) = vjp_all_modes(lambda p: _norm_loss(0)(y_masked, p), [pred])
        assert np.isnan(g_norm[:, 1:]).all()


# --- bug report 2: hand-written softmax ---------------------------------------------

STEPS = 500


class HandWrittenSoftmax(keras.layers.Layer):
    """`exp(s) / reduce_sum(exp(s), axis=1, keepdims=True)`, as reported."""

    def call(self, s):
        e = ops.exp(s)
        return e / ops.sum(e, axis=1, keepdims=True)


def hand_written_cross_entropy(y_true, p):
    return -ops.sum(y_true * ops.log(p), axis=1)


def _xor_data():
    x = np.array([[0, 0], [0, 1], [1, 0], [1, 1]], "float32") * 4.0 - 2.0
    y = np.eye(2, dtype="float32")[[0, 1, 1, 0]]
    return np.tile(x, (STEPS, 1)), np.tile(y, (STEPS, 1))


def _net(hand_written):
    keras.utils.set_random_seed(3)
    big = keras.initializers.RandomNormal(stddev=30.0, seed=3)
    layers = [
        keras.Input((2,)),
        keras.layers.Dense(3, activation="relu", kernel_initializer=big),
        keras.layers.Dense(2, kernel_initializer=big),
    ]
    if hand_written:
        layers.append(HandWrittenSoftmax())
    return keras.Sequential(layers)


def _train(hand_written, policy):
    keras.config.set_dtype_policy(policy)
    try:
        x, y = _xor_data()
        model = _net(hand_written)
        loss = hand_written_cross_entropy if hand_written else StableSoftmaxCrossEntropy()
        model.compile(optimizer=keras.optimizers.SGD(1e-3), loss=loss, jit_compile=JIT)
        # One epoch of STEPS batches of 4: 500 optimizer steps, one fit call.
        history = model.fit(x, y, batch_size=4, epochs=1, shuffle=False, verbose=0)
        return model, history.history["loss"][0]
    finally:
        keras.config.set_dtype_policy("float32")


@pytest.mark.parametrize("policy", ["float32", "mixed_float16"])
def test_stable_softmax_cross_entropy_trains_500_steps(policy):
    x, y = _xor_data()
    model = _net(False)
    logits = to_numpy(model.predict(x[:4], verbose=0))
    assert np.abs(logits).max() > 88  # past float32's exp overflow
    initial = float(to_numpy(StableSoftmaxCrossEntropy()(y[:4], logits)))
    assert np.isfinite(initial)
    model, mean_loss = _train(False, policy)
    assert np.isfinite(mean_loss)
    final = float(to_numpy(StableSoftmaxCrossEntropy()(y[:4], model.predict(x[:4], verbose=0))))
    for w in model.weights:
        assert_finite(to_numpy(w.value), f"{policy} {w.path}")
    assert final < initial, (initial, final)


@pytest.mark.parametrize("policy", ["float32", "mixed_float16"])
def test_hand_written_softmax_is_nan(policy):
    _, mean_loss = _train(True, policy)
    assert np.isnan(mean_loss)


def test_hand_written_softmax_without_keepdims_broadcasts_silently():
    s = np.array([[1.0, 2.0], [3.0, 5.0]], "float32")
    e = np.exp(s)
    wrong = to_numpy(ops.exp(s) / ops.sum(ops.exp(s), axis=1))  # no error
    right = e / e.sum(axis=1, keepdims=True)
    assert not np.allclose(wrong, right)  # rows divided by the wrong sums
    y = np.array([[0.0, 1.0], [1.0, 0.0]], "float32")
    ours = to_numpy(StableSoftmaxCrossEntropy(reduction="none")(y, s))
    np.testing.assert_allclose(ours, -np.sum(y * np.log(right), axis=1), rtol=1e-6)
