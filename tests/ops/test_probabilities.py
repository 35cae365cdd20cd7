"""`from_logits=False` for every cross-entropy: the saturated-probability trap.

Probabilities are exact down to the smallest normal float32
(1.1754944e-38); below it (a denormal, flushed to 0 by XLA and kept by
torch, or 0) they saturate at a loss of 87.34 per unit of label, with a
zero gradient, never NaN or inf. The logits behind a softmax/sigmoid output
are used where the backend exposes them (TF and torch tensors), so a
softmax output with a logit gap of 90 gives the exact 90.
"""

import warnings

import keras
import numpy as np
import pytest

from keras_stable import ops
from tests import reference as ref
from tests.backend_utils import BACKEND
from tests.backend_utils import MODES
from tests.backend_utils import assert_close
from tests.backend_utils import assert_finite
from tests.backend_utils import cast_tensor
from tests.backend_utils import finite_difference
from tests.backend_utils import float64_enabled
from tests.backend_utils import to_numpy
from tests.backend_utils import vjp
from tests.backend_utils import vjp_all_modes

TINY = float(np.finfo(np.float32).tiny)
SATURATED = -np.log(TINY)  # 87.336544...
K = keras.ops


# Each cross-entropy on probabilities, with labels on the first class.
def _softmax_ce(p):
    return ops.softmax_cross_entropy(
        np.eye(3, dtype="float32")[[0] * p.shape[0]], p, from_logits=False
    )


def _sparse_ce(p):
    return ops.sparse_softmax_cross_entropy(np.zeros(p.shape[0], "int32"), p, from_logits=False)


def _sigmoid_ce(p):
    return ops.sigmoid_cross_entropy(np.ones(p.shape, "float32"), p, from_logits=False)


def _softmax_focal(p):
    return ops.softmax_focal_cross_entropy(
        np.eye(3, dtype="float32")[[0] * p.shape[0]], p, gamma=0.5, from_logits=False
    )


def _sigmoid_focal(p):
    return ops.sigmoid_focal_cross_entropy(
        np.ones(p.shape, "float32"), p, gamma=0.5, from_logits=False
    )


def _kl(p):
    return ops.kl_divergence(np.eye(3, dtype="float32")[[0] * p.shape[0]], p, from_logits=False)


SOFTMAX_OPS = [_softmax_ce, _sparse_ce, _softmax_focal, _kl]
ALL_OPS = SOFTMAX_OPS + [_sigmoid_ce, _sigmoid_focal]
IDS = {f: f.__name__.strip("_") for f in ALL_OPS}


def _first_class_probs(p0):
    """Rows whose first class has probability p0 (renormalised exactly)."""
    p0 = np.asarray(p0, "float32")
    rest = (1.0 - p0.astype("float64")) / 2
    return np.stack([p0, rest, rest], -1).astype("float32")


@pytest.mark.parametrize("op", ALL_OPS, ids=IDS.get)
def test_exact_down_to_the_smallest_normal_probability(op):
    p0 = np.array([0.3, 1e-10, 1e-30, 2.0 * TINY, TINY], "float32")
    probs = _first_class_probs(p0) if op in SOFTMAX_OPS else p0[:, None]
    out, (grad,) = vjp_all_modes(op, [probs])
    out = out.reshape(-1)
    gamma = 0.0 if op in (_softmax_ce, _sparse_ce, _sigmoid_ce, _kl) else 0.5
    # -log p0 (renormalised), times the focal factor (1 - p0)**gamma.
    nlog = (
        -ref.log_softmax(np.log(probs.astype("float64")))[:, 0]
        if op in SOFTMAX_OPS
        else -np.log(p0.astype("float64"))
    )
    expected = (1.0 - p0.astype("float64")) ** gamma * nlog
    assert_close(out, expected)
    assert_finite(grad)
    # d(-log(p0 / sum(p)))/dp0 = -1/p0 + 1/sum(p): exact (and finite, at
    # most 1/1.18e-38 = 8.5e37) down to the smallest normal.
    p64 = probs.astype("float64")
    if op in (_softmax_ce, _sparse_ce, _kl):
        assert_close(grad[:, 0], -1.0 / p64[:, 0] + 1.0 / p64.sum(-1))
    elif op is _sigmoid_ce:
        assert_close(grad[:, 0], -1.0 / p64[:, 0])
    assert np.all(grad[:, 0] < 0)


