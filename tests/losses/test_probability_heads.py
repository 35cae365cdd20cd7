"""A model with a softmax/sigmoid output and a `from_logits=False` loss.

The confidently wrong example of a model whose softmax output rounds the
true class to a denormal (logit gap 90): `fit`/`evaluate` (compiled where
the backend compiles) give the exact 90 where the backend exposes the
logits behind the activation (TensorFlow, torch), the saturated 87.34
where it does not (JAX), and finite weights after a step on every backend.
Keras's CategoricalCrossentropy gives 90 on TensorFlow and 16.12 elsewhere.
"""

import keras
import numpy as np
import pytest

from keras_stable import losses
from tests.backend_utils import BACKEND
from tests.backend_utils import assert_close
from tests.backend_utils import assert_finite
from tests.backend_utils import to_numpy

JIT = BACKEND in ("tensorflow", "jax")
SATURATED = -np.log(np.finfo(np.float32).tiny)


def _model(activation, units):
    inputs = keras.Input((1,))
    head = keras.layers.Dense(units, activation=activation, name="head")
    model = keras.Model(inputs, head(inputs))
    kernel = np.zeros((1, units), "float32")
    kernel[0, -1] = 90.0  # logits [0, 90] (softmax) or [-90] (sigmoid, below)
    if activation == "sigmoid":
        kernel[0, -1] = -90.0
    head.set_weights([kernel, np.zeros(units, "float32")])
    return model


@pytest.mark.parametrize(
    "loss, activation, units, y",
    [
        (
            lambda: losses.StableSoftmaxCrossEntropy(from_logits=False),
            "softmax",
            2,
            np.array([[1.0, 0.0]], "float32"),
        ),
        (
            lambda: losses.StableSparseSoftmaxCrossEntropy(from_logits=False),
            "softmax",
            2,
            np.array([0], "int32"),
        ),
        (
            lambda: losses.StableSoftmaxFocalCrossEntropy(from_logits=False, gamma=0.0),
            "softmax",
            2,
            np.array([[1.0, 0.0]], "float32"),
        ),
        (
            lambda: losses.StableKLDivergence(from_logits=False),
            "softmax",
            2,
            np.array([[1.0, 0.0]], "float32"),
        ),
        (
            lambda: losses.StableSigmoidCrossEntropy(from_logits=False),
            "sigmoid",
            1,
            np.array([[1.0]], "float32"),
        ),
        (
            lambda: losses.StableSigmoidFocalCrossEntropy(from_logits=False, gamma=0.0),
            "sigmoid",
            1,
            np.array([[1.0]], "float32"),
        ),
    ],
    ids=["softmax_ce", "sparse_ce", "softmax_focal", "kl", "sigmoid_ce", "sigmoid_focal"],
)
def test_saturated_output_head(loss, activation, units, y):
    model = _model(activation, units)
    model.compile(optimizer=keras.optimizers.SGD(1e-3), loss=loss(), jit_compile=JIT)
    x = np.ones((1, 1), "float32")
    value = model.evaluate(x, y, verbose=0)
    expected = SATURATED if BACKEND == "jax" else 90.0
    assert_close(value, expected, tol=(1e-5, 1e-4))
    model.train_on_batch(x, y)
    for w in model.weights:
        assert_finite(to_numpy(w.value), w.path)
    if BACKEND != "jax":  # the exact gradient moved the logit gap: -1e-3 * (p - y)
        kernel = to_numpy(model.get_layer("head").kernel.value)
        assert kernel[0, -1] == pytest.approx(
            89.999 if activation == "softmax" else -89.999, abs=1e-4
        )


@pytest.mark.skipif(BACKEND == "jax", reason="JAX arrays keep no logits on an activation output")
@pytest.mark.parametrize(
    "loss",
    [
        lambda: losses.StableSparseSoftmaxCrossEntropy(from_logits=False),
        lambda: losses.StableSoftmaxCrossEntropy(from_logits=False),
    ],
)
def test_mixed_float16_softmax_output_trains(loss):
    """The keras-io Transformer classifier's situation: a float16 softmax
    output under `mixed_float16`, one example with its true class at 2.4e-7
    next to ordinary ones. Keras's loss hands `-1/p = -4.2e6` (beyond
    float16) back to the softmax: a non-finite gradient, and the loss scale
    skips the whole step. Here the loss reads the logits behind the output:
    the exact loss (15.2 at the start, Keras 15.25), every step taken,
    finite weights, and the confident mistake corrected."""
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        inputs = keras.Input((2,))
        head = keras.layers.Dense(3, activation="softmax", name="head")
        model = keras.Model(inputs, head(inputs))
        kernel = np.array([[0.0, 15.2, 0.0], [0.0, 1.0, 0.0]], "float32")
        head.set_weights([kernel, np.zeros(3, "float32")])
        model.compile(optimizer=keras.optimizers.SGD(0.5), loss=loss(), jit_compile=JIT)
        x = np.array([[1.0, 0.0]] + [[0.0, 1.0]] * 3, "float32")  # row 0: p = 2.4e-7
        y = np.zeros((4,), "int32")
        if "Sparse" not in type(model.loss).__name__:
            y = np.eye(3, dtype="float32")[y]
        first = model.evaluate(x[:1], y[:1], verbose=0)
        assert_close(first, 15.2031, "float16")
        ordinary = model.predict(x[1:2], verbose=0)[0, 0]
        model.fit(x, y, epochs=5, batch_size=4, verbose=0)
        after = model.predict(x, verbose=0)
        for w in model.get_weights():
            assert_finite(w)
        assert after[1, 0] > ordinary + 0.05  # the steps were taken
        assert head.get_weights()[0][0, 1] < kernel[0, 1] - 0.1  # the mistake corrected
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_half_precision_probabilities_without_logits_warn_naming_the_fix():
    import warnings

    probs = keras.ops.cast(keras.ops.convert_to_tensor([[0.2, 0.8]]), "float16")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        losses.StableSparseSoftmaxCrossEntropy(from_logits=False)(np.array([1]), probs)
    text = " ".join(str(w.message) for w in caught)
    assert "reads float16 probabilities without their logits" in text
    assert 'dtype="float32"' in text
