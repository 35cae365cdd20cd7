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

import keras
import numpy as np
import pytest

from tests.harness.loss_specs import LOSS_SPECS

pytestmark = pytest.mark.jax

PLATFORMS = ["cuda", "tpu"]
RNG = np.random.default_rng(0)
N, D, C = 4, 3, 5


def _f(*shape):
    return RNG.normal(size=shape).astype("float32")


def _probs(*shape):
    p = RNG.random(shape).astype("float32") + 0.1
    return p / p.sum(-1, keepdims=True)


def _int(high, *shape):
    return RNG.integers(0, high, shape).astype("int32")


MASK = RNG.random((N, C)) > 0.3

# name -> (call(*args), args, indices of the differentiated args). Every
# name of keras_stable.ops.__all__ needs an entry (or a reason in SKIP).
OP_INPUTS = {
    "contrastive_loss": (
        lambda y, d: _ops().contrastive_loss(y, d),
        [_int(2, N), np.abs(_f(N))],
        (1,),
    ),
    "cosine_similarity": (
        lambda a, b: _ops().cosine_similarity(a, b),
        [_f(N, D), _f(N, D)],
        (0, 1),
    ),
    "ctc_loss": (
        lambda y, x: _ops().ctc_loss(y, x, np.array([2, 1, 2, 0]), np.array([6, 6, 5, 3])),
        [_int(C - 1, N, 2) + 1, _f(N, 6, C)],
        (1,),
    ),
    "dice_loss": (lambda y, p: _ops().dice_loss(y, p), [_int(2, N, C), _probs(N, C)], (1,)),
    "tversky_loss": (lambda y, p: _ops().tversky_loss(y, p), [_int(2, N, C), _probs(N, C)], (1,)),
    "dot_product_attention": (
        lambda q, k, v: _ops().dot_product_attention(
            q, k, v, mask=MASK[None, None, :, :], is_causal=True
        ),
        [_f(2, N, 4, D), _f(2, C, 2, D), _f(2, C, 2, D)],
        (0, 1, 2),
    ),
    "gaussian_nll": (lambda y, m, v: _ops().gaussian_nll(y, m, v), [_f(N), _f(N), _f(N)], (1, 2)),
    "info_nce_loss": (lambda v: _ops().info_nce_loss(v), [_f(2, N, D)], (0,)),
    "kl_divergence": (lambda y, x: _ops().kl_divergence(y, x), [_probs(N, C), _f(N, C)], (1,)),
    "l2_normalize": (lambda x: _ops().l2_normalize(x), [_f(N, D)], (0,)),
    "linear_softmax_cross_entropy": (
        lambda h, w, b: _ops().linear_softmax_cross_entropy(h, w, _int(C, N), b, chunk_size=2),
        [_f(N, D), _f(D, C), _f(C)],
        (0, 1, 2),
    ),
    "log_softmax": (lambda x: _ops().log_softmax(x, mask=MASK), [_f(N, C)], (0,)),
    "logsumexp": (lambda x: _ops().logsumexp(x, axis=-1, mask=MASK), [_f(N, C)], (0,)),
    "masked_absolute_error": (
        lambda y, p: _ops().masked_absolute_error(y, p),
        [_f(N, D), _f(N, D)],
        (1,),
    ),
    "masked_huber": (lambda y, p: _ops().masked_huber(y, p), [_f(N, D), _f(N, D)], (1,)),
    "masked_squared_error": (
        lambda y, p: _ops().masked_squared_error(y, p),
        [_f(N, D), _f(N, D)],
        (1,),
    ),
    "masked_task_distance": (
        lambda y, p: _ops().masked_task_distance(y, p, mask=MASK[:, :D]),
        [_f(N, D), _f(N, D)],
        (1,),
    ),
    "pairwise_distance": (
        lambda a, b: _ops().pairwise_distance(a, b),
        [_f(N, D), _f(N, D)],
        (0, 1),
    ),
    "poisson_nll": (lambda y, r: _ops().poisson_nll(y, r), [np.abs(_f(N)), _f(N)], (1,)),
    "safe_divide": (lambda a, b: _ops().safe_divide(a, b), [_f(N), _f(N)], (0, 1)),
    "safe_norm": (lambda x: _ops().safe_norm(x, axis=-1), [_f(N, D)], (0,)),
    "safe_sqrt": (lambda x: _ops().safe_sqrt(x), [_f(N)], (0,)),
    "safe_std": (lambda x: _ops().safe_std(x, axis=-1), [_f(N, D)], (0,)),
    "sigmoid_cross_entropy": (
        lambda y, x: _ops().sigmoid_cross_entropy(y, x),
        [_probs(N, C), _f(N, C)],
        (1,),
    ),
    "sigmoid_focal_cross_entropy": (
        lambda y, x: _ops().sigmoid_focal_cross_entropy(y, x),
        [_probs(N, C), _f(N, C)],
        (1,),
    ),
    "softmax": (lambda x: _ops().softmax(x, mask=MASK), [_f(N, C)], (0,)),
    "softmax_cross_entropy": (
        lambda y, x: _ops().softmax_cross_entropy(y, x, mask=MASK),
        [_probs(N, C), _f(N, C)],
        (1,),
    ),
    "softmax_focal_cross_entropy": (
        lambda y, x: _ops().softmax_focal_cross_entropy(y, x),
        [_probs(N, C), _f(N, C)],
        (1,),
    ),
    "sparse_softmax_cross_entropy": (
        lambda y, x: _ops().sparse_softmax_cross_entropy(y, x),
        [_int(C, N), _f(N, C)],
        (1,),
    ),
    "triplet_hard_loss": (
        lambda y, e: _ops().triplet_hard_loss(y, e),
        [_int(2, N), _f(N, D)],
        (1,),
    ),
    "triplet_semihard_loss": (
        lambda y, e: _ops().triplet_semihard_loss(y, e),
        [_int(2, N), _f(N, D)],
        (1,),
    ),
}
# Extra variants of the kernels' ops: other code paths (no mask, tuple
# axes, float16 without the overflow rescue, another norm order).
VARIANTS = {
    "dot_product_attention(chunk_size=2)": (
        lambda q, k, v, b: _ops().dot_product_attention(
            q, k, v, bias=b, is_causal=True, chunk_size=2
        ),
        [_f(2, N, 4, D), _f(2, C, 2, D), _f(2, C, 2, D), _f(N, C)],
        (0, 1, 2, 3),
    ),
    "softmax(axis=(0, 1))": (lambda x: _ops().softmax(x, axis=(0, 1)), [_f(N, C)], (0,)),
    "log_softmax(no mask)": (lambda x: _ops().log_softmax(x), [_f(N, C)], (0,)),
    "logsumexp(axis=None)": (lambda x: _ops().logsumexp(x), [_f(N, C)], (0,)),
    "safe_norm(float16)": (
        lambda x: _ops().safe_norm(keras.ops.cast(x, "float16")),
        [_f(N, D)],
        (0,),
    ),
    "safe_norm(ord=3)": (lambda x: _ops().safe_norm(x, axis=-1, ord=3), [_f(N, D)], (0,)),
    "l2_normalize(epsilon)": (lambda x: _ops().l2_normalize(x, epsilon=1e-7), [_f(N, D)], (0,)),
}
SKIP = {}  # name -> the reason it cannot be exported (none today)