@pytest.mark.parametrize("op", ALL_OPS, ids=IDS.get)
def test_below_the_smallest_normal_saturates_with_a_zero_gradient(op):
    # A denormal (XLA flushes it to 0, torch keeps it) and an exact 0.
    p0 = np.array([8e-40, 1e-45, 0.0], "float32")
    probs = _first_class_probs(p0) if op in SOFTMAX_OPS else p0[:, None]
    out, (grad,) = vjp_all_modes(op, [probs])
    assert_close(out.reshape(-1), np.full(3, SATURATED), tol=(1e-5, 1e-5))
    assert_finite(grad)
    if op is _sigmoid_focal:
        # Only log(p) saturates: the factor (1 - p)**0.5 keeps its gradient.
        assert_close(grad[:, 0], np.full(3, -0.5 * SATURATED))
    else:
        np.testing.assert_array_equal(grad[:, 0], 0.0)


@pytest.mark.parametrize("op", ALL_OPS, ids=IDS.get)
def test_invalid_probabilities_give_nan(op):
    p0 = np.array([-0.1, np.nan], "float32")
    probs = _first_class_probs(p0) if op in SOFTMAX_OPS else p0[:, None]
    assert np.isnan(to_numpy(op(cast_tensor(probs)))).all()


def test_hand_written_log_of_softmax_is_inf_on_every_backend():
    labels = np.array([[1.0, 0.0]], "float32")
    logits = np.array([[0.0, 90.0]], "float32")
    for mode in MODES:
        value, (grad,) = vjp(
            lambda x: -K.sum(cast_tensor(labels) * K.log(K.softmax(x))), [logits], mode=mode
        )
        assert value == np.inf or np.isnan(grad).any(), (value, grad)


@pytest.mark.parametrize("mode", MODES)
def test_softmax_output_gap_90_uses_the_logits(mode):
    """`p = softmax([0, 90])` is 8e-40 (a denormal, 0 under XLA). From the
    logits the loss is exactly 90 with the gradient [-1, 1]; where the
    backend exposes no logits (JAX) it saturates at 87.34, finite."""
    labels = np.array([[1.0, 0.0]], "float32")
    logits = np.array([[0.0, 90.0]], "float32")
    for op in (
        lambda p: ops.softmax_cross_entropy(labels, p, from_logits=False),
        lambda p: ops.sparse_softmax_cross_entropy(np.array([0]), p, from_logits=False),
        lambda p: ops.kl_divergence(labels, p, from_logits=False),
        lambda p: ops.softmax_focal_cross_entropy(labels, p, gamma=0.0, from_logits=False),
    ):
        value, (grad,) = vjp(lambda x: op(keras.activations.softmax(x)), [logits], mode=mode)
        assert_finite(grad)
        if BACKEND == "jax":  # tracers take no `_keras_logits`
            assert_close(value, [SATURATED])
        else:
            assert_close(value, [90.0])
            assert_close(grad, [[-1.0, 1.0]])


@pytest.mark.parametrize("mode", MODES)
def test_sigmoid_output_uses_the_logits(mode):
    labels = np.array([[1.0, 0.0]], "float32")
    logits = np.array([[-100.0, 100.0]], "float32")
    for op in (
        lambda p: ops.sigmoid_cross_entropy(labels, p, from_logits=False),
        lambda p: ops.sigmoid_focal_cross_entropy(labels, p, gamma=0.0, from_logits=False),
    ):
        value, (grad,) = vjp(lambda x: op(keras.activations.sigmoid(x)), [logits], mode=mode)
        assert_finite(grad)
        if BACKEND == "jax":
            # sigmoid(-100) = 3.7e-44 and 1 - sigmoid(100) = 0 in float32.
            assert_close(value, [[SATURATED, SATURATED]], tol=(1e-5, 1e-5))
        else:
            assert_close(value, [[100.0, 100.0]])
            assert_close(grad, [[-1.0, 1.0]])


