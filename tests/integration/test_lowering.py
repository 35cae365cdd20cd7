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

from tests.harness.layers import LayerSpec
from tests.harness.losses import spec_model
from tests.specs.blocks import BLOCK_SPECS
from tests.specs.layers import LAYER_SPECS
from tests.specs.losses import LOSS_SPECS
from tests.specs.ops import ALL
from tests.specs.ops import N
from tests.specs.ops import _f

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


def _layer_step(spec, inference):
    """`(call, args, wrt)` for a layer spec (tests/specs/): a weightless
    layer on an input of its spec's shape; a layer with weights on its
    spec's inputs, the float ones differentiated (the head's are hidden
    states and labels: its training call, the fused loss); with
    `inference`, the head's call on the hidden states alone (the logits)."""
    layer = spec.make()
    if isinstance(spec, LayerSpec):
        x = _f(*spec.input_shape)
        layer.build(x.shape)
        return (lambda a: layer(a)), [x], (0,)
    args = spec.inputs(np.random.default_rng(0), N)
    spec.call(layer, args)  # builds it
    if inference:
        return (lambda h: layer(h)), args[:1], (0,)
    wrt = tuple(i for i, a in enumerate(args) if a.dtype.kind == "f")
    return (lambda *a: spec.call(layer, a)), args, wrt


LAYER_STEPS = [pytest.param(spec, False, id=spec.id) for spec in LAYER_SPECS + BLOCK_SPECS] + [
    pytest.param(spec, True, id=f"{spec.id}-inference")
    for spec in BLOCK_SPECS
    if spec.targets is None  # a head: trained on its added loss, predicts logits
]


@pytest.mark.parametrize("spec, inference", LAYER_STEPS)
def test_layer_step_lowers_without_host_callbacks(spec, inference):
    assert _host_calls(*_layer_step(spec, inference)) == []


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
