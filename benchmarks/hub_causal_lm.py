#!/usr/bin/env python3
"""Memory of one `fit` step: keras-hub's own `CausalLM` loss against
`keras_stable.hub.FusedCausalLM`, at Gemma's 256k vocabulary.

A tiny random-weight `GemmaCausalLM` (one layer, `hidden_dim` 64, Gemma 2's
final logit soft cap 30, no preprocessor) with a 256,000-token vocabulary,
trained one step on `batch x length` token ids with padding, twice:
compiled with keras-hub's default loss (`SparseCategoricalCrossentropy(
from_logits=True)` over the `[batch, length, vocab]` logits; compiled with
`weighted_metrics=[]`, so that only the loss is measured — keras-hub's
default `SparseCategoricalAccuracy` would read the logits too), and wrapped
in `FusedCausalLM`, whose loss never forms them. Both use `Adam` and
Keras's own compiled train step (`jit_compile` as `fit` chooses it).

Memory, as in `benchmarks/run.py`:
    JAX: XLA's buffer assignment of `jax.jit(model.train_step,
    donate_argnums=0)` (what `fit` compiles), from `memory_analysis()`:
    `temp` (the step's temporaries) and `peak` (arguments + outputs not
    aliased to the donated arguments + temporaries). Static, exact for
    XLA's plan; nothing at full size is executed.
    TensorFlow: the CPU BFC allocator's peak minus current bytes around one
    executed `train_on_batch` (after a first, compiling call): the step's
    transient bytes (`TF_CPU_ALLOCATOR_USE_BFC=true` is set before TF
    starts). `fit`'s default on a CPU, `jit_compile="auto"`, resolves to
    graph mode without XLA: the row says which (`--jit-compile` forces
    XLA).
    torch: not measured (the CPU keeps no allocator statistics).

Usage:
    KERAS_BACKEND=jax python benchmarks/hub_causal_lm.py            # 2 x 1024 tokens
    KERAS_BACKEND=jax python benchmarks/hub_causal_lm.py --quick    # 2 x 256 tokens
    KERAS_BACKEND=tensorflow python benchmarks/hub_causal_lm.py --batch 2 --length 2048
"""

import os

os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")  # before TF starts
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse  # noqa: E402
import gc  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402

MIB = 2**20


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vocab", type=int, default=256_000)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--length", type=int, default=1024)
    p.add_argument(
        "--quick",
        action="store_true",
        help="2 x 256 tokens (about 45 s on 2 busy CPU cores, mostly compiling)",
    )
    p.add_argument("--jit-compile", action="store_true", help="TF: compile with XLA")
    opts = p.parse_args()
    if opts.quick:
        opts.batch, opts.length = 2, 256
    return opts


def causal_lm(vocab):
    import keras_hub

    keras.utils.set_random_seed(0)
    backbone = keras_hub.models.GemmaBackbone(
        vocabulary_size=vocab,
        num_layers=1,
        num_query_heads=2,
        num_key_value_heads=1,
        hidden_dim=64,
        intermediate_dim=128,
        head_dim=32,
        final_logit_soft_cap=30.0,
    )
    return keras_hub.models.GemmaCausalLM(backbone, preprocessor=None)


def batch(vocab, size, length, seed=0):
    """`(x, y, sample_weight)` as keras-hub's CausalLMPreprocessor gives it,
    the last quarter of every other row padded."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocab, (size, length)).astype("int32")
    padding = np.ones((size, length), bool)
    padding[::2, length - length // 4 :] = False
    ids[~padding] = 0
    y = np.concatenate([ids[:, 1:], np.zeros((size, 1), "int32")], axis=1)
    weight = np.concatenate([padding[:, 1:], np.zeros((size, 1), bool)], axis=1)
    return {"token_ids": ids, "padding_mask": padding}, y, weight.astype("float32")


def model_for(name, vocab, jit_compile="auto"):
    from keras_stable.hub import FusedCausalLM

    model = causal_lm(vocab)
    if name == "keras-hub":
        model.compile(
            optimizer=keras.optimizers.Adam(1e-4), weighted_metrics=[], jit_compile=jit_compile
        )
    else:
        model = FusedCausalLM(model)
        model.compile(optimizer=keras.optimizers.Adam(1e-4), jit_compile=jit_compile)
    # One step on 8 tokens builds the optimizer, the metrics and the loss.
    x, y, weight = batch(vocab, 1, 8)
    model.fit(x, y, sample_weight=weight, epochs=1, verbose=0, shuffle=False)
    return model


def jax_memory(model, data):
    import jax

    state = (
        [v.value for v in model.trainable_variables],
        [v.value for v in model.non_trainable_variables],
        [v.value for v in model.optimizer.variables],
        [v.value for v in model.metrics_variables],
    )
    step = jax.jit(model.train_step, donate_argnums=0)
    m = step.lower(state, data).compile().memory_analysis()
    peak = (
        m.argument_size_in_bytes
        + m.output_size_in_bytes
        - m.alias_size_in_bytes
        + m.temp_size_in_bytes
    )
    return {"temp": m.temp_size_in_bytes, "peak": peak}


def tensorflow_memory(model, data):
    import tensorflow as tf

    x, y, weight = data
    model.train_on_batch(x, y, sample_weight=weight)  # compiles at this shape
    device = "CPU:0"
    tf.config.experimental.reset_memory_stats(device)
    before = tf.config.experimental.get_memory_info(device)["current"]
    model.train_on_batch(x, y, sample_weight=weight)
    peak = tf.config.experimental.get_memory_info(device)["peak"]
    return {"temp": peak - before, "peak": None, "mode": "XLA" if model.jit_compile else "graph"}


def main():
    opts = parse_args()
    backend = keras.backend.backend()
    measure = {"jax": jax_memory, "tensorflow": tensorflow_memory}.get(backend)
    if measure is None:
        raise SystemExit(
            f"{backend}: no allocator statistics on this backend (use jax or tensorflow)"
        )
    data = batch(opts.vocab, opts.batch, opts.length)
    tokens = opts.batch * opts.length
    results = {}
    for name in ("keras-hub", "FusedCausalLM"):
        model = model_for(name, opts.vocab, True if opts.jit_compile else "auto")
        results[name] = measure(model, data)
        del model
        keras.utils.clear_session(free_memory=True)
        gc.collect()
    logits = tokens * opts.vocab * 4 / MIB
    mode = results["keras-hub"].get("mode")
    kind = {
        "jax": "JAX jit (XLA plan)",
        "tensorflow": f"TF {mode} (BFC peak - before)",
    }[backend]

    def cell(value):
        return "n/a" if value is None else f"{value / MIB:.1f}"

    print(
        "| backend | tokens | vocab | float32 logits MiB | keras-hub temp MiB | "
        "FusedCausalLM temp MiB | temp ratio | keras-hub peak MiB | FusedCausalLM peak MiB | peak ratio |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    hub, fused = results["keras-hub"], results["FusedCausalLM"]
    peak_ratio = "n/a" if hub["peak"] is None else f"{hub['peak'] / fused['peak']:.1f}x"
    print(
        f"| {kind} | {opts.batch} x {opts.length} | {opts.vocab} | {logits:.0f} | "
        f"{cell(hub['temp'])} | {cell(fused['temp'])} | {hub['temp'] / max(fused['temp'], 1):.1f}x | "
        f"{cell(hub['peak'])} | {cell(fused['peak'])} | {peak_ratio} |",
        flush=True,
    )


if __name__ == "__main__":
    main()
