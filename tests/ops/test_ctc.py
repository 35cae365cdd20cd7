"""`keras_stable.ops.ctc_loss` against the float64 forward-backward reference."""

import keras
import numpy as np
import pytest

from keras_stable import ops
from tests import reference_sequences as ref
from tests.backend_utils import BACKEND
from tests.backend_utils import MODES
from tests.backend_utils import assert_close
from tests.backend_utils import finite_difference
from tests.backend_utils import jax_planned_bytes
from tests.backend_utils import only_jax
from tests.backend_utils import only_tensorflow
from tests.backend_utils import portable
from tests.backend_utils import tensor
from tests.backend_utils import to_numpy
from tests.backend_utils import value
from tests.backend_utils import vjp
from tests.backend_utils import vjp_all_modes


def _batch(seed=0, batch=6, time=9, classes=5, max_label=4, scale=3.0, blank=0):
    rng = np.random.default_rng(seed)
    logits = (scale * rng.normal(size=(batch, time, classes))).astype("float32")
    labels = [c for c in range(classes) if c != blank]
    target = rng.choice(labels, size=(batch, max_label)).astype("int32")
    target[1, :3] = labels[1]  # repeats: [a, a, a, ...]
    target_length = np.array([4, 3, 0, 2, 4, 1][:batch], "int32")
    # Lengths shorter than the padding, an empty input, an infeasible
    # sample (4 labels in 2 frames) and a tight one.
    output_length = np.array([9, 5, 0, 3, 2, 1][:batch], "int32")
    return target, logits, target_length, output_length


def _fn(target, target_length, output_length, blank=0, zero_infinity=True):
    def fn(logits):
        return ops.ctc_loss(
            target, logits, target_length, output_length, blank, zero_infinity=zero_infinity
        )

    return fn


def _check(target, logits, target_length, output_length, blank=0, zero_infinity=True):
    out, (grad,) = vjp_all_modes(
        _fn(target, target_length, output_length, blank, zero_infinity), [logits]
    )
    expected, expected_grad = ref.ctc_loss(
        target, logits.astype("float64"), target_length, output_length, blank, zero_infinity
    )
    assert_close(out, expected, "float32", "value")
    # The gradient is softmax minus the posterior of the alignments, an
    # exponential of differences of path log-probabilities. Summing T
    # float32 log-probabilities of magnitude |x| rounds each path by up to
    # T ulp(|x|) (the rounding of the logits themselves): that much absolute
    # error is in the float32 problem, not in the algorithm (6e-5 per frame
    # at logits of 1e3, below 1e-6 at logits of 3).
    ulp = float(np.spacing(np.float32(np.max(np.abs(logits)))))
    atol = max(1e-6, logits.shape[1] * ulp)
    assert_close(grad, expected_grad, "float32", "gradient", tol=(1e-5, atol))
    assert np.all(out >= 0)
    return out, grad


@pytest.mark.parametrize("blank", ["first", "middle", "last"])
def test_values_and_gradients(blank):
    classes = 5
    blank = {"first": 0, "middle": 2, "last": classes - 1}[blank]
    target, logits, tl, ol = _batch(blank=blank, classes=classes)
    out, _ = _check(target, logits, tl, ol, blank)
    feasible = ref.ctc_feasible(target, tl, ol)
    assert feasible.tolist() == [True, True, True, True, False, True]
    assert out[2] == 0.0  # empty label over no frames


def test_reference_gradient_is_the_finite_difference():
    target, logits, tl, ol = _batch(batch=3, time=5, classes=4, max_label=3, scale=1.0)
    tl, ol = np.array([3, 2, 1]), np.array([5, 5, 4])
    _, grad = ref.ctc_loss(target, logits, tl, ol)
    fd = finite_difference(lambda x: ref.ctc_loss(target, x, tl, ol)[0], logits)
    np.testing.assert_allclose(grad, fd, atol=1e-6)


def test_large_logits():
    # Logits of +-1e3: TF's native kernel is 32% off here.
    target, logits, tl, ol = _batch(seed=1, scale=1.0)
    logits = np.where(logits > 0, 1e3, -1e3).astype("float32") * np.abs(logits).clip(0.5, 1)
    logits = logits.astype("float32")
    _check(target, logits, tl, ol)


