"""`LinearSoftmaxHead(return_entropy=True)` and `head.entropy(hidden)`:
the entropy of the head's softmax per token, in blocks, against the
float64 entropy of its logits (what the harness does not cover)."""

import keras
import numpy as np

from keras_stable.layers import LinearSoftmaxHead
from tests import reference as ref
from tests import reference_log_space as logspace_ref
from tests.backend_utils import assert_close
from tests.backend_utils import assert_finite
from tests.backend_utils import to_numpy
from tests.backend_utils import vjp_all_modes

VOCAB, DIM = 13, 6


def _head(**kwargs):
    head = LinearSoftmaxHead(VOCAB, chunk_size=4, return_entropy=True, **kwargs)
    head.build((None, DIM))
    rng = np.random.default_rng(0)
    head.set_weights([rng.normal(size=w.shape).astype("float32") for w in head.weights])
    return head


def test_call_returns_losses_and_entropies_matching_float64():
    head = _head(logit_soft_cap=3.0)
    rng = np.random.default_rng(1)
    hidden = rng.normal(size=(2, 3, DIM)).astype("float32")
    labels = rng.integers(0, VOCAB, (2, 3)).astype("int32")
    losses, entropies = head(hidden, labels)
    logits = to_numpy(head.logits(hidden))
    assert_close(to_numpy(entropies), logspace_ref.entropy(logits), tol=(2e-5, 2e-6))
    assert_close(
        to_numpy(losses), ref.sparse_softmax_cross_entropy(labels, logits), tol=(2e-5, 2e-6)
    )
    out, (grad,) = vjp_all_modes(head.entropy, [hidden])
    assert_close(out, logspace_ref.entropy(logits), tol=(2e-5, 2e-6))
    assert_finite(grad)


def test_functional_model_and_config():
    head = _head()
    assert head.get_config()["return_entropy"] is True
    restored = LinearSoftmaxHead.from_config(head.get_config())
    assert restored.return_entropy is True
    hidden_in = keras.Input((3, DIM))
    labels_in = keras.Input((3,), dtype="int32")
    losses, entropies = head(hidden_in, labels_in)
    assert tuple(entropies.shape) == (None, 3)
    model = keras.Model([hidden_in, labels_in], [losses, entropies])
    hidden = np.random.default_rng(2).normal(size=(2, 3, DIM)).astype("float32")
    _, out = model([hidden, np.zeros((2, 3), "int32")])
    assert_close(
        to_numpy(out), logspace_ref.entropy(to_numpy(head.logits(hidden))), tol=(2e-5, 2e-6)
    )
    assert LinearSoftmaxHead(VOCAB).return_entropy is False
