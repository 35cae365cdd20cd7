"""Every public op, layer and loss lowers for GPUs and TPUs with no host
callback in its compiled training step.

A `custom_call` to a host callback (a Python callback, a host transfer)
would stall an accelerator on every step, or fail to run at all. The step
(value and gradient, `jax.jit`) of each public name is exported for
`cuda` and `tpu` with `jax.export` on small inputs; lowering needs no
accelerator. The fused kernels (`keras.ops.custom_gradient`, a
`jax.custom_vjp`) are covered by the ops that use them.
"""

import re

import numpy as np
import pytest

from tests.harness.losses import spec_model
from tests.specs.losses import LOSS_SPECS
from tests.specs.ops import ALL
from tests.specs.ops import C
from tests.specs.ops import D
from tests.specs.ops import N
from tests.specs.ops import _f
from tests.specs.ops import _int

pytestmark = pytest.mark.jax

PLATFORMS = ["cuda", "tpu"]


def _host_calls(fn, args, wrt):
    """Exports the jitted value-and-gradient of `sum(fn(*args))` for
    `PLATFORMS`; returns the `custom_call` targets that name a host
    callback or transfer (an export that fails raises)."""
    import jax
    import jax.numpy as jnp

    def step(*diff):
        def objective(*d):
            full = list(args)
            for i, a in zip(wrt, d):
                full[i] = a
            return jnp.sum(jnp.asarray(fn(*full), jnp.float32))

        return jax.value_and_grad(objective, argnums=tuple(range(len(wrt))))(*diff)

    exported = jax.export.export(jax.jit(step), platforms=PLATFORMS)(
        *[jnp.asarray(args[i]) for i in wrt]
    )
    text = exported.mlir_module()
    targets = re.findall(r"stablehlo\.custom_call @([\w.$-]+)", text)
    targets += re.findall(r'call_target_name = "([^"]+)"', text)
    return [t for t in targets if "callback" in t.lower() or "host" in t.lower()]


@pytest.mark.parametrize("name", sorted(ALL))
def test_op_step_lowers_without_host_callbacks(name):
    spec = ALL[name]
    assert _host_calls(spec.call, spec.args, spec.wrt) == []


LAYER_INPUTS = {
    "L2Normalize": ({}, _f(N, D)),
    "LogSoftmax": ({}, _f(N, C)),
    "SafeNorm": ({}, _f(N, D)),
    "StableSoftmax": ({}, _f(N, C)),
    "LinearSoftmaxHead": ({"vocab_size": C, "chunk_size": 2}, _f(N, D)),
}


# Layers called with more than one input: their jit-compiled `fit` runs in
# tests/layers/test_attention_layers.py, not through this one-input export.
LAYER_SKIP = {
    "StableMultiHeadAttention": "query and value inputs (test_attention_layers.py)",
    "StableGroupedQueryAttention": "query and value inputs (test_attention_layers.py)",
}


def test_every_public_layer_has_inputs():
    from keras_stable import layers

    assert sorted(layers.__all__) == sorted({**LAYER_INPUTS, **LAYER_SKIP})


@pytest.mark.parametrize("name", sorted(LAYER_INPUTS))
def test_layer_step_lowers_without_host_callbacks(name):
    from keras_stable import layers

    kwargs, x = LAYER_INPUTS[name]
    layer = getattr(layers, name)(**kwargs)
    layer.build(x.shape)
    if name == "LinearSoftmaxHead":
        labels = _int(C, N)
        # The training call: the fused loss against labels.
        assert _host_calls(lambda h: layer(h, labels=labels), [x], (0,)) == []
    assert _host_calls(lambda a: layer(a), [x], (0,)) == []


def _prediction(spec, y):
    """A prediction of the shape the spec's model gives (non-negative:
    distances, rates and probabilities must be)."""
    shape = list(spec_model(spec).output.shape)
    shape[spec.pred_batch_axis] = np.shape(y)[0]
    return np.abs(_f(*shape))


@pytest.mark.parametrize("spec", LOSS_SPECS, ids=repr)
def test_loss_step_lowers_without_host_callbacks(spec):
    y = spec.make_y(np.random.default_rng(0), 6)
    loss = spec.make()
    y_pred = _prediction(spec, y)
    assert _host_calls(lambda p: loss(y, p), [y_pred], (0,)) == []