@pytest.mark.tensorflow
def test_tensorflow_graph_softmax_op_gives_its_logits():
    """In a TF graph, the input of a `Softmax`/`Sigmoid` op is the logits,
    also for `tf.nn.softmax` (which marks nothing)."""
    import tensorflow as tf

    @tf.function
    def losses(z):
        p, q = tf.nn.softmax(z), tf.math.sigmoid(-z[:, 1:])
        return (
            ops.softmax_cross_entropy(tf.constant([[1.0, 0.0]]), p, from_logits=False),
            ops.sigmoid_cross_entropy(tf.constant([[1.0]]), q, from_logits=False),
        )

    ce, bce = losses(tf.constant([[0.0, 90.0]]))
    assert_close(to_numpy(ce), [90.0])
    assert_close(to_numpy(bce), [[90.0]])


@pytest.mark.tensorflow
@pytest.mark.parametrize("op", SOFTMAX_OPS, ids=IDS.get)
def test_tensorflow_graph_softmax_output_is_not_read(op):
    """Where the graph shows `Softmax(logits)` over the loss's axis, the loss
    reads the logits only: nothing consumes the softmax output, so a
    compiled step drops it as Keras's own loss lets it (the values check
    cost 2-3x Keras's time on a 3000-class output)."""
    import tensorflow as tf

    logits = tf.constant(3.0 * np.random.default_rng(0).standard_normal((4, 3)), "float32")
    graph = tf.function(lambda z: op(keras.activations.softmax(z))).get_concrete_function(logits)
    (softmax,) = [o for o in graph.graph.get_operations() if o.type == "Softmax"]
    assert softmax.outputs[0].consumers() == []


@pytest.mark.tensorflow
def test_tensorflow_graph_softmax_over_another_axis_is_read_as_probabilities():
    """A softmax over axis 0 feeding a loss over axis -1 (the graph shows a
    transposed `Softmax`): the logits do not give this loss; the values are
    read as probabilities, renormalised over the loss's axis."""
    import tensorflow as tf

    logits = np.array([[0.0, 1.0, 2.0], [2.0, 0.0, -1.0]], "float32")
    labels = np.array([2, 0])

    @tf.function
    def loss(z):
        return ops.sparse_softmax_cross_entropy(labels, tf.nn.softmax(z, axis=0), from_logits=False)

    p = ref.softmax(logits.astype("float64"), axis=0)
    expected = -np.log(p[[0, 1], labels] / p.sum(axis=-1))
    assert_close(to_numpy(loss(tf.constant(logits))), expected)


@pytest.mark.torch
def test_torch_autograd_graph_shows_the_activation():
    """torch: `grad_fn` shows a softmax over the last axis or a sigmoid of
    the marked logits; a softmax over another axis, a tensor modified after
    the activation, or one computed without gradient tracking shows nothing
    (its values are checked instead)."""
    import torch

    from keras_stable.common.checks import graph_activation

    z = torch.randn(3, 4, requires_grad=True)
    h = 2.0 * z
    assert graph_activation(keras.activations.softmax(z), z, 2) == "softmax"
    assert graph_activation(keras.activations.softmax(h, axis=1), h, 2) == "softmax"
    assert graph_activation(keras.activations.softmax(h, axis=0), h, 2) is None
    assert graph_activation(keras.activations.sigmoid(h), h, 2) == "sigmoid"
    assert graph_activation(keras.activations.sigmoid(h), z, 2) is None
    assert graph_activation(keras.activations.softmax(h).clamp(1e-7, 1.0), h, 2) is None
    with torch.no_grad():
        assert graph_activation(keras.activations.softmax(h), h, 2) is None
    labels = np.array([1, 0, 3])
    value = ops.sparse_softmax_cross_entropy(
        labels, keras.activations.softmax(h), from_logits=False
    )
    expected = -ref.log_softmax(to_numpy(h))[[0, 1, 2], labels]
    assert_close(to_numpy(value), expected)