def test_near_certain_alignment_is_never_negative():
    target = np.array([[1, 2]], "int32")
    path = [1, 0, 2, 0]
    logits = np.full((1, 4, 3), -30.0, "float32")
    logits[0, np.arange(4), path] = 30.0
    lengths = (np.array([2], "int32"), np.array([4], "int32"))
    for mode in MODES:
        out = value(_fn(target, *lengths), [logits], mode)
        assert out[0] >= 0.0 and np.isfinite(out[0]), (mode, out)
    _check(target, logits, *lengths)


def test_minus_inf_logits_of_classes_off_the_alignments():
    # A class that can never be emitted (a -inf logit, as a vocabulary mask
    # writes it) is read as unreachable: the loss is finite and exact, and
    # its logits' gradient 0 (never -inf - (-inf) = NaN).
    target, logits, tl, ol = _batch(seed=4, classes=6)
    target = np.where(target == 5, 1, target).astype("int32")  # class 5 off every label
    logits[:, ::2, 5] = -np.inf
    logits[0, 3, 5] = -np.inf
    _, grad = _check(target, logits, tl, ol)
    assert np.all(grad[:, ::2, 5] == 0.0)


def test_a_nan_logit_stays_in_its_sample():
    # The clamp of -inf log-probabilities passes a NaN through (as
    # `maximum` did): the sample is not read as unreachable (a made-up loss
    # of about 1e30), and the other samples' losses are untouched.
    target, logits, tl, ol = _batch(seed=6)
    clean = to_numpy(ops.ctc_loss(target, logits, tl, ol))
    logits[0, 2, 1] = np.nan
    out = to_numpy(ops.ctc_loss(target, logits, tl, ol))
    np.testing.assert_array_equal(out[1:], clean[1:])
    assert not out[0] > 1e3, out[0]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_is_computed_in_float32(dtype):
    target, logits, tl, ol = _batch(seed=2)
    half = tensor(logits, dtype)
    upcast = to_numpy(half).astype("float32")
    out = ops.ctc_loss(target, half, tl, ol)
    assert keras.backend.standardize_dtype(out.dtype) == "float32"
    expected, _ = ref.ctc_loss(target, upcast, tl, ol)
    assert_close(to_numpy(out), expected, "float32")


def test_infeasible_is_inf_with_zero_gradient_without_zero_infinity():
    target, logits, tl, ol = _batch(seed=3)
    out, grad = _check(target, logits, tl, ol, zero_infinity=False)
    assert np.isinf(out[4]) and np.all(grad[4] == 0.0)
    assert np.all(np.isfinite(np.delete(out, 4)))


def test_infeasible_samples_leave_the_others_unchanged():
    target, logits, tl, ol = _batch(seed=4)
    _, (grad,) = vjp(_fn(target, tl, ol), [logits])
    assert np.all(grad[4] == 0.0)
    for b in (0, 1, 3):
        one = slice(b, b + 1)
        _, (alone,) = vjp(_fn(target[one], tl[one], ol[one]), [logits[one]])
        # Equal up to the rounding of a differently vectorized batch.
        assert_close(grad[one], alone, "float32", f"sample {b}", tol=(1e-6, 1e-7))


FEASIBILITY = [
    ([1, 1], 2, False),  # a repeat needs a blank between
    ([1, 1], 3, True),
    ([1, 2], 2, True),
    ([1, 1, 1], 4, False),
    ([1, 1, 1], 5, True),
    ([1, 2, 3], 2, False),  # label longer than the input
    ([2, 1, 1], 3, False),
    ([], 0, True),  # an empty label over no frames: 0
    ([1], 0, False),
    ([], 5, True),
]


