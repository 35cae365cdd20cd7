"""`linear_softmax_cross_entropy`: the materialised computation's loss and
gradients (hidden, kernel, bias), without the `[tokens, vocab]` logits."""

import keras
import numpy as np
import pytest

from keras_stable import ops
from tests.backend_utils import MODES
from tests.backend_utils import assert_close
from tests.backend_utils import assert_finite
from tests.backend_utils import vjp
from tests.backend_utils import vjp_all_modes

RNG = np.random.default_rng(0)


def _problem(shape=(2, 7), dim=5, vocab=37, ignore=-100):
    hidden = RNG.normal(size=shape + (dim,)).astype("float32")
    kernel = RNG.normal(size=(dim, vocab)).astype("float32")
    bias = RNG.normal(size=(vocab,)).astype("float32")
    labels = RNG.integers(0, vocab, shape).astype("int32")
    labels.reshape(-1)[3] = ignore
    return hidden, kernel, bias, labels


def _reference_loss(hidden, kernel, bias, labels, ignore):
    """float64 NumPy: the materialised logits and their cross-entropy."""
    logits = hidden.astype("float64") @ kernel.astype("float64") + bias.astype("float64")
    m = logits.max(-1, keepdims=True)
    lse = (m + np.log(np.exp(logits - m).sum(-1, keepdims=True)))[..., 0]
    safe = np.where(labels == ignore, 0, labels)
    picked = np.take_along_axis(logits, safe[..., None], -1)[..., 0]
    return np.where(labels == ignore, 0.0, lse - picked)


@pytest.mark.parametrize("chunk_size", [1, 8, 36, 37, None])
def test_matches_the_materialised_loss_and_gradients(chunk_size):
    """Chunks that do not divide the vocabulary (37) or the tokens (14)."""
    hidden, kernel, bias, labels = _problem()
    cot = RNG.normal(size=labels.shape).astype("float32")

    def fused(h, w, b):
        return ops.linear_softmax_cross_entropy(
            h, w, labels, b, chunk_size=chunk_size, ignore_class=-100
        )

    def materialised(h, w, b):
        logits = keras.ops.matmul(h, w) + b
        return ops.sparse_softmax_cross_entropy(labels, logits, ignore_class=-100)

    out, grads = vjp_all_modes(fused, [hidden, kernel, bias], wrt=(0, 1, 2), cotangent=cot)
    ref_out, ref_grads = vjp(materialised, [hidden, kernel, bias], wrt=(0, 1, 2), cotangent=cot)
    assert_close(out, _reference_loss(hidden, kernel, bias, labels, -100), what="value vs float64")
    assert_close(out, ref_out, what="value vs materialised")
    for name, g, r in zip(("hidden", "kernel", "bias"), grads, ref_grads):
        assert_close(g, r, what=f"d{name} vs materialised")
    assert np.all(grads[0].reshape(-1, hidden.shape[-1])[3] == 0), "ignored token's gradient"


def test_without_bias():
    hidden, kernel, _, labels = _problem(shape=(9,), vocab=11)
    labels[3] = 2
    out, grads = vjp_all_modes(
        lambda h, w: ops.linear_softmax_cross_entropy(h, w, labels, chunk_size=4),
        [hidden, kernel],
        wrt=(0, 1),
    )
    ref, ref_grads = vjp(
        lambda h, w: ops.sparse_softmax_cross_entropy(labels, keras.ops.matmul(h, w)),
        [hidden, kernel],
        wrt=(0, 1),
    )
    assert_close(out, ref)
    for g, r in zip(grads, ref_grads):
        assert_close(g, r)


def test_minus_inf_bias_removes_a_class_and_bad_labels_show():
    """The sparse cross-entropy's semantics: a `-inf` class is removed (a label
    on it gives +inf), an out-of-range label gives NaN, the rest is exact and
    every gradient finite."""
    hidden, kernel, bias, _ = _problem(shape=(4,), vocab=6)
    bias[2] = -np.inf
    labels = np.array([0, 2, 9, 5], "int32")
    for mode in MODES:
        out, grads = vjp(
            lambda h, w: ops.linear_softmax_cross_entropy(h, w, labels, bias, chunk_size=4),
            [hidden, kernel],
            wrt=(0, 1),
            mode=mode,
        )
        logits = hidden @ kernel + bias
        ref = ops.sparse_softmax_cross_entropy(labels[[0, 3]], logits[[0, 3]])
        assert_close(out[[0, 3]], keras.ops.convert_to_numpy(ref))
        assert out[1] == np.inf and np.isnan(out[2]), out
        # The +inf and NaN tokens take no part in the gradient.
        for g in grads:
            assert_finite(g, mode)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_hidden_states_accumulate_in_float32(dtype):
    hidden, kernel, bias, labels = _problem()
    half = keras.ops.cast(hidden, dtype)
    exact = keras.ops.convert_to_numpy(keras.ops.cast(half, "float32"))
    out = ops.linear_softmax_cross_entropy(
        half, kernel, labels, bias, chunk_size=8, ignore_class=-100
    )
    assert keras.backend.standardize_dtype(out.dtype) == "float32"
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(out),
        _reference_loss(exact, kernel, bias, labels, -100),
        rtol=1e-5,
        atol=1e-5,
    )


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            {"hidden": np.ones((3, 4), "float32")},
            r"`hidden` of shape \(3, 4\) and `kernel` of shape \(5, 7\)",
        ),
        (
            {"labels": np.zeros((4,), "int32")},
            r"`labels` of shape \(4,\).*expected labels of shape \(3,\)",
        ),
        ({"labels": np.zeros((3,), "float32")}, r"`labels` must be integer"),
        ({"chunk_size": 0}, r"`chunk_size` must be a positive int"),
        ({"bias": np.zeros((6,), "float32")}, r"`bias` of shape \(6,\)"),
        ({"ignore_class": 1.5}, r"`ignore_class`"),
    ],
)
def test_bad_input_names_the_argument(kwargs, match):
    args = {
        "hidden": np.ones((3, 5), "float32"),
        "kernel": np.ones((5, 7), "float32"),
        "labels": np.zeros((3,), "int32"),
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        ops.linear_softmax_cross_entropy(**args)