def _ops():
    from keras_stable import ops

    return ops


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


def test_every_public_op_has_inputs():
    from keras_stable import ops

    missing = sorted(set(ops.__all__) - set(OP_INPUTS) - set(SKIP))
    assert not missing, f"add inputs to OP_INPUTS (or a reason to SKIP) for: {missing}"


@pytest.mark.parametrize("name", sorted({**OP_INPUTS, **VARIANTS}))
def test_op_step_lowers_without_host_callbacks(name):
    fn, args, wrt = {**OP_INPUTS, **VARIANTS}[name]
    assert _host_calls(fn, args, wrt) == []


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
    n = np.shape(y)[0]
    if spec.id == "contrastive":
        return np.abs(_f(n, 1))
    if spec.id == "info_nce":
        return _f(2, n, 4)
    return _f(n, spec.outputs)


def test_every_public_loss_is_covered():
    from keras_stable import losses

    # CTC, Dice and Tversky: their specs and jit-compiled fits live in
    # tests/losses/test_stable_ctc.py and test_stable_overlap.py; their ops
    # are exported above (OP_INPUTS).
    own_specs = {"StableCTC", "StableDice", "StableTversky"}
    assert sorted(losses.__all__) == sorted({s.cls.__name__ for s in LOSS_SPECS} | own_specs)


@pytest.mark.parametrize("spec", LOSS_SPECS, ids=repr)
def test_loss_step_lowers_without_host_callbacks(spec):
    y = spec.make_y(np.random.default_rng(0), 6)
    loss = spec.make()
    y_pred = _prediction(spec, y)
    assert _host_calls(lambda p: loss(y, p), [y_pred], (0,)) == []
