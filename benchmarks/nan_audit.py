#!/usr/bin/env python3
"""What `NaNAudit()` costs a training step, beside `TerminateOnNaN()`.

Trains small Keras models with `fit` (no NaN: the callbacks only watch) and
times one epoch per candidate callback, in interleaved rounds (every round
runs each candidate once, in a shuffled order, so that the ratios compare
epochs run under the same machine load):

- `none`: no callback, the step itself;
- `TerminateOnNaN()`: Keras's callback, the replacement's baseline;
- `NaNAudit()`: the default (the failing step's batch recorded, the weights
  from before each step kept for the restore);
- `NaNAudit(restore_weights=False)`: without the weight copy.

Each candidate trains its own copy of the model (same initial weights,
compiled the same way, warmed up before timing), from arrays with
`shuffle=True`. Reported: the median time per step and the median of the
per-round ratios to `none` and to `TerminateOnNaN()`. The issue's target is
`NaNAudit()` within 1.10x of a small model's step.

Models (`--models`): `mlp`, a 3-layer perceptron on 32 features (the
smallest step, where a fixed per-step cost shows most), and `cnn`, a small
convolutional classifier on 28 x 28 images.

Usage (one backend per process, as Keras picks it at import):
    KERAS_BACKEND=jax python benchmarks/nan_audit.py
    KERAS_BACKEND=tensorflow python benchmarks/nan_audit.py --rounds 5
    KERAS_BACKEND=torch python benchmarks/nan_audit.py --models mlp
"""

import argparse
import os
import random
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_stable.callbacks import NaNAudit  # noqa: E402

CANDIDATES = ("none", "TerminateOnNaN()", "NaNAudit()", "NaNAudit(restore_weights=False)")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="mlp,cnn", help="comma list of mlp, cnn")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=64, help="steps per timed epoch")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--quick", action="store_true", help="a smoke test: 2 rounds of 4 steps")
    opts = p.parse_args(argv)
    if opts.quick:
        opts.rounds, opts.steps = 2, 4
    opts.models = [m.strip() for m in opts.models.split(",") if m.strip()]
    return opts


def make_model(kind):
    keras.utils.set_random_seed(0)
    if kind == "mlp":
        inputs = keras.Input((32,))
        h = keras.layers.Dense(64, activation="relu")(inputs)
        h = keras.layers.Dense(64, activation="relu")(h)
    elif kind == "cnn":
        inputs = keras.Input((28, 28, 1))
        h = keras.layers.Conv2D(16, 3, activation="relu")(inputs)
        h = keras.layers.MaxPooling2D()(h)
        h = keras.layers.Conv2D(32, 3, activation="relu")(h)
        h = keras.layers.GlobalAveragePooling2D()(h)
    else:
        raise ValueError(f"unknown model {kind!r}: expected 'mlp' or 'cnn'")
    outputs = keras.layers.Dense(10)(h)
    model = keras.Model(inputs, outputs)
    model.compile(
        optimizer="adam",
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def make_data(kind, n):
    rng = np.random.default_rng(0)
    shape = (n, 32) if kind == "mlp" else (n, 28, 28, 1)
    x = rng.standard_normal(shape).astype("float32")
    y = rng.integers(0, 10, n).astype("int32")
    return x, y


def make_callbacks(name, directory):
    if name == "none":
        return []
    if name == "TerminateOnNaN()":
        return [keras.callbacks.TerminateOnNaN()]
    if name == "NaNAudit()":
        return [NaNAudit(directory, verbose=0)]
    return [NaNAudit(directory, restore_weights=False, verbose=0)]


def measure(kind, opts):
    x, y = make_data(kind, opts.steps * opts.batch_size)
    models = {name: make_model(kind) for name in CANDIDATES}
    directory = tempfile.mkdtemp(prefix="nan_audit_bench_")

    def epoch(name):
        callbacks = make_callbacks(name, directory)
        t0 = time.perf_counter()
        models[name].fit(
            x, y, batch_size=opts.batch_size, epochs=1, shuffle=True, verbose=0, callbacks=callbacks
        )
        for callback in callbacks:
            if getattr(callback, "step", None) is not None:
                raise RuntimeError(f"{name} saw a non-finite step: the benchmark is broken")
        return (time.perf_counter() - t0) / opts.steps

    for name in CANDIDATES:  # compile and warm up
        epoch(name)
        epoch(name)
    order = random.Random(1234)
    samples = {name: [] for name in CANDIDATES}
    for _ in range(opts.rounds):
        names = list(CANDIDATES)
        order.shuffle(names)
        for name in names:
            samples[name].append(epoch(name))
    rows = []
    for name in CANDIDATES:
        s = samples[name]
        rows.append(
            {
                "model": kind,
                "candidate": name,
                "ms_per_step": 1e3 * statistics.median(s),
                "vs_none": statistics.median(a / b for a, b in zip(s, samples["none"])),
                "vs_terminate": statistics.median(
                    a / b for a, b in zip(s, samples["TerminateOnNaN()"])
                ),
            }
        )
    return rows


def mode_of(model_kind):
    model = make_model(model_kind)
    backend = keras.backend.backend()
    if backend == "torch":
        return "torch eager"
    return f"{backend} fit (jit_compile={model.jit_compile})"


def main(argv=None):
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    backend = keras.backend.backend()
    print(
        f"NaNAudit overhead, Keras {keras.__version__}, {backend}; "
        f"{opts.rounds} interleaved rounds of one {opts.steps}-step epoch "
        f"(batch {opts.batch_size}) per candidate; medians.",
        flush=True,
    )
    print()
    print("| model | backend / mode | callback | ms / step | vs none | vs TerminateOnNaN |")
    print("|---|---|---|---|---|---|")
    for kind in opts.models:
        mode = mode_of(kind)
        for r in measure(kind, opts):
            print(
                f"| {r['model']} | {mode} | `{r['candidate']}` | {r['ms_per_step']:.2f} "
                f"| {r['vs_none']:.2f} | {r['vs_terminate']:.2f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