@pytest.mark.parametrize("zero_infinity", [True, False])
def test_feasibility_counts_repeats(zero_infinity):
    batch = len(FEASIBILITY)
    target = np.zeros((batch, 3), "int32")
    for b, (labels, _, _) in enumerate(FEASIBILITY):
        target[b, : len(labels)] = labels
    tl = np.array([len(labels) for labels, _, _ in FEASIBILITY], "int32")
    ol = np.array([frames for _, frames, _ in FEASIBILITY], "int32")
    feasible = np.array([f for _, _, f in FEASIBILITY])
    np.testing.assert_array_equal(ref.ctc_feasible(target, tl, ol), feasible)
    logits = np.random.default_rng(5).normal(size=(batch, 5, 4)).astype("float32")
    out, grad = _check(target, logits, tl, ol, zero_infinity=zero_infinity)
    assert np.all(np.isfinite(out[feasible]))
    assert np.all(out[~feasible] == (0.0 if zero_infinity else np.inf))
    assert np.all(grad[~feasible] == 0.0)
    assert out[7] == 0.0


def test_tensor_lengths_and_int64():
    target, logits, tl, ol = _batch(seed=6)
    int_dtype = "int32" if BACKEND == "jax" else "int64"  # JAX: no int64 without x64
    out = ops.ctc_loss(
        tensor(target, int_dtype), tensor(logits), tensor(tl, int_dtype), tensor(ol, int_dtype)
    )
    expected, _ = ref.ctc_loss(target, logits, tl, ol)
    assert_close(to_numpy(out), expected, "float32")


def test_no_labels_at_all():
    logits = np.random.default_rng(7).normal(size=(2, 3, 4)).astype("float32")
    target = np.zeros((2, 0), "int32")
    tl, ol = np.array([0, 0], "int32"), np.array([3, 1], "int32")
    _check(target, logits, tl, ol)


def test_keras_parity_where_keras_is_right():
    target, logits, tl, ol = _batch(seed=8)
    feasible = ref.ctc_feasible(target, tl, ol) & (ol > 0)
    ours = to_numpy(ops.ctc_loss(target, logits, tl, ol))
    theirs = to_numpy(keras.ops.ctc_loss(target, logits, tl, ol))
    assert_close(ours[feasible], theirs[feasible], "float32", tol=(1e-5, 1e-5))


def test_docstring_example_matches_keras_on_feasible_sample():
    logits = np.zeros((1, 2, 3), "float32")
    t = np.array([[1, 2]], "int32")
    n = np.array([2], "int32")
    np.testing.assert_allclose(to_numpy(ops.ctc_loss(t, logits, n, n)), [np.log(9.0)], rtol=1e-6)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"target": np.zeros((2,), "int32")}, "`target` must have shape"),
        ({"output": np.zeros((2, 4), "float32")}, "`output` must have shape"),
        ({"target_length": np.zeros((2, 1), "int32")}, "`target_length` must have shape"),
        ({"output_length": np.array([4, 4, 4], "int32")}, "same batch size"),
        ({"target": np.zeros((3, 2), "int32")}, "same batch size"),
        ({"target_length": np.array([3, 1], "int32")}, "`target_length` must lie in"),
        ({"output_length": np.array([5, 1], "int32")}, "`output_length` must lie in"),
        ({"output_length": np.array([-1, 1], "int32")}, "`output_length` must lie in"),
        ({"mask_index": 3}, "`mask_index`=3"),
        ({"mask_index": 1.0}, "`mask_index` must be an int"),
        ({"zero_infinity": 1}, "`zero_infinity` must be a bool"),
    ],
)
def test_bad_input(kwargs, message):
    args = {
        "target": np.ones((2, 2), "int32"),
        "output": np.zeros((2, 4, 3), "float32"),
        "target_length": np.array([2, 1], "int32"),
        "output_length": np.array([4, 4], "int32"),
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("`", "`")):
        ops.ctc_loss(**args)


