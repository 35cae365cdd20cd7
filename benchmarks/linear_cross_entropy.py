#!/usr/bin/env python3
"""`linear_softmax_cross_entropy` against `Dense` + sparse cross-entropy.

Times one training step's worth of work — the loss of `hidden @ kernel +
bias` over a large vocabulary and its gradient with respect to `hidden`,
`kernel` and `bias` — for keras_stable's fused op and for the materialised
computation (`keras.losses.sparse_categorical_crossentropy(from_logits=True)`
on the full logits), compiled (`jax.jit`, `tf.function(jit_compile=True)`),
in one process, interleaved rounds (each round runs both in a shuffled
order), reporting the median of the per-round time ratios and the transient
memory: the bytes a step allocates beyond its inputs and its outputs (the
loss and the three gradients, which both candidates must return: the
kernel's gradient alone is `dim x vocab` floats). JAX: XLA's buffer
assignment (`memory_analysis().temp_size_in_bytes`); TensorFlow: the
allocator's peak minus current bytes around one call, less the outputs.

`--head tied` benchmarks the head of a language model with every option
on: a tied `(vocab, dim)` embedding read in place (`transpose_kernel`),
label smoothing 0.1, z-loss 1e-4 and a logit soft cap of 30, against what
a Keras user writes for it: `ReversibleEmbedding(reverse=True)`'s logits
(`hidden @ embeddings.T`, soft-capped), `categorical_crossentropy` of the
one-hot labels with `label_smoothing=0.1`, plus the z-loss. The gradient is
then with respect to `hidden` and the embeddings (no bias).

`--sharded` (JAX) compares, per device, the memory of the head's training
step on 8 simulated devices (a 2 x 4 batch x model `ModelParallel` mesh,
the kernel sharded along the vocabulary) with one device's: run it in a
fresh process, it sets `XLA_FLAGS` before JAX starts.

Usage:
    KERAS_BACKEND=jax python benchmarks/linear_cross_entropy.py
    KERAS_BACKEND=tensorflow python benchmarks/linear_cross_entropy.py --vocabs 32000 --rounds 3
    KERAS_BACKEND=jax python benchmarks/linear_cross_entropy.py --head tied
    KERAS_BACKEND=jax python benchmarks/linear_cross_entropy.py --sharded
"""

import os
import sys

if "--sharded" in sys.argv:  # before JAX is imported
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"

import argparse
import random
import statistics
import time

import keras
import numpy as np

from keras_stable import ops as stable_ops


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=1024)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--vocabs", default="32000,64000,128000")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--head", choices=("plain", "tied"), default="plain")
    p.add_argument("--sharded", action="store_true")
    return p.parse_args()


SMOOTHING, Z_LOSS, SOFT_CAP = 0.1, 1e-4, 30.0


def tied_losses(tokens, dim, vocab):
    """`f(hidden, embeddings)`: the tied head with every option, both ways."""
    rng = np.random.default_rng(0)
    labels = keras.ops.convert_to_tensor(rng.integers(0, vocab, tokens).astype("int32"))

    def fused(hidden, embeddings):
        return keras.ops.sum(
            stable_ops.linear_softmax_cross_entropy(
                hidden,
                embeddings,
                labels,
                transpose_kernel=True,
                label_smoothing=SMOOTHING,
                z_loss=Z_LOSS,
                logit_soft_cap=SOFT_CAP,
            )
        )

    def materialised(hidden, embeddings):
        # ReversibleEmbedding(reverse=True, logit_soft_cap=30), then Keras's
        # smoothed cross-entropy and the z-loss.
        logits = keras.ops.matmul(hidden, keras.ops.transpose(embeddings))
        logits = SOFT_CAP * keras.ops.tanh(logits / SOFT_CAP)
        ce = keras.losses.categorical_crossentropy(
            keras.ops.one_hot(labels, vocab), logits, from_logits=True, label_smoothing=SMOOTHING
        )
        z = Z_LOSS * keras.ops.square(keras.ops.logsumexp(logits, axis=-1))
        return keras.ops.sum(ce + z)

    args = [
        rng.normal(size=(tokens, dim)).astype("float32"),
        (rng.normal(size=(vocab, dim)) / np.sqrt(dim)).astype("float32"),
    ]
    return {"keras_stable": fused, "materialised": materialised}, args


def losses(tokens, dim, vocab):
    """The two candidates: `f(hidden, kernel, bias) -> sum of token losses`."""
    rng = np.random.default_rng(0)
    labels = keras.ops.convert_to_tensor(rng.integers(0, vocab, tokens).astype("int32"))

    def fused(hidden, kernel, bias):
        return keras.ops.sum(stable_ops.linear_softmax_cross_entropy(hidden, kernel, labels, bias))

    def materialised(hidden, kernel, bias):
        logits = keras.ops.matmul(hidden, kernel) + bias
        return keras.ops.sum(
            keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
        )

    args = [
        rng.normal(size=(tokens, dim)).astype("float32"),
        (rng.normal(size=(dim, vocab)) / np.sqrt(dim)).astype("float32"),
        np.zeros((vocab,), "float32"),
    ]
    return {"keras_stable": fused, "materialised": materialised}, args


