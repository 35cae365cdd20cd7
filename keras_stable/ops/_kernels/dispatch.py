"""The one backend switch of the kernels.

Every question a kernel asks about the backend is a function here; no other
module of `keras_stable/ops` reads `keras.backend.backend()`.

`fused` runs a kernel: a `keras.ops.custom_gradient` on TensorFlow and
JAX, a `torch.autograd.Function` on PyTorch (`torch.fused.TorchFused`,
with the kernel's native pass where it applies). `native_pass` and
`native_op` read the tables of the torch sub-package (`torch.PASSES`,
`torch.OPS`); off PyTorch they give None and the sub-package (the only one
that imports torch) is never imported. `vocabulary_sharding` and
`sharded_linear_cross_entropy` reach the JAX-only `sharded.py` likewise.
`kernels_enabled` is the switch to the portable formulation.
"""

import os

import keras
from keras import ops


def kernels_enabled():
    """Whether the public ops use the kernels of this package.

    Setting the environment variable `KERAS_STABLE_PORTABLE` (to anything
    but `""` or `"0"`) makes them run their portable `keras.ops`
    formulation with plain autodiff instead: for A/B measurements, and for
    JAX's forward-mode differentiation (`jax.jvp`, `jax.jacfwd`,
    `jax.hessian`), which `keras.ops.custom_gradient` (a `jax.custom_vjp`)
    does not support. Read at each call (at trace time when compiled).
    """
    return os.environ.get("KERAS_STABLE_PORTABLE", "0") in ("", "0")


def _on_torch():
    return keras.backend.backend() == "torch"


def eager_layout():
    """Whether the kernels run op by op, with no compiler to lay out their
    intermediates (PyTorch): a kernel may then pick the layout that eager
    execution reads fastest (`pairwise.py`)."""
    return _on_torch()


def scan_outputs_follow_carry():
    """Whether `keras.ops.scan` stacks only outputs shaped like its carry
    (TensorFlow's): a loop must then carry exactly what it outputs
    (`ctc.py`)."""
    return keras.backend.backend() == "tensorflow"


def _torch():
    # Imported here, not at module load: torch is imported only on torch.
    from keras_stable.ops._kernels import torch

    return torch


def _symbolic(args):
    return any(isinstance(x, keras.KerasTensor) for x in args)


def fused(forward, backward, *inputs, native=None, keep=False):
    """`forward(*inputs)[0]`, with the gradient given by `backward`.

    `forward(*inputs) -> (output, saved)`; `backward(inputs, saved, output,
    upstream) -> [gradient for each input]`. Only tensors go in `inputs`:
    static arguments and masks are closed over. On PyTorch, `native` (a
    `(forward, backward)` pair, see `native_pass`) runs instead where it
    applies. Symbolic inputs (KerasTensors, a functional model's first
    call) only need the output's shape and dtype: the forward pass gives
    them, with no gradient to register.

    `keep=True` (a kernel whose forward is a loop too costly to run twice:
    attention, CTC, the linear cross-entropy, pairwise distances): the
    backward reads the output and `saved` that the forward kept, on every
    backend. Without it, TensorFlow and JAX keep them too, but PyTorch
    keeps only the inputs and runs the forward again in the backward
    (`torch/fused.py`). On PyTorch a kept backward is the pair's
    `(forward, backward)` run as a native pass: where autograd
    differentiates the backward again (`create_graph=True`), or under
    `torch.compile`, the forward runs again with autograd instead.
    """
    if _symbolic(inputs):
        return forward(*inputs)[0]
    if _on_torch():
        if keep and native is None:
            native = _kept(forward, backward)
        return _torch().torch_fused(forward, backward, native, inputs)

    @ops.custom_gradient
    def run(*inputs):
        output, saved = forward(*inputs)

        def grad(upstream):
            grads = backward(inputs, saved, output, upstream)
            return grads[0] if len(grads) == 1 else tuple(grads)

        return output, grad

    return run(*inputs)


def _kept(forward, backward):
    """`(forward, backward)` as a native pass (`torch/fused.py`) that
    keeps the output beside `saved` for the backward."""

    def kept_forward(*inputs):
        output, saved = forward(*inputs)
        return output, (output, *saved)

    def kept_backward(inputs, saved, upstream, needs):
        return backward(inputs, saved[1:], saved[0], upstream)

    return kept_forward, kept_backward


def native_pass(name, *args):
    """The native `(forward, backward)` pair of the kernel `name` on
    PyTorch (`torch.PASSES[name](*args)`, `torch/passes.py`); None
    elsewhere."""
    if not _on_torch():
        return None
    return _torch().PASSES[name](*args)


def native_op(name, *args):
    """`torch.OPS[name](*args)`, a torch fused op that returns None where
    it does not give the portable formulation's values, on PyTorch; None
    elsewhere (the caller then runs the portable formulation), and for
    symbolic inputs (KerasTensors: the portable formulation gives the
    output's spec)."""
    if not _on_torch() or _symbolic(args):
        return None
    return _torch().OPS[name](*args)


def vocabulary_sharding(tokens, vocab):
    """The mesh to shard the fused head's vocabulary over (a
    `sharded.VocabularySharding`) under a JAX `ModelParallel` distribution;
    None elsewhere (and `sharded`, which imports JAX, is never imported)."""
    if keras.backend.backend() != "jax" or not kernels_enabled():
        return None
    from keras_stable.ops._kernels import sharded

    return sharded.plan(tokens, vocab)


def sharded_linear_cross_entropy(*args):
    """`sharded.sharded_linear_cross_entropy(*args)` (JAX only)."""
    from keras_stable.ops._kernels import sharded

    return sharded.sharded_linear_cross_entropy(*args)
