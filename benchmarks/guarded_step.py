#!/usr/bin/env python3
"""What `Guarded(adam)` costs a training step, beside `adam` alone.

Trains small Keras models with `fit` (no NaN: the guard only decides) and
times one epoch per candidate optimizer, in interleaved rounds (every round
runs each candidate once, in a shuffled order, so that the ratios compare
epochs run under the same machine load):

- `adam`: `keras.optimizers.Adam()`, the baseline;
- `Guarded(adam)`: the guard alone (the finiteness flag and the
  where-select of every variable on JAX and PyTorch, `tf.cond` on TF);
- `adam(global_clipnorm=1)` and `Guarded(adam, global_clipnorm=1)`: with
  the clipping, Keras's and the guarded one (its power-of-two rescue).

Each candidate trains its own copy of the model (same initial weights,
compiled the same way, warmed up before timing). Reported: the median time
per step and the median of the per-round ratios to the unguarded optimizer
with the same clipping. The issue's target is at most 1.03x.

Models (`--models`): `cnn`, a small convolutional classifier on 28 x 28
images, and `transformer`, one Transformer block (4 heads, width 64) on
sequences of 32 tokens. The mode is `fit`'s default: TF with XLA
(`jit_compile=True`), JAX jit, PyTorch eager.

Usage (one backend per process, as Keras picks it at import):
    KERAS_BACKEND=jax python benchmarks/guarded_step.py
    KERAS_BACKEND=tensorflow python benchmarks/guarded_step.py --rounds 5
    KERAS_BACKEND=torch python benchmarks/guarded_step.py --quick
"""

import argparse
import os
import random
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_stable.optimizers import Guarded  # noqa: E402

CANDIDATES = (
    "adam",
    "Guarded(adam)",
    "adam(global_clipnorm=1)",
    "Guarded(adam, global_clipnorm=1)",
)
BASELINE = {
    "adam": "adam",
    "Guarded(adam)": "adam",
    "adam(global_clipnorm=1)": "adam(global_clipnorm=1)",
    "Guarded(adam, global_clipnorm=1)": "adam(global_clipnorm=1)",
}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=None, help="comma list of cnn, transformer (both)")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=32, help="steps per timed epoch")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument(
        "--quick", action="store_true", help="a smoke test: the CNN, 2 rounds of 4 steps"
    )
    opts = p.parse_args(argv)
    if opts.quick:
        opts.rounds, opts.steps = 2, 4
    if opts.models is None:
        opts.models = "cnn" if opts.quick else "cnn,transformer"
    opts.models = [m.strip() for m in opts.models.split(",") if m.strip()]
    return opts


def make_optimizer(name):
    if name == "adam":
        return keras.optimizers.Adam()
    if name == "Guarded(adam)":
        return Guarded(keras.optimizers.Adam())
    if name == "adam(global_clipnorm=1)":
        return keras.optimizers.Adam(global_clipnorm=1.0)
    return Guarded(keras.optimizers.Adam(), global_clipnorm=1.0)


def make_model(kind, optimizer):
    keras.utils.set_random_seed(0)
    if kind == "cnn":
        inputs = keras.Input((28, 28, 1))
        h = keras.layers.Conv2D(16, 3, activation="relu")(inputs)
        h = keras.layers.MaxPooling2D()(h)
        h = keras.layers.Conv2D(32, 3, activation="relu")(h)
        h = keras.layers.GlobalAveragePooling2D()(h)
    elif kind == "transformer":
        inputs = keras.Input((32,), dtype="int32")
        x = keras.layers.Embedding(1000, 64)(inputs)
        a = keras.layers.MultiHeadAttention(4, 16)(x, x)
        x = keras.layers.LayerNormalization()(x + a)
        f = keras.layers.Dense(64)(keras.layers.Dense(256, activation="gelu")(x))
        x = keras.layers.LayerNormalization()(x + f)
        h = keras.layers.GlobalAveragePooling1D()(x)
    else:
        raise ValueError(f"unknown model {kind!r}: expected 'cnn' or 'transformer'")
    outputs = keras.layers.Dense(10)(h)
    model = keras.Model(inputs, outputs)
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=keras.backend.backend() != "torch",
    )
    return model


def make_data(kind, n):
    rng = np.random.default_rng(0)
    if kind == "cnn":
        x = rng.standard_normal((n, 28, 28, 1)).astype("float32")
    else:
        x = rng.integers(0, 1000, (n, 32)).astype("int32")
    y = rng.integers(0, 10, n).astype("int32")
    return x, y


def measure(kind, opts):
    x, y = make_data(kind, opts.steps * opts.batch_size)
    models = {name: make_model(kind, make_optimizer(name)) for name in CANDIDATES}

    def epoch(name):
        t0 = time.perf_counter()
        models[name].fit(x, y, batch_size=opts.batch_size, epochs=1, shuffle=True, verbose=0)
        return (time.perf_counter() - t0) / opts.steps

    for name in CANDIDATES:  # compile and warm up
        epoch(name)
        epoch(name)
    for name in CANDIDATES:
        skipped = getattr(models[name].optimizer, "skipped_steps", None)
        if skipped is not None and int(keras.ops.convert_to_numpy(skipped)):
            raise RuntimeError(f"{name} skipped a step: the benchmark is broken")
    order = random.Random(1234)
    samples = {name: [] for name in CANDIDATES}
    for _ in range(opts.rounds):
        names = list(CANDIDATES)
        order.shuffle(names)
        for name in names:
            samples[name].append(epoch(name))
    rows = []
    for name in CANDIDATES:
        s, base = samples[name], samples[BASELINE[name]]
        rows.append(
            {
                "model": kind,
                "candidate": name,
                "ms_per_step": 1e3 * statistics.median(s),
                "ratio": statistics.median(a / b for a, b in zip(s, base)),
            }
        )
    return rows


def main(argv=None):
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    backend = keras.backend.backend()
    mode = {"tensorflow": "TF XLA", "jax": "JAX jit", "torch": "torch eager"}[backend]
    print(
        f"Guarded step cost, Keras {keras.__version__}, {mode}; {opts.rounds} "
        f"interleaved rounds of one {opts.steps}-step epoch (batch {opts.batch_size}) "
        "per candidate; medians.",
        flush=True,
    )
    print()
    print("| model | mode | optimizer | ms / step | vs unguarded |")
    print("|---|---|---|---|---|")
    for kind in opts.models:
        for r in measure(kind, opts):
            print(
                f"| {r['model']} | {mode} | `{r['candidate']}` | {r['ms_per_step']:.2f} "
                f"| {r['ratio']:.3f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