def compile_jax(fn, args):
    import jax

    step = jax.jit(jax.value_and_grad(fn, argnums=tuple(range(len(args)))))
    compiled = step.lower(*args).compile()
    transient = compiled.memory_analysis().temp_size_in_bytes

    def run():
        jax.block_until_ready(compiled(*args))

    return run, transient


def compile_tensorflow(fn, args):
    import tensorflow as tf

    args = [tf.constant(a) for a in args]

    @tf.function(jit_compile=True)
    def step(*inputs):
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            loss = fn(*inputs)
        return loss, tape.gradient(loss, list(inputs))

    def run():
        out = step(*args)
        _ = [t.numpy() for t in tf.nest.flatten(out)[:1]]
        return out

    run()  # compile
    device = "CPU:0"
    tf.config.experimental.reset_memory_stats(device)
    before = tf.config.experimental.get_memory_info(device)["current"]
    result = run()
    peak = tf.config.experimental.get_memory_info(device)["peak"]
    outputs = sum(int(np.prod(t.shape)) * t.dtype.size for t in tf.nest.flatten(result))
    transient = peak - before - outputs
    del result
    return run, transient


def measure(vocab, opts):
    make = tied_losses if opts.head == "tied" else losses
    candidates, args = make(opts.tokens, opts.dim, vocab)
    backend = keras.backend.backend()
    build = {"jax": compile_jax, "tensorflow": compile_tensorflow}[backend]
    runs, memory, times = {}, {}, {name: [] for name in candidates}
    for name, fn in candidates.items():
        runs[name], memory[name] = build(fn, args)
        runs[name]()  # warm-up
    ratios = []
    for _ in range(opts.rounds):
        order = list(candidates)
        random.shuffle(order)
        this_round = {}
        for name in order:
            start = time.perf_counter()
            runs[name]()
            this_round[name] = time.perf_counter() - start
            times[name].append(this_round[name])
        ratios.append(this_round["keras_stable"] / this_round["materialised"])
    return {
        "vocab": vocab,
        "ms": {name: 1e3 * statistics.median(t) for name, t in times.items()},
        "time_ratio": statistics.median(ratios),
        "mib": {name: m / 2**20 for name, m in memory.items()},
        "memory_ratio": memory["materialised"] / max(memory["keras_stable"], 1),
    }


def sharded_memory(vocab, opts, shape):
    """Per-device bytes (arguments + outputs + temporaries) of the head's
    compiled training step: one device, and a `shape` (batch x model) mesh
    of 8 with the kernel sharded along the vocabulary over the model axis
    and the tokens over the batch axis."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    candidates, args = losses(opts.tokens, opts.dim, vocab)
    step = jax.jit(jax.grad(candidates["keras_stable"], argnums=(0, 1, 2)))

    def footprint(*inputs):
        m = step.lower(*inputs).compile().memory_analysis()
        return m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes

    one = footprint(*args)
    mesh = keras.distribution.DeviceMesh(
        shape, ["batch", "model"], keras.distribution.list_devices()
    )
    jmesh = mesh.backend_mesh
    specs = (P("batch", None), P(None, "model"), P("model"))
    placed = [jax.device_put(a, NamedSharding(jmesh, s)) for a, s in zip(args, specs)]
    layout = keras.distribution.LayoutMap(mesh)
    with keras.distribution.ModelParallel(layout_map=layout, batch_dim_name="batch").scope():
        eight = footprint(*placed)
    return one, eight


def main():
    opts = parse_args()
    if opts.sharded:
        print(
            "| vocab | tokens x dim | mesh (batch x model) | one device MiB | per device MiB | ratio |"
        )
        print("|---|---|---|---|---|---|")
        for vocab in (int(v) for v in opts.vocabs.split(",")):
            for shape in ((2, 4), (1, 8)):
                one, eight = sharded_memory(vocab, opts, shape)
                print(
                    f"| {vocab} | {opts.tokens} x {opts.dim} | {shape[0]} x {shape[1]} | "
                    f"{one / 2**20:.1f} | {eight / 2**20:.1f} | {eight / one:.2f} |",
                    flush=True,
                )
        return
    mode = {"jax": "JAX jit", "tensorflow": "TF XLA"}[keras.backend.backend()]
    mode += ", tied + all options" if opts.head == "tied" else ""
    print(
        "| mode | tokens x dim | vocab | keras_stable ms | materialised ms | time ratio | keras_stable MiB | materialised MiB | memory saved |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for vocab in (int(v) for v in opts.vocabs.split(",")):
        r = measure(vocab, opts)
        print(
            f"| {mode} | {opts.tokens} x {opts.dim} | {vocab} | {r['ms']['keras_stable']:.0f} | "
            f"{r['ms']['materialised']:.0f} | {r['time_ratio']:.2f}x | {r['mib']['keras_stable']:.1f} | "
            f"{r['mib']['materialised']:.1f} | {r['memory_ratio']:.1f}x less |",
            flush=True,
        )


if __name__ == "__main__":
    main()