@pytest.mark.parametrize("blank", [0, 4])
@pytest.mark.parametrize("pad", [-1, 5, 1000])
def test_entries_past_the_target_length_are_ignored_whatever_they_hold(pad, blank):
    # Issue 38: padding of a class out of range (>= num_classes) gave 0
    # on JAX (an out-of-range gather) and raised on TF eager; -1 and 0
    # worked. The blank stands in for every entry past the length.
    target, logits, tl, ol = _batch(seed=10, blank=blank)
    padded = np.where(np.arange(4)[None, :] < tl[:, None], target, pad).astype("int32")
    out, grad = _check(padded, logits, tl, ol, blank)
    clean = np.where(np.arange(4)[None, :] < tl[:, None], target, 1).astype("int32")
    for mode in MODES:
        v, (g,) = vjp(_fn(clean, tl, ol, blank), [logits], mode=mode)
        np.testing.assert_array_equal(out, v)
        assert_close(grad, g, "float32", mode, tol=(1e-6, 1e-7))
    with portable():  # torch: the native path above, the portable one here
        v, (g,) = vjp(_fn(padded, tl, ol, blank), [logits])
    assert_close(out, v, "float32", "portable value")
    assert_close(grad, g, "float32", "portable gradient")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("known", [True, False])
def test_symbolic_inputs_give_the_losses_spec(known, dtype):
    # Issue 38: KerasTensors crashed on every backend (`keras.ops.ctc_loss`
    # gives a `(batch,)` KerasTensor); unknown batch, label and time too.
    batch, label, time = (4, 3, 6) if known else (None, None, None)
    args = (
        keras.KerasTensor((batch, label), dtype="int32"),
        keras.KerasTensor((batch, time, 5), dtype=dtype),
        keras.KerasTensor((batch,), dtype="int32"),
        keras.KerasTensor((batch,), dtype="int32"),
    )
    out = ops.ctc_loss(*args)
    assert isinstance(out, keras.KerasTensor)
    assert tuple(out.shape) == (batch,) and out.dtype == "float32"
    assert tuple(keras.ops.ctc_loss(*args).shape) == (batch,)


def _quiet_check(run_modes, zero_infinity):
    """Values and gradients of the op on a batch of feasible samples (a
    finite result), whatever `zero_infinity` says about infeasible ones."""
    target, logits, tl, ol = _batch(seed=11)
    ol = np.array([9, 5, 0, 3, 6, 1], "int32")  # every sample feasible
    assert ref.ctc_feasible(target, tl, ol).all()
    expected, expected_grad = ref.ctc_loss(target, logits, tl, ol, 0, zero_infinity)
    for out, (grad,) in run_modes(_fn(target, tl, ol, zero_infinity=zero_infinity), [logits]):
        assert_close(out, expected, "float32", "value")
        assert_close(grad, expected_grad, "float32", "gradient", tol=(1e-5, 1e-6))


@only_jax
@pytest.mark.parametrize("zero_infinity", [True, False])
def test_jax_rank_promotion_raise_and_debug_infs_are_silent(zero_infinity):
    # Issue 38: the posteriors subtracted a (B, 1) log-likelihood from
    # (T, B, S) variables (implicit rank promotion), and
    # `zero_infinity=False` built a tensor of +inf for every sample.
    import jax

    flags = {"jax_numpy_rank_promotion": "raise", "jax_debug_infs": True, "jax_debug_nans": True}
    old = {k: getattr(jax.config, k) for k in flags}
    try:
        for k, v in flags.items():
            jax.config.update(k, v)
        _quiet_check(lambda fn, args: [vjp(fn, args, mode=mode) for mode in MODES], zero_infinity)
    finally:
        for k, v in old.items():
            jax.config.update(k, v)


@only_tensorflow
@pytest.mark.parametrize("zero_infinity", [True, False])
def test_tf_check_numerics_is_silent(zero_infinity):
    # TF's check_numerics instruments eager ops and graphs; XLA cannot
    # compile its ops, so the graph runs without XLA.
    import tensorflow as tf

    tf.debugging.enable_check_numerics()
    try:
        _quiet_check(
            lambda fn, args: [vjp(fn, args, mode=mode) for mode in ("eager", "graph")],
            zero_infinity,
        )
    finally:
        tf.debugging.disable_check_numerics()


