"""Backend-neutral helpers for tests: gradients, compiled runs, comparisons.

Keras picks its backend at import (`KERAS_BACKEND`), so each pytest process
tests one backend. `vjp` computes a value and a vector-Jacobian product with
the backend's own autodiff, eagerly or compiled (TF: `tf.function(
jit_compile=True)`; JAX: `jax.jit`; torch: eager only), so every numerical
test can run both ways and compare them.
"""

import contextlib
import json
import os

import keras
import ml_dtypes
import numpy as np
import pytest
from packaging.version import Version

BACKEND = keras.backend.backend()
# Tests run eagerly and compiled on TensorFlow and JAX (ALL_MODES). The
# environment variable KERAS_STABLE_TEST_MODES (a comma-separated subset,
# e.g. "compiled") narrows that (MODES) for a CI leg: tests/run.sh runs
# TensorFlow eagerly and JAX compiled only, one pass over the matrix (XLA on
# JAX, TF's own kernels eagerly, torch eagerly). A test about compiling
# itself passes `modes=ALL_MODES` to `vjp_all_modes`.
ALL_MODES = ("eager", "compiled") if BACKEND in ("tensorflow", "jax") else ("eager",)
_CHOSEN = os.environ.get("KERAS_STABLE_TEST_MODES", "")
MODES = tuple(m for m in ALL_MODES if m in _CHOSEN.split(",")) or ALL_MODES

# Per-dtype tolerances (CONTRIBUTING.md, "Tests"): rtol, atol.
TOLERANCES = {
    "float64": (1e-10, 1e-12),
    "float32": (1e-5, 1e-6),
    "float16": (1e-3, 1e-3),
    "bfloat16": (1e-2, 1e-2),
}

# Keras 3.16 (keras-nightly, the CI's second Keras; docs/keras-versions.md)
# fixed some of Keras's numbers that keras_stable's tests describe as wrong.
KERAS_3_16 = Version(keras.__version__) >= Version("3.16.0.dev0")


def _keras_downcasts_float64():
    """Whether `keras.ops` computes float64 binary ops in float32 (Keras 3.16
    on torch: `convert_to_tensors_of_same_dtype` maps float64 to
    float32 even when both operands are float64)."""
    with float64_enabled():
        x = keras.ops.convert_to_tensor(np.ones(1, "float64"))
        return keras.backend.standardize_dtype(keras.ops.add(x, x).dtype) != "float64"


only_tensorflow = pytest.mark.skipif(BACKEND != "tensorflow", reason="TensorFlow backend only")
only_jax = pytest.mark.skipif(BACKEND != "jax", reason="JAX backend only")
only_torch = pytest.mark.skipif(BACKEND != "torch", reason="torch backend only")


# The dtypes of the numerical sweeps, and their NumPy types (for rounding
# float64 references the way a tensor of that dtype holds them).
DTYPES = ("float32", "float16", "bfloat16")
NP_DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16}
# Every reduction a `keras.losses.Loss` takes.
REDUCTIONS = ("sum_over_batch_size", "sum", "mean", "mean_with_sample_weight", "none")


def cast_tensor(x, dtype="float32"):
    """`x` as a float32 tensor cast to `dtype` (integers become floats too)."""
    return keras.ops.cast(keras.ops.convert_to_tensor(np.asarray(x, "float32")), dtype)


def float_tensor(x, dtype):
    """A float array as `cast_tensor(x, dtype)`; any other array (labels,
    masks) as a tensor of its own dtype."""
    x = np.asarray(x)
    if x.dtype.kind == "f":
        return cast_tensor(x, dtype)
    return keras.ops.convert_to_tensor(x)


def round_to(x, dtype):
    """What a float64 array becomes in `dtype`, back in float64 (1e30 is
    inf in float16, as in the tensors)."""
    with np.errstate(over="ignore"):
        return np.asarray(x, "float64").astype(NP_DTYPES[dtype]).astype("float64")


def dtype_of(x):
    """The standardized dtype name of a tensor."""
    return keras.backend.standardize_dtype(x.dtype)


def to_numpy(x):
    """Any backend tensor (bfloat16 included) → float64/int/bool NumPy array."""
    x = keras.ops.convert_to_tensor(x)
    if keras.backend.standardize_dtype(x.dtype) == "bfloat16":
        # TF cannot hand a 0-d bfloat16 tensor to NumPy; the cast is exact.
        x = keras.ops.cast(x, "float32")
    x = np.asarray(keras.ops.convert_to_numpy(x))
    if x.dtype.kind == "f" or x.dtype.name == "bfloat16":
        return x.astype("float64")
    return x