@pytest.mark.skipif(BACKEND == "jax", reason="JAX arrays carry no `_keras_logits`")
def test_softmax_output_in_a_sigmoid_loss_is_read_as_probabilities():
    """Keras's logits marker does not say which activation made the output;
    Keras on TensorFlow reads a softmax output's logits as sigmoid logits.
    keras_stable checks that the activation reproduces the output first."""
    labels = np.array([[0.0, 1.0, 1.0]], "float32")
    logits = cast_tensor([[1.0, 2.0, 3.0]])
    probs = keras.activations.softmax(logits)
    plain = K.convert_to_tensor(to_numpy(probs).astype("float32"))
    expected = ref.sigmoid_cross_entropy_from_probabilities(labels, to_numpy(plain))
    assert_close(to_numpy(ops.sigmoid_cross_entropy(labels, probs, from_logits=False)), expected)
    if BACKEND == "tensorflow":
        keras_value = to_numpy(keras.losses.BinaryCrossentropy(reduction="none")(labels, probs))
        assert abs(keras_value[0] - expected.mean()) > 0.1  # sigmoid of the softmax logits


HALF_FLOOR = {"float16": 2.0**-24, "bfloat16": 1.1754943508222875e-38}
# TensorFlow and torch keep an activation's logits on its output; JAX
# arrays take no attribute.
EXPOSES_LOGITS = BACKEND in ("tensorflow", "torch")


def test_half_precision_probabilities_are_read_exactly():
    for dtype in ("float16", "bfloat16"):
        probs = cast_tensor(_first_class_probs([1e-4, 0.25]), dtype)
        exact = to_numpy(probs)  # the float16 values, exactly
        out = to_numpy(
            ops.softmax_cross_entropy(
                np.eye(3, dtype="float32")[[0, 0]], K.cast(probs, "float32"), from_logits=False
            )
        )
        expected = -ref.log_softmax(np.log(exact))[:, 0]
        assert_close(out, expected)
        # Half-precision probabilities without logits (a plain tensor) are
        # read as held, floored at the dtype's smallest positive value
        # (float16: e^-20 is 0), with a warning naming the fix.
        held = cast_tensor(
            to_numpy(keras.activations.softmax(cast_tensor([[-20.0, 20.0, -40.0]], dtype))), dtype
        )
        with pytest.warns(UserWarning, match=f"reads {dtype} probabilities without their logits"):
            out = to_numpy(
                ops.softmax_cross_entropy(np.eye(3, dtype="float32")[[0]], held, from_logits=False)
            )
        p = np.maximum(to_numpy(held).astype("float64"), HALF_FLOOR[dtype])
        assert_close(out, -ref.log_softmax(np.log(p))[:, 0], dtype)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("mode", MODES)