@only_tensorflow
@pytest.mark.parametrize("jit_compile", [False, True])
def test_tensorflow_label_and_time_lengths_unknown_until_run_time(jit_compile):
    # Issue 38: `2 * max_label + 1` of a `None` label length raised a
    # TypeError (a `padded_batch` pipeline, `Input(shape=(None,))` labels);
    # Keras's TF `scan` also fails on a second sequence of unknown length.
    import tensorflow as tf

    target, logits, tl, ol = _batch(seed=12)
    signature = [
        tf.TensorSpec((None, None), tf.int32),
        tf.TensorSpec((None, None, None), tf.float32),
        tf.TensorSpec((None,), tf.int32),
        tf.TensorSpec((None,), tf.int32),
    ]

    @tf.function(input_signature=signature, jit_compile=jit_compile)
    def value_and_grad(target, logits, tl, ol):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            loss = ops.ctc_loss(target, logits, tl, ol)
        return loss, tape.gradient(loss, logits)

    expected, expected_grad = ref.ctc_loss(target, logits, tl, ol)
    for cut in (4, 2, 0):  # labels padded to different lengths, one trace
        out, grad = value_and_grad(target[:, :cut], logits, np.minimum(tl, cut), ol)
        if cut == 4:
            assert_close(to_numpy(out), expected, "float32", "value")
            assert_close(to_numpy(grad), expected_grad, "float32", "gradient", tol=(1e-5, 1e-6))
        else:
            expected_cut, _ = ref.ctc_loss(target[:, :cut], logits, np.minimum(tl, cut), ol)
            assert_close(to_numpy(out), expected_cut, "float32", f"labels cut at {cut}")
    assert value_and_grad.experimental_get_tracing_count() == 1


@pytest.mark.skipif(BACKEND == "torch", reason="torch runs eagerly")
def test_compiled_long_sequence_matches_reference():
    target, logits, tl, ol = _batch(seed=9, batch=2, time=60, classes=6, max_label=12)
    tl, ol = np.array([12, 7], "int32"), np.array([60, 31], "int32")
    _check(target, logits, tl, ol)


@pytest.mark.skipif(BACKEND == "tensorflow", reason="TF's ops.scan stacks outputs like the carry")
@pytest.mark.parametrize("padded", [False, True])
def test_backward_carrying_ahead_is_the_in_step_recursion_bit_for_bit(padded):
    # The JAX/torch backward loop carries gamma_t + emission_t (XLA's CPU
    # fusion of the in-step form is 5x slower); TF runs the in-step form.
    from keras_stable.ops._kernels import ctc as kernel

    rng = np.random.default_rng(3)
    time, batch, states = 11, 3, 9
    emissions = tensor(np.log(rng.uniform(1e-3, 1.0, (time, batch, states))).astype("float32"))
    frames = np.ones((time, batch, 1), bool)
    if padded:
        frames[7:, 0] = frames[::2, 1] = False
    frames = tensor(frames)
    skip = np.where(rng.uniform(size=(batch, states)) < 0.5, 0.0, kernel.UNREACHABLE)
    skip = tensor(skip.astype("float32"))
    skip_next = kernel._shift_left(skip, 2)
    index = kernel._states_index(skip)
    final = kernel._final_states(tensor(np.array([4, 3, 2], "int32")), index, "float32")
    in_step = to_numpy(kernel._backward_in_step(emissions, frames, final, skip_next))
    ahead = to_numpy(kernel._backward_ahead(emissions, frames, final, skip_next))
    np.testing.assert_array_equal(ahead, in_step)
    assert np.all(np.isfinite(ahead))


@pytest.mark.jax
def test_jax_memory_is_at_most_optax():
    """At the issue's M size (32, 200, 64, 40), XLA's buffer plan of the
    jitted value and gradient needs no more than `keras.ops.ctc_loss`'s
    (optax's); the clamp of the log-probabilities saved two float32
    `(B, T, C)` masks for its gradient before (1.13x). Compiled only."""
    import jax.numpy as jnp

    batch, time, classes, max_label = 32, 200, 64, 40
    rng = np.random.default_rng(0)
    target = rng.integers(1, classes, (batch, max_label)).astype("int32")
    tl = np.full((batch,), max_label, "int32")
    ol = np.full((batch,), time, "int32")
    logits = rng.normal(size=(batch, time, classes)).astype("float32")
    args = [target, logits, tl, ol]

    def planned_bytes(fn):
        return jax_planned_bytes(lambda *a: jnp.sum(fn(*a)), args, argnums=(1,))

    assert planned_bytes(ops.ctc_loss) <= planned_bytes(keras.ops.ctc_loss)
