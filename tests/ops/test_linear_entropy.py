"""`linear_softmax_entropy`: the entropy of `softmax(h @ w + b)` per
token, in vocabulary blocks, against float64 references (values and
gradients, eager and compiled), with the head's options."""

import keras
import numpy as np
import pytest

from keras_stable import ops
from tests import reference_log_space as logspace_ref
from tests.backend_utils import assert_close
from tests.backend_utils import assert_finite
from tests.backend_utils import to_numpy
from tests.backend_utils import vjp_all_modes

TOL = (2e-5, 2e-6)


def _data(seed=0, vocab=11):
    rng = np.random.default_rng(seed)
    hidden = rng.normal(size=(2, 5, 4)).astype("float32")
    kernel = (rng.normal(size=(4, vocab)) * 2).astype("float32")
    bias = rng.normal(size=vocab).astype("float32")
    return hidden, kernel, bias


def _reference(hidden, kernel, bias, cot, cap=None):
    """float64 entropy and its gradients for `hidden`, `kernel`, `bias`."""
    h, w, b = (np.asarray(a, "float64") for a in (hidden, kernel, bias))
    raw = np.einsum("tsd,dv->tsv", h, w) + b
    logits = raw if cap is None else cap * np.tanh(raw / cap)
    d_logits = np.where(np.isfinite(logits), logspace_ref.entropy_grad(logits, cot), 0.0)
    if cap is not None:
        d_logits = d_logits / np.cosh(raw / cap) ** 2
    grads = (
        np.einsum("tsv,dv->tsd", d_logits, w),
        np.einsum("tsd,tsv->dv", h, d_logits),
        d_logits.sum((0, 1)),
    )
    return logspace_ref.entropy(logits), grads


@pytest.mark.parametrize("chunk_size", [3, 11, None])
def test_matches_float64_chunked(chunk_size):
    hidden, kernel, bias = _data()
    bias[3] = -np.inf  # a removed class: 0, not 0 * -inf
    cot = np.random.default_rng(1).normal(size=(2, 5))
    out, grads = vjp_all_modes(
        lambda h, w, b: ops.linear_softmax_entropy(h, w, b, chunk_size=chunk_size),
        [hidden, kernel, bias],
        wrt=(0, 1, 2),
        cotangent=cot,
    )
    expected, expected_grads = _reference(hidden, kernel, bias, cot)
    assert_close(out, expected, tol=TOL)
    for g, e in zip(grads, expected_grads):
        assert_finite(g)
        assert_close(g, e, tol=TOL)
    assert grads[2][3] == 0.0


def test_soft_cap_and_tied_kernel():
    hidden, kernel, bias = _data(2)
    cot = np.random.default_rng(3).normal(size=(2, 5))
    out, grads = vjp_all_modes(
        lambda h, w, b: ops.linear_softmax_entropy(
            h, w, b, chunk_size=4, transpose_kernel=True, logit_soft_cap=2.5
        ),
        [hidden, np.ascontiguousarray(kernel.T), bias],
        wrt=(0, 1, 2),
        cotangent=cot,
    )
    expected, (g_h, g_w, g_b) = _reference(hidden, kernel, bias, cot, cap=2.5)
    assert_close(out, expected, tol=TOL)
    assert_close(grads[0], g_h, tol=TOL)
    assert_close(grads[1], g_w.T, tol=TOL)
    assert_close(grads[2], g_b, tol=TOL)


def test_large_logits_and_empty_rows():
    hidden, kernel, bias = _data(4)
    kernel *= 300.0  # logits in the thousands: no overflow
    out, grads = vjp_all_modes(
        lambda h, w, b: ops.linear_softmax_entropy(h, w, b, chunk_size=3),
        [hidden, kernel, bias],
        wrt=(0, 1, 2),
    )
    expected, _ = _reference(hidden, kernel, bias, np.ones((2, 5)))
    assert_close(out, expected, tol=(1e-4, 1e-5))
    for g in grads:
        assert_finite(g)
    # Every class removed: 0 with zero gradients.
    bias = np.full(11, -np.inf, "float32")
    out, grads = vjp_all_modes(
        lambda h, w, b: ops.linear_softmax_entropy(h, w, b, chunk_size=3),
        [hidden, kernel, bias],
        wrt=(0, 1, 2),
    )
    np.testing.assert_array_equal(out, 0.0)
    for g in grads:
        np.testing.assert_array_equal(g, 0.0)


def test_half_precision_inputs_give_float32():
    hidden, kernel, bias = _data(5)
    out = ops.linear_softmax_entropy(hidden.astype("float16"), kernel.astype("float16"))
    assert keras.backend.standardize_dtype(out.dtype) == "float32"
    h, w = hidden.astype("float16"), kernel.astype("float16")
    expected, _ = _reference(h, w, np.zeros(11), np.ones((2, 5)))
    assert_close(to_numpy(out), expected, tol=TOL)


@pytest.mark.parametrize(
    "call, match",
    [
        (
            lambda: ops.linear_softmax_entropy(
                np.ones((2, 3), "float32"), np.ones((4, 5), "float32")
            ),
            r"hidden's last dimension \(3\)",
        ),
        (
            lambda: ops.linear_softmax_entropy(
                np.ones((2, 3), "float32"), np.ones((3, 5), "float32"), chunk_size=0
            ),
            r"`chunk_size`",
        ),
        (
            lambda: ops.linear_softmax_entropy(
                np.ones((2, 3), "float32"), np.ones((3, 5), "float32"), logit_soft_cap=-1.0
            ),
            r"logit_soft_cap",
        ),
    ],
)
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()
