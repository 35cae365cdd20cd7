"""A softmax/sigmoid output fed to a `from_logits=True` loss warns, as Keras
does: keras_stable defaults to `from_logits=True`, Keras to False. Each call
warns once, whether the twin op sees the marked tensor (float32) or the
loss hands it a float32 cast (half precision). Concrete JAX arrays carry
the mark too; JAX tracers (inside `jax.jit`: a JAX model's `fit`) do not,
and `keras_stable.audit`, which runs the model eagerly, warns instead."""

import warnings

import keras
import numpy as np
import pytest

import keras_stable

L = keras_stable.losses
ONE_HOT = np.eye(3, dtype="float32")[[0, 1]]
BINARY = np.array([[0, 1, 1], [1, 0, 0]], "float32")
CASES = [
    (L.StableSoftmaxCrossEntropy, "softmax", ONE_HOT),
    (L.StableSparseSoftmaxCrossEntropy, "softmax", np.array([0, 2], "int32")),
    (L.StableSigmoidCrossEntropy, "sigmoid", BINARY),
    (L.StableSigmoidFocalCrossEntropy, "sigmoid", BINARY),
    (L.StableSoftmaxFocalCrossEntropy, "softmax", ONE_HOT),
    (L.StableKLDivergence, "softmax", np.array([[0.2, 0.3, 0.5], [1.0, 0.0, 0.0]], "float32")),
]
IDS = [c[0].__name__ for c in CASES]


def _activation_output(activation, dtype, shape=(2, 3)):
    x = keras.ops.cast(keras.ops.convert_to_tensor(np.ones(shape, "float32")), dtype)
    return keras.activations.get(activation)(x)


def _from_logits_warnings(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [w for w in caught if "from_logits=True" in str(w.message)]


@pytest.mark.parametrize("cls, activation, y", CASES, ids=IDS)
def test_probabilities_with_from_logits_true_warn(cls, activation, y):
    probs = _activation_output(activation, "float32")
    with pytest.warns(UserWarning, match="from_logits=True"):
        cls()(y, probs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cls(from_logits=False)(y, probs)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("cls, activation, y", CASES, ids=IDS)
def test_one_warning_per_call(cls, activation, y, dtype):
    probs = _activation_output(activation, dtype)
    caught = _from_logits_warnings(lambda: cls()(y, probs))
    assert len(caught) == 1, [str(w.message) for w in caught]
    # The per-example path (`call`, used by Keras's reduction="none") too.
    caught = _from_logits_warnings(lambda: cls(reduction="none")(y, probs))
    assert len(caught) == 1, [str(w.message) for w in caught]


def test_one_warning_when_the_loss_adds_an_axis():
    """`(batch, 1)` labels for a `(batch,)` sigmoid output: the op gets a new
    tensor (an added axis), so the loss itself warns, once."""
    probs = _activation_output("sigmoid", "float32", shape=(2,))
    caught = _from_logits_warnings(
        lambda: L.StableSigmoidCrossEntropy()(np.array([[0.0], [1.0]], "float32"), probs)
    )
    assert len(caught) == 1, [str(w.message) for w in caught]


@pytest.mark.tensorflow
@pytest.mark.parametrize("cls, activation, y", CASES, ids=IDS)
def test_one_warning_in_a_tensorflow_graph(cls, activation, y):
    """In a `tf.function` the mark is the producing `Softmax`/`Sigmoid` op."""
    import tensorflow as tf

    loss = cls()

    @tf.function
    def value(x):
        return loss(y, keras.activations.get(activation)(x))

    caught = _from_logits_warnings(lambda: value(tf.ones((2, 3))))
    assert len(caught) == 1, [str(w.message) for w in caught]


@pytest.mark.jax
def test_jax_fit_is_silent_and_the_audit_warns():
    """JAX: tracers take no mark, so a jitted `fit` of a softmax model with
    `from_logits=True` cannot warn (as Keras's own loss cannot tell either);
    `keras_stable.audit` runs the model eagerly, where the output is marked,
    and warns."""
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
    model.compile(loss=L.StableSparseSoftmaxCrossEntropy())
    x = np.random.default_rng(0).random((8, 4)).astype("float32")
    y = np.arange(8) % 3
    assert _from_logits_warnings(lambda: model.fit(x, y, epochs=1, verbose=0)) == []
    caught = _from_logits_warnings(lambda: keras_stable.audit.audit(model, x, y))
    assert len(caught) >= 1, "the audit's eager run did not warn"
