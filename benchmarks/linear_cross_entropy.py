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

Usage:
    KERAS_BACKEND=jax python benchmarks/linear_cross_entropy.py
    KERAS_BACKEND=tensorflow python benchmarks/linear_cross_entropy.py --vocabs 32000 --rounds 3
"""

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
    return p.parse_args()


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

    step = jax.jit(jax.value_and_grad(fn, argnums=(0, 1, 2)))
    compiled = step.lower(*args).compile()
    transient = compiled.memory_analysis().temp_size_in_bytes

    def run():
        jax.block_until_ready(compiled(*args))

    return run, transient


def compile_tensorflow(fn, args):
    import tensorflow as tf

    args = [tf.constant(a) for a in args]

    @tf.function(jit_compile=True)
    def step(hidden, kernel, bias):
        with tf.GradientTape() as tape:
            tape.watch([hidden, kernel, bias])
            loss = fn(hidden, kernel, bias)
        return loss, tape.gradient(loss, [hidden, kernel, bias])

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
    candidates, args = losses(opts.tokens, opts.dim, vocab)
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


def main():
    opts = parse_args()
    mode = {"jax": "JAX jit", "tensorflow": "TF XLA"}[keras.backend.backend()]
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