def native_numpy(x):
    """A tensor as NumPy in its own dtype (`to_numpy` gives float64)."""
    return np.asarray(keras.ops.convert_to_numpy(x))


def metric_result(metric, batches):
    """A fresh metric's result after one `update_state` per batch."""
    metric.reset_state()
    for batch in batches:
        metric.update_state(*batch)
    return to_numpy(metric.result())


def split_batches(arrays, sizes):
    """`arrays` (None stays None) cut along the first axis into batches of
    `sizes`: a list of tuples, one per batch."""
    out, start = [], 0
    for size in sizes:
        out.append(tuple(None if a is None else a[start : start + size] for a in arrays))
        start += size
    return out


def keras_clip(y_pred):
    """The probabilities Keras's cross-entropies use (clipped in float32)."""
    eps = np.float32(1e-7)
    return np.clip(np.asarray(y_pred, "float32"), eps, np.float32(1.0) - eps)


def keras_serialization_round_trip(instance):
    """`run_class_serialization_test` of Keras, with the public API."""

    def as_json(config):
        return json.dumps(config, sort_keys=True, default=str)

    config = instance.get_config()
    revived = type(instance).from_config(config)
    assert as_json(revived.get_config()) == as_json(config)
    assert set(dir(revived)) == set(dir(instance))

    serialized = json.loads(json.dumps(keras.saving.serialize_keras_object(instance)))
    revived = keras.saving.deserialize_keras_object(serialized)
    assert type(revived) is type(instance)
    assert as_json(revived.get_config()) == as_json(config)
    assert set(dir(revived)) - {"__annotations__"} == set(dir(instance)) - {"__annotations__"}
    return revived


def tensor(x, dtype=None):
    return keras.ops.convert_to_tensor(np.asarray(x), dtype=dtype)


def _vjp_tensorflow(fn, args, wrt, cotangent):
    import tensorflow as tf

    def run(*args):
        with tf.GradientTape() as tape:
            for i in wrt:
                tape.watch(args[i])
            out = fn(*args)
        cot = tf.ones_like(out) if cotangent is None else tf.cast(cotangent, out.dtype)
        grads = tape.gradient(out, [args[i] for i in wrt], output_gradients=cot)
        grads = [tf.zeros_like(args[i]) if g is None else g for g, i in zip(grads, wrt)]
        return out, grads

    return run


def _vjp_jax(fn, args, wrt, cotangent):
    import jax
    import jax.numpy as jnp

    def run(*args):
        def partial(*diff_args):
            full = list(args)
            for i, a in zip(wrt, diff_args):
                full[i] = a
            return fn(*full)

        out, pullback = jax.vjp(partial, *[args[i] for i in wrt])
        cot = jnp.ones_like(out) if cotangent is None else jnp.asarray(cotangent, out.dtype)
        return out, list(pullback(cot))

    return run


def _vjp_torch(fn, args, wrt, cotangent):
    import torch

    def run(*args):
        args = list(args)
        for i in wrt:
            args[i] = args[i].detach().clone().requires_grad_(True)
        out = fn(*args)
        cot = (
            torch.ones_like(out) if cotangent is None else torch.as_tensor(cotangent).to(out.dtype)
        )
        if out.requires_grad:
            grads = torch.autograd.grad(
                out, [args[i] for i in wrt], grad_outputs=cot, allow_unused=True
            )
        else:
            grads = [None] * len(wrt)
        grads = [torch.zeros_like(args[i]) if g is None else g for g, i in zip(grads, wrt)]
        return out.detach(), grads

    return run


def vjp(fn, args, wrt=(0,), cotangent=None, mode="eager"):
    """Returns `(value, [grad for each index in wrt])` as float64 NumPy arrays.

    `cotangent` defaults to ones (the gradient of `sum(fn(*args))`).
    `mode="compiled"` jit-compiles value and gradient together;
    `mode="graph"` runs them in a TF graph without XLA (TF only).
    """
    args = [keras.ops.convert_to_tensor(a) for a in args]
    builder = {"tensorflow": _vjp_tensorflow, "jax": _vjp_jax, "torch": _vjp_torch}[BACKEND]
    run = builder(fn, args, tuple(wrt), cotangent)
    if mode == "graph" and BACKEND == "tensorflow":
        # A tf.function without XLA (TF's graph mode, where
        # `enable_check_numerics` instruments every op; XLA cannot compile
        # the instrumented graph).
        import tensorflow as tf

        run = tf.function(run, jit_compile=False)
    if mode == "compiled":
        if BACKEND == "tensorflow":
            import tensorflow as tf

            run = tf.function(run, jit_compile=True)
        elif BACKEND == "jax":
            import jax

            run = jax.jit(run)
    out, grads = run(*args)
    return to_numpy(out), [to_numpy(g) for g in grads]


