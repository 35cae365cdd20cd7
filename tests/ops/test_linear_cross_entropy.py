"""`linear_softmax_cross_entropy`: the materialised computation's loss and
gradients (hidden, kernel, bias), without the `[tokens, vocab]` logits."""

import keras
import numpy as np
import pytest

from keras_stable import ops
from tests.backend_utils import BACKEND
from tests.backend_utils import MODES
from tests.backend_utils import assert_close
from tests.backend_utils import assert_finite
from tests.backend_utils import only_jax
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


def test_symbolic_inputs_give_the_per_token_shape():
    """Keras tensors (variable lengths included) give a float32 Keras tensor
    of the labels' shape, as `keras.ops` does; bad shapes are still named."""
    hidden = keras.KerasTensor((None, None, 5))
    labels = keras.KerasTensor((None, None), dtype="int32")
    kernel = np.zeros((5, 37), "float32")
    out = ops.linear_softmax_cross_entropy(hidden, kernel, labels, chunk_size=8)
    assert isinstance(out, keras.KerasTensor)
    assert (tuple(out.shape), out.dtype) == ((None, None), "float32")
    out = ops.linear_softmax_cross_entropy(
        keras.KerasTensor((4, 5)),
        keras.KerasTensor((37, 5)),
        keras.KerasTensor((4,), dtype="int32"),
        bias=keras.KerasTensor((37,)),
        transpose_kernel=True,
        label_smoothing=0.1,
    )
    assert (tuple(out.shape), out.dtype) == ((4,), "float32")
    # Concrete labels beside an unknown batch size: the known size is kept.
    out = ops.linear_softmax_cross_entropy(
        keras.KerasTensor((None, 3, 5)), kernel, np.zeros((2, 3), "int32")
    )
    assert tuple(out.shape) == (2, 3)
    with pytest.raises(ValueError, match="`labels` of shape"):
        ops.linear_softmax_cross_entropy(hidden, kernel, keras.KerasTensor((None,), dtype="int32"))


def _quiet_problem():
    """Valid inputs that reach the old `-inf`/`inf` intermediates: logits
    of up to ~300 (exp overflows float32 past 88), an ignored token among
    them, a soft cap far out (cosh overflows past 89 * cap)."""
    hidden, kernel, bias, labels = _problem(shape=(2, 7), dim=5, vocab=37)
    return 30.0 * hidden, kernel, bias, labels


@pytest.mark.parametrize("cap", [None, 2.0])
def test_quiet_under_the_nan_tools_and_exact(cap):
    """No inf or NaN is built on valid inputs: JAX's `jax_debug_infs` and
    `jax_debug_nans` (eager and jitted), TF's `enable_check_numerics` (eager
    and `tf.function`) stay silent, and the numbers are the float64 ones."""
    hidden, kernel, bias, labels = _quiet_problem()
    options = dict(chunk_size=8, ignore_class=-100, z_loss=1e-4, label_smoothing=0.1)

    def fused(h, w, b):
        return ops.linear_softmax_cross_entropy(h, w, labels, b, logit_soft_cap=cap, **options)

    def run(mode):
        return vjp(fused, [hidden, kernel, bias], wrt=(0, 1, 2), mode=mode)

    if BACKEND == "jax":
        import jax

        try:
            jax.config.update("jax_debug_infs", True)
            jax.config.update("jax_debug_nans", True)
            results = [run(mode) for mode in ("eager", "compiled")]
        finally:
            jax.config.update("jax_debug_infs", False)
            jax.config.update("jax_debug_nans", False)
    elif BACKEND == "tensorflow":
        import tensorflow as tf

        tf.debugging.enable_check_numerics()
        try:
            results = [run("eager"), _tf_function_vjp(fused, [hidden, kernel, bias])]
        finally:
            tf.debugging.disable_check_numerics()
    else:
        results = [run("eager")]
    expected = _reference_options(hidden, kernel, bias, labels, cap, **options)
    for out, grads in results:
        assert_close(out, expected, tol=(1e-5, 1e-4), what="value vs float64")
        for g in grads:
            assert_finite(g, "gradient")
    eager, compiled = results[0], results[-1]
    for g, c in zip(eager[1], compiled[1]):
        assert_close(c, g, tol=(1e-5, 1e-5))


def _tf_function_vjp(fn, args):
    """`vjp` under `tf.function` without XLA (check_numerics instruments
    graphs, not XLA clusters)."""
    import tensorflow as tf

    args = [tf.convert_to_tensor(a) for a in args]

    @tf.function
    def run(*args):
        with tf.GradientTape() as tape:
            tape.watch(args)
            out = fn(*args)
        return out, tape.gradient(out, list(args))

    out, grads = run(*args)
    return np.asarray(out, "float64"), [np.asarray(g, "float64") for g in grads]


def _reference_options(
    hidden, kernel, bias, labels, cap, ignore_class, z_loss, label_smoothing, **_
):
    """float64 NumPy: smoothed cross-entropy of the (capped) logits plus z-loss."""
    logits = hidden.astype("float64") @ kernel.astype("float64") + bias.astype("float64")
    if cap is not None:
        logits = cap * np.tanh(logits / cap)
    m = logits.max(-1, keepdims=True)
    lse = (m + np.log(np.exp(logits - m).sum(-1, keepdims=True)))[..., 0]
    vocab = logits.shape[-1]
    safe = np.where(labels == ignore_class, 0, labels)
    picked = np.take_along_axis(logits, safe[..., None], -1)[..., 0]
    loss = lse - (1 - label_smoothing) * picked - label_smoothing / vocab * logits.sum(-1)
    loss = loss + z_loss * lse**2
    return np.where(labels == ignore_class, 0.0, loss)


@only_jax
def test_runs_under_jax_rank_promotion_raise():
    import jax

    hidden, kernel, bias, labels = _problem()
    with jax.numpy_rank_promotion("raise"):
        for mode in MODES:
            out, grads = vjp(
                lambda h, w, b: ops.linear_softmax_cross_entropy(
                    h, w, labels, b, chunk_size=8, ignore_class=-100, logit_soft_cap=5.0
                ),
                [hidden, kernel, bias],
                wrt=(0, 1, 2),
                mode=mode,
            )
            for g in grads:
                assert_finite(g)
    expected = _reference_options(
        hidden, kernel, bias, labels, 5.0, ignore_class=-100, z_loss=0.0, label_smoothing=0.0
    )
    assert_close(out, expected)
