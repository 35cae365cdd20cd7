"""A softmax/sigmoid output fed to a `from_logits=True` loss warns, as Keras
does: keras_stable defaults to `from_logits=True`, Keras to False."""

import warnings

import keras
import numpy as np
import pytest

import keras_stable
from tests.backend_utils import BACKEND

# JAX arrays take no attributes: Keras cannot mark activation outputs there.
pytestmark = pytest.mark.skipif(BACKEND == "jax", reason="JAX arrays carry no `_keras_logits`")

CASES = [
    (keras_stable.losses.StableSoftmaxCrossEntropy, "softmax", np.eye(3, dtype="float32")[[0, 1]]),
    (keras_stable.losses.StableSparseSoftmaxCrossEntropy, "softmax", np.array([0, 2], "int32")),
    (
        keras_stable.losses.StableSigmoidCrossEntropy,
        "sigmoid",
        np.array([[0, 1, 1], [1, 0, 0]], "float32"),
    ),
]


@pytest.mark.parametrize("cls, activation, y", CASES, ids=[c[0].__name__ for c in CASES])
def test_probabilities_with_from_logits_true_warn(cls, activation, y):
    probs = keras.activations.get(activation)(
        keras.ops.convert_to_tensor(np.ones((2, 3), "float32"))
    )
    with pytest.warns(UserWarning, match="from_logits=True"):
        cls()(y, probs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cls(from_logits=False)(y, probs)