def value(fn, args, mode="eager"):
    """The value of `fn(*args)` as NumPy, eagerly or compiled."""
    args = [keras.ops.convert_to_tensor(a) for a in args]
    run = fn
    if mode == "compiled":
        if BACKEND == "tensorflow":
            import tensorflow as tf

            run = tf.function(fn, jit_compile=True)
        elif BACKEND == "jax":
            import jax

            run = jax.jit(fn)
    return to_numpy(run(*args))


def vjp_all_modes(fn, args, wrt=(0,), cotangent=None, dtype="float32", modes=None):
    """`vjp` in every mode of `modes` (default `MODES`); asserts they agree;
    returns the first."""
    modes = modes or MODES
    out, grads = vjp(fn, args, wrt, cotangent, modes[0])
    for mode in modes[1:]:
        out_c, grads_c = vjp(fn, args, wrt, cotangent, mode)
        assert_close(out_c, out, dtype, what=f"{mode} value vs {modes[0]}")
        for g_c, g in zip(grads_c, grads):
            assert_close(g_c, g, dtype, what=f"{mode} gradient vs {modes[0]}")
    return out, grads


def assert_close(actual, expected, dtype="float32", what="", tol=None):
    """`allclose` with per-dtype tolerance; NaN/inf must match exactly."""
    rtol, atol = tol or TOLERANCES[dtype]
    np.testing.assert_allclose(
        np.asarray(actual, "float64"),
        np.asarray(expected, "float64"),
        rtol=rtol,
        atol=atol,
        equal_nan=True,
        err_msg=what,
    )


def assert_finite(x, what=""):
    x = np.asarray(x, "float64")
    bad = ~np.isfinite(x)
    assert not bad.any(), f"{what}: {bad.sum()} non-finite entries: {x[bad][:5]}"


def finite_difference(fn_np, x, eps=1e-6):
    """Central finite differences of `sum(fn_np(x))` in float64 (NumPy)."""
    x = np.array(x, "float64")
    grad = np.zeros_like(x)
    it = np.nditer(x, flags=["multi_index"])
    for _ in it:
        idx = it.multi_index
        xp, xm = x.copy(), x.copy()
        xp[idx] += eps
        xm[idx] -= eps
        grad[idx] = (np.sum(fn_np(xp)) - np.sum(fn_np(xm))) / (2 * eps)
    return grad


def jax_planned_bytes(loss, args, argnums=(0,)):
    """XLA's buffer plan of the jitted value and gradient of the scalar
    `loss(*args)` with respect to `args[argnums]` (arguments, outputs and
    temporaries), in bytes: what the step needs at its peak. Compiled
    only: nothing runs (JAX backend)."""
    import jax
    import jax.numpy as jnp

    step = jax.jit(jax.value_and_grad(loss, argnums=argnums))
    memory = step.lower(*[jnp.asarray(a) for a in args]).compile().memory_analysis()
    return memory.argument_size_in_bytes + memory.output_size_in_bytes + memory.temp_size_in_bytes


def float64_enabled():
    """Context in which float64 tensors stay float64 (JAX needs x64 mode)."""
    if BACKEND == "jax":
        import jax

        return jax.enable_x64(True)
    return contextlib.nullcontext()


KERAS_DOWNCASTS_FLOAT64 = _keras_downcasts_float64()
# For the tests that check float64 results to float64 round-off.
float64_arithmetic = pytest.mark.xfail(
    KERAS_DOWNCASTS_FLOAT64,
    strict=True,
    reason="this Keras computes float64 binary ops in float32 on this backend "
    "(Keras 3.16 on torch; docs/keras-versions.md)",
)


@contextlib.contextmanager
def portable():
    """The public ops run their portable `keras.ops` formulation (plain
    autodiff, no fused kernel) inside this block (`KERAS_STABLE_PORTABLE`)."""
    old = os.environ.get("KERAS_STABLE_PORTABLE")
    os.environ["KERAS_STABLE_PORTABLE"] = "1"
    try:
        yield
    finally:
        if old is None:
            del os.environ["KERAS_STABLE_PORTABLE"]
        else:
            os.environ["KERAS_STABLE_PORTABLE"] = old


def import_keras_hub():
    """`keras_hub`, or a skip where it is not installed (an optional extra:
    `pip install keras_stable[hub]`). With `KERAS_STABLE_REQUIRE_HUB` set
    (the CI leg that installs it) a missing keras-hub is an error."""
    if os.environ.get("KERAS_STABLE_REQUIRE_HUB"):
        import keras_hub

        return keras_hub
    return pytest.importorskip(
        "keras_hub", reason="needs keras-hub (pip install keras_stable[hub])"
    )
