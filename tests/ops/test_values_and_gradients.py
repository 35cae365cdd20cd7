"""Every op against its float64 reference on the edge-case grid.

Each case runs in float32, float16 and bfloat16, eagerly and compiled
(TF: tf.function(jit_compile=True), JAX: jax.jit; torch: eager), asserting
compiled == eager, value == reference (rounded to the dtype) within the
dtype's tolerance, and finite gradients everywhere.
"""

import keras
import numpy as np
import pytest

from tests.backend_utils import DTYPES
from tests.backend_utils import assert_close
from tests.backend_utils import assert_finite
from tests.backend_utils import cast_tensor
from tests.backend_utils import finite_difference
from tests.backend_utils import float64_enabled
from tests.backend_utils import round_to
from tests.backend_utils import vjp
from tests.backend_utils import vjp_all_modes
from tests.ops.cases import edge_cases
from tests.ops.cases import smooth_cases


def tensors(case, dtype):
    """The case's arguments as backend tensors; float args in `dtype`."""
    return [
        cast_tensor(a, dtype)
        if i in case.float_args
        else keras.ops.convert_to_tensor(np.asarray(a))
        for i, a in enumerate(case.args)
    ]


def rounded_args(case, dtype):
    return [
        round_to(a, dtype) if i in case.float_args else np.asarray(a)
        for i, a in enumerate(case.args)
    ]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", edge_cases(), ids=repr)
def test_edge_grid_matches_reference_with_finite_gradients(case, dtype):
    args = tensors(case, dtype)
    out, grads = vjp_all_modes(case.op, args, wrt=case.wrt, dtype=dtype)
    with np.errstate(all="ignore"):
        expected = round_to(case.ref(*rounded_args(case, dtype)), dtype)
    assert_close(out, expected, dtype, what=f"{case.name} value in {dtype}")
    for i, g in zip(case.wrt, grads):
        assert_finite(g, f"{case.name} gradient of arg {i} in {dtype}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_output_dtype_is_input_dtype(dtype):
    from keras_stable import ops

    x = keras.ops.cast(keras.ops.ones((2, 3)), dtype)
    for out in (
        ops.safe_sqrt(x),
        ops.safe_norm(x, axis=-1),
        ops.l2_normalize(x),
        ops.cosine_similarity(x, x),
        ops.safe_divide(x, x),
        ops.logsumexp(x),
        ops.softmax(x),
        ops.log_softmax(x),
        ops.softmax_cross_entropy(x, x),
        ops.sparse_softmax_cross_entropy(np.array([0, 1]), x),
        ops.sigmoid_cross_entropy(x, x),
        ops.masked_task_distance(x, x),
    ):
        assert keras.backend.standardize_dtype(out.dtype) == dtype


@pytest.mark.parametrize("case", smooth_cases(), ids=repr)
def test_gradient_equals_finite_differences_in_float64(case):
    """At random points the gradient is the exact derivative (float64 FD)."""
    with float64_enabled():
        args = [keras.ops.convert_to_tensor(np.asarray(a)) for a in case.args]
        finite = np.isfinite(case.ref(*case.args))
        cot = finite.astype("float64")
        out, grads = vjp(case.op, args, wrt=case.wrt, cotangent=cot, mode="eager")
    for i, g in zip(case.wrt, grads):

        def partial(v, i=i):
            full = [np.asarray(a, "float64") if a.dtype.kind == "f" else a for a in case.args]
            full[i] = v
            return np.where(finite, case.ref(*full), 0.0)

        fd = finite_difference(partial, case.args[i])
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-7, err_msg=f"{case.name} arg {i}")


@pytest.mark.parametrize("case", smooth_cases() + edge_cases(), ids=repr)
def test_float64_inputs_are_computed_in_float64(case):
    """float64 in, float64 out, to float64's round-off: Keras's torch and JAX
    backends promote float64 to float32 in some ops (`maximum`, `matmul`,
    JAX's `tanh`...), which must not round a float64 computation."""
    with float64_enabled():
        args = [keras.ops.convert_to_tensor(np.asarray(a)) for a in case.args]
        out = case.op(*args)
        dtype = keras.backend.standardize_dtype(out.dtype)
        out = np.asarray(keras.ops.convert_to_numpy(out), "float64")
    with np.errstate(all="ignore"):
        expected = case.ref(*[np.asarray(a) for a in case.args])
    assert dtype == "float64", f"{case.name} returned {dtype}"
    assert_close(out, expected, "float64", what=f"{case.name} value in float64")