def test_half_precision_softmax_output_is_read_through_its_logits(dtype, mode):
    # The keras-io Transformer classifier under mixed_float16: the true
    # class at 2.4e-7 in a float16 softmax output (row 0) and at 0 (row 2).
    # Keras's loss gives 15.25 and 16.12 there and hands `-1/p = -4.2e6`
    # (beyond float16) to the softmax: NaN in the logits' gradient. Where
    # the backend keeps the logits on the output (TF, torch), the loss reads
    # them: the exact loss, and the exact gradient `softmax - onehot`. On
    # JAX the probabilities as held, floored at 2**-24 (16.64 for row 2).
    logits = np.array([[0.0, 15.2, 0.0], [2.0, 0.0, 0.0], [0.0, 30.0, 0.0]], "float32")
    labels = np.array([0, 0, 0])

    def loss(x):
        probs = keras.activations.softmax(x)
        return ops.sparse_softmax_cross_entropy(labels, probs, from_logits=False)

    x = cast_tensor(logits, dtype)
    x64 = to_numpy(x).astype("float64")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, (grad,) = vjp(loss, [x], mode=mode)
    warned = any("without their logits" in str(w.message) for w in caught)
    if EXPOSES_LOGITS:
        assert not warned
        assert_close(out, -ref.log_softmax(x64)[:, 0], dtype)
        assert_close(grad, ref.softmax(x64) - np.eye(3)[labels], dtype)
        return
    held = np.maximum(to_numpy(keras.ops.softmax(x)).astype("float64"), HALF_FLOOR[dtype])
    assert_close(out, -np.log(held[:, 0]), dtype)
    assert_close(grad[1], ref.softmax(x64[1:2])[0] - np.eye(3)[0], dtype)
    if mode == MODES[0]:
        assert warned


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1])
def test_probabilities_match_keras_where_its_clip_is_inactive(label_smoothing):
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(4), size=6).astype("float32")
    probs = np.maximum(probs, 1e-4)
    probs /= probs.sum(-1, keepdims=True)
    labels = np.eye(4, dtype="float32")[rng.integers(0, 4, 6)]
    keras_cce = keras.losses.CategoricalCrossentropy(
        label_smoothing=label_smoothing, reduction="none"
    )
    ours = ops.softmax_cross_entropy(
        labels, probs, label_smoothing=label_smoothing, from_logits=False
    )
    assert_close(to_numpy(ours), to_numpy(keras_cce(labels, probs)))
    keras_sparse = keras.losses.SparseCategoricalCrossentropy(reduction="none")
    ours = ops.sparse_softmax_cross_entropy(labels.argmax(-1), probs, from_logits=False)
    assert_close(to_numpy(ours), to_numpy(keras_sparse(labels.argmax(-1), probs)))
    keras_bce = keras.losses.BinaryCrossentropy(label_smoothing=label_smoothing, reduction="none")
    smoothed = labels * (1 - label_smoothing) + 0.5 * label_smoothing
    ours = np.mean(to_numpy(ops.sigmoid_cross_entropy(smoothed, probs, from_logits=False)), -1)
    assert_close(ours, to_numpy(keras_bce(labels, probs)))


def test_probability_gradients_equal_finite_differences_in_float64():
    rng = np.random.default_rng(1)
    probs = rng.dirichlet(np.ones(4), size=3)
    labels = rng.dirichlet(np.ones(4), size=3)
    cases = [
        (
            lambda p: ops.softmax_cross_entropy(labels, p, from_logits=False),
            lambda p: ref.softmax_cross_entropy(labels, np.log(p)),
        ),
        (
            lambda p: ops.sigmoid_cross_entropy(labels, p, from_logits=False),
            lambda p: ref.sigmoid_cross_entropy_from_probabilities(labels, p),
        ),
        (
            lambda p: ops.kl_divergence(labels, p, from_logits=False),
            lambda p: ref.kl_divergence(labels, np.log(p)),
        ),
    ]
    for op, reference in cases:
        with float64_enabled():
            _, (grad,) = vjp(op, [probs])
        np.testing.assert_allclose(grad, finite_difference(reference, probs), rtol=1e-6, atol=1e-7)


def test_saturation_is_the_smallest_normal_of_the_compute_dtype():
    with float64_enabled():
        out = to_numpy(
            ops.sigmoid_cross_entropy(np.ones(2), np.array([1e-300, 0.0]), from_logits=False)
        )
    assert_close(out, [-np.log(1e-300), -np.log(np.finfo(np.float64).tiny)])


def test_no_warning_for_probabilities_with_from_logits_false():
    probs = keras.activations.softmax(cast_tensor(np.zeros((2, 3))))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for op in ALL_OPS:
            op(probs)
