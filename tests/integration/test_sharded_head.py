"""The fused head with its vocabulary sharded over 8 simulated devices
(`keras.distribution.ModelParallel` on JAX, a 2 x 4 batch x model mesh):
the loss and the gradients of one device, every option and the tied
`(vocab, dim)` layout included; each device's memory for the head about a
quarter of the unsharded one; `fit` of a model whose head kernel a
`LayoutMap` shards along the vocabulary gives one device's loss curve and
weights. JAX only (`keras.distribution` runs on JAX), in a fresh process
with `XLA_FLAGS=--xla_force_host_platform_device_count=8`."""

import pytest

from tests.backend_utils import BACKEND
from tests.integration._fresh_process import run_fresh

pytestmark = pytest.mark.skipif(BACKEND != "jax", reason="keras.distribution is JAX-only")

_CHILD = r"""
import jax
import keras
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

import keras_stable
from keras_stable import ops

assert len(jax.devices()) == 8
mesh = keras.distribution.DeviceMesh((2, 4), ["batch", "model"], keras.distribution.list_devices())
rng = np.random.default_rng(0)
result = {}

# --- the op: sharded == one device, for each layout and option set -------
B, T, D, V = 4, 6, 16, 1000  # 24 tokens (12 per batch shard), 250 columns per device
hidden = rng.normal(size=(B, T, D)).astype("float32")
kernel = rng.normal(size=(D, V)).astype("float32")
bias = rng.normal(size=(V,)).astype("float32")
labels = rng.integers(0, V, (B, T)).astype("int32")
labels[1, 2] = -100
cot = rng.normal(size=(B, T)).astype("float32")
jmesh = mesh.backend_mesh
dist = keras.distribution.ModelParallel(
    layout_map=keras.distribution.LayoutMap(mesh), batch_dim_name="batch"
)


def step(transpose, options):
    def loss(h, w, b):
        out = ops.linear_softmax_cross_entropy(
            h, w, labels, b, chunk_size=96, ignore_class=-100, transpose_kernel=transpose, **options
        )
        return (out * cot).sum(), out

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True))


def put(x, *spec):
    return jax.device_put(x, NamedSharding(jmesh, P(*spec)))


errors = {}
for transpose in (False, True):
    for name, options in {
        "plain": {},
        "all": {"label_smoothing": 0.1, "z_loss": 1e-3, "logit_soft_cap": 4.0},
    }.items():
        w = kernel.T.copy() if transpose else kernel
        (ref_total, ref_out), ref_grads = step(transpose, options)(hidden, w, bias)
        args = (
            put(hidden, "batch", None, None),
            put(w, *(("model", None) if transpose else (None, "model"))),
            put(bias, "model"),
        )
        with dist.scope():
            (total, out), grads = step(transpose, options)(*args)
        errs = [float(np.max(np.abs(np.asarray(out) - np.asarray(ref_out))) / np.max(np.abs(ref_out)))]
        for g, r in zip(grads, ref_grads):
            errs.append(float(np.max(np.abs(np.asarray(g) - np.asarray(r))) / np.max(np.abs(r))))
        errors[f"{name}/transpose={transpose}"] = errs
        result.setdefault("grad_specs", []).append([str(g.sharding.spec) for g in grads])
result["errors"] = errors

# --- memory per device ----------------------------------------------------
D2, V2, B2, T2 = 256, 16384, 8, 64  # a 16 MiB kernel, 512 tokens
h2 = rng.normal(size=(B2, T2, D2)).astype("float32")
w2 = rng.normal(size=(D2, V2)).astype("float32")
b2 = np.zeros((V2,), "float32")
l2 = rng.integers(0, V2, (B2, T2)).astype("int32")


def head_step(h, w, b):
    return jax.grad(lambda h, w, b: ops.linear_softmax_cross_entropy(h, w, l2, b).sum(), argnums=(0, 1, 2))(h, w, b)


def footprint(compiled):
    m = compiled.memory_analysis()
    return m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes


one = footprint(jax.jit(head_step).lower(h2, w2, b2).compile())
with dist.scope():
    sharded_args = (put(h2, "batch", None, None), put(w2, None, "model"), put(b2, "model"))
    eight = footprint(jax.jit(head_step).lower(*sharded_args).compile())
result["memory"] = [one, eight]

# --- fit: a LayoutMap shards the head's kernel along the vocabulary -------
VOCAB, DIM, STEPS = 64, 8, 5
tokens_in = rng.integers(1, VOCAB, (16, STEPS)).astype("int32")
labels_in = np.roll(tokens_in, -1, axis=1)


def model():
    keras.utils.set_random_seed(0)
    tokens = keras.Input((STEPS,), dtype="int32")
    labels = keras.Input((STEPS,), dtype="int32")
    embed = keras.layers.Embedding(VOCAB, DIM, name="embed")
    hidden = keras.layers.Dense(DIM, activation="tanh", name="mix")(embed(tokens))
    head = keras_stable.layers.LinearSoftmaxHead(
        VOCAB, tied_embedding=embed, z_loss=1e-3, logit_soft_cap=5.0, name="head"
    )
    m = keras.Model([tokens, labels], head(hidden, labels))
    m.compile(optimizer=keras.optimizers.SGD(0.5))
    return m


single = model()
h_one = single.fit([tokens_in, labels_in], batch_size=8, epochs=2, verbose=0, shuffle=False)
layout = keras.distribution.LayoutMap(mesh)
layout["embed/embeddings"] = ("model", None)
layout["head/bias"] = ("model",)
with keras.distribution.ModelParallel(layout_map=layout, batch_dim_name="batch").scope():
    parallel = model()
    h_par = parallel.fit([tokens_in, labels_in], batch_size=8, epochs=2, verbose=0, shuffle=False)
    result["embed_spec"] = str(parallel.get_layer("embed").embeddings.value.sharding.spec)
result["loss"] = [h_one.history["loss"], h_par.history["loss"]]
result["weights"] = max(
    float(np.max(np.abs(np.asarray(a.value) - np.asarray(b.value))))
    for a, b in zip(single.weights, parallel.weights)
)
report(result)
"""


@pytest.fixture(scope="module")
def child(tmp_path_factory):
    return run_fresh(
        _CHILD,
        "jax",
        cwd=str(tmp_path_factory.mktemp("sharded")),
        env={"XLA_FLAGS": "--xla_force_host_platform_device_count=8"},
        timeout=600,
    )


def test_sharded_op_equals_one_device(child):
    for case, errs in child["errors"].items():
        assert max(errs) < 1e-5, (case, errs)  # value, d_hidden, d_kernel, d_bias
    for specs in child["grad_specs"]:
        assert "model" in specs[1] and "batch" in specs[0], specs


def test_each_device_holds_about_a_quarter_of_the_head(child):
    one, eight = child["memory"]
    # The kernel and its gradient (what grows with the vocabulary) are split
    # over the 4 model devices, the hidden states over the 2 batch devices,
    # and the blocks are smaller: about a quarter of one device's bytes
    # (argument + output + temporary buffers of the compiled step).
    assert eight < 0.3 * one, (one, eight)


def test_fit_with_a_vocabulary_sharded_layout_equals_one_device(child):
    assert "model" in child["embed_spec"]
    one, parallel = child["loss"]
    assert max(abs(a - b) / abs(a) for a, b in zip(one, parallel)) < 1e-5, (one, parallel)
    assert child["weights"] < 1e-5
