"""Properties every public op has, derived from its inputs in
tests/specs/ops.py (so a new op gets them by adding its inputs there):

- symbolic calls: KerasTensors in, the output's shape and dtype out (a
  functional model's first call), with a batch size that is not known;
- JAX's `jax_numpy_rank_promotion="raise"` (JAX's own test default): no
  implicit rank promotion, eager or jitted;
- quiet under the NaN tools users switch on: on valid inputs with a finite
  result no inf or NaN intermediate, in the value or the gradient
  (`jax_debug_infs`/`jax_debug_nans`, TF's `enable_check_numerics`);
- torch: a second backward through the same graph (`retain_graph=True`).
"""

import contextlib

import keras
import numpy as np
import pytest

from tests.backend_utils import BACKEND
from tests.backend_utils import MODES
from tests.backend_utils import assert_close
from tests.backend_utils import only_jax
from tests.backend_utils import only_tensorflow
from tests.backend_utils import only_torch
from tests.backend_utils import to_numpy
from tests.backend_utils import vjp
from tests.specs.ops import ALL

NAMES = sorted(ALL)


def _objective(name):
    spec = ALL[name]
    return spec.call, [keras.ops.convert_to_tensor(a) for a in spec.args], spec.wrt


@pytest.mark.parametrize("name", NAMES)
def test_symbolic_call_gives_the_output_spec(name):
    fn, args = ALL[name].call, ALL[name].args
    eager = fn(*[keras.ops.convert_to_tensor(a) for a in args])
    symbolic = fn(*[keras.KerasTensor(np.shape(a), dtype=str(np.asarray(a).dtype)) for a in args])
    assert isinstance(symbolic, keras.KerasTensor), type(symbolic)
    assert tuple(symbolic.shape) == tuple(eager.shape)
    assert symbolic.dtype == keras.backend.standardize_dtype(eager.dtype)


@pytest.mark.parametrize("name", NAMES)
def test_symbolic_call_with_an_unknown_batch_size(name):
    fn, args = ALL[name].call, ALL[name].args
    eager = fn(*[keras.ops.convert_to_tensor(a) for a in args])
    # Every argument's batch axis unknown, as `keras.Input` gives it.
    axis = ALL[name].batch_axis

    def unknown(a):
        shape = list(np.shape(a))
        if len(shape) > axis:
            shape[axis] = None
        return keras.KerasTensor(tuple(shape), dtype=str(np.asarray(a).dtype))

    symbolic = fn(*[unknown(a) for a in args])
    assert isinstance(symbolic, keras.KerasTensor), type(symbolic)
    expected = tuple(eager.shape)
    got = tuple(symbolic.shape)
    assert len(got) == len(expected)
    assert all(g is None or g == e for g, e in zip(got, expected)), (got, expected)


@contextlib.contextmanager
def _jax_flags(**flags):
    import jax

    old = {k: getattr(jax.config, k) for k in flags}
    try:
        for k, v in flags.items():
            jax.config.update(k, v)
        yield
    finally:
        for k, v in old.items():
            jax.config.update(k, v)


def _run_all_modes(name):
    fn, args, wrt = _objective(name)
    return [vjp(fn, args, wrt, mode=mode) for mode in MODES]


@only_jax
@pytest.mark.parametrize("name", NAMES)
def test_jax_rank_promotion_raise(name):
    expected = _run_all_modes(name)
    with _jax_flags(jax_numpy_rank_promotion="raise"):
        got = _run_all_modes(name)
    for (v, gs), (v0, gs0) in zip(got, expected):
        assert_close(v, v0)
        for g, g0 in zip(gs, gs0):
            assert_close(g, g0)


def _not_quiet_xfail(names):
    return [
        pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=ALL[name].not_quiet))
        if ALL[name].not_quiet
        else name
        for name in names
    ]


@only_jax
@pytest.mark.parametrize("name", NAMES)
def test_jax_debug_infs_and_nans_are_silent(name):
    import jax

    if ALL[name].inf_by_contract:
        pytest.skip("its output is -inf by contract on these inputs")
    if ALL[name].not_quiet:
        # JAX flags an infinite constant only where it is created, which
        # a cached constant or dispatch may have done in an earlier test:
        # not deterministic here. TF's test holds these to a strict xfail.
        pytest.skip(f"not yet quiet: {ALL[name].not_quiet}")
    # JAX checks an eager op's output only on its first (uncached)
    # dispatch: without this an earlier test could hide an infinity.
    jax.clear_caches()
    with _jax_flags(jax_debug_infs=True, jax_debug_nans=True):
        _run_all_modes(name)


@only_tensorflow
@pytest.mark.parametrize("name", _not_quiet_xfail(NAMES))
def test_tf_check_numerics_is_silent(name):
    if ALL[name].inf_by_contract:
        pytest.skip("its output is -inf by contract on these inputs")
    import tensorflow as tf

    fn, args, wrt = _objective(name)
    tf.debugging.enable_check_numerics()
    try:
        for mode in ("eager", "graph"):
            vjp(fn, args, wrt, mode=mode)
    finally:
        tf.debugging.disable_check_numerics()


@only_torch
@pytest.mark.parametrize("name", NAMES)
def test_torch_repeated_backward(name):
    import torch

    fn, args, wrt = _objective(name)
    args = list(args)
    for i in wrt:
        args[i] = args[i].detach().clone().requires_grad_(True)
    out = torch.sum(fn(*args))
    first = torch.autograd.grad(out, [args[i] for i in wrt], retain_graph=True)
    second = torch.autograd.grad(out, [args[i] for i in wrt])
    for a, b in zip(first, second):
        np.testing.assert_array_equal(to_numpy(a), to_numpy(b))


def test_backend_is_one_of_three():
    assert BACKEND in ("tensorflow", "jax", "torch")
