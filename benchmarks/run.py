"""Side-by-side benchmarks: keras_stable against the built-ins it replaces.

Every row times the forward *and* backward pass (the value of
`sum(out * cotangent)` and its gradient with respect to the input) of a
keras_stable op, layer or loss and of its built-in counterparts, in one
process, after warm-up, interleaved (each round calls every candidate once,
in a shuffled order), so that the ratios compare runs made under the same
machine load. Reported per candidate: the median time, the ratio of
keras_stable to the built-in (the median of the per-round ratios), the
compile time and the transient memory.

Modes:
    TensorFlow backend: `graph` (`tf.function`) and `xla`
    (`tf.function(jit_compile=True)`).
    JAX backend: `jit` (`jax.jit`).

Memory:
    TensorFlow: peak minus current bytes of `tf.config.experimental.
    get_memory_info` around one call (works on CPU and GPU). It counts every
    buffer the call allocates, the returned gradient included.
    JAX: XLA's buffer assignment of the compiled step, `memory_analysis()`:
    temporary plus output bytes (what the call allocates beyond its inputs).
    A static figure, exact for XLA's allocation plan, not a measured peak.

Usage:
    python benchmarks/run.py --quick                 # < 2 min, TF and JAX
    python benchmarks/run.py --out docs/benchmarks_table.md
    python benchmarks/run.py --backend jax --dtypes float32,bfloat16,float16
    python benchmarks/run.py --rows "norm|softmax" --sizes M --reps 20

With `--backend all` (the default) the script re-runs itself once per
backend in a subprocess (Keras picks its backend at import) and merges the
results into one Markdown table.
"""

import argparse
import importlib.util
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BACKENDS = ("tensorflow", "jax")
MODES = {"tensorflow": ("graph", "xla"), "jax": ("jit",)}
_BACKEND_MODULE = {"tensorflow": "tensorflow", "jax": "jax"}
BEGIN = "<!-- BEGIN BENCHMARK TABLE -->"
END = "<!-- END BENCHMARK TABLE -->"

# Targets for keras_stable / built-in, checked on compiled (XLA) rows.
TARGETS = {"cross_entropy": 1.0, "norm": 1.05, "softmax": 1.05}


# --------------------------------------------------------------------------
# Sizes. S is small enough for --quick; M is the size quoted in the issue.

NORM_SIZES = {"S": (1024, 128), "M": (8192, 512), "L": (32768, 512)}
SOFTMAX_SIZES = {"S": (512, 1000), "M": (4096, 1000), "L": (16384, 1000)}
SPARSE_SIZES = {"S": (256, 8192), "M": (1024, 32000), "L": (4096, 32000)}
ELEMENTWISE_SIZES = {"S": (1024, 128), "M": (8192, 512), "L": (32768, 512)}
TASK_SIZES = {"S": (1024, 8), "M": (65536, 8), "L": (262144, 8)}


class Case:
    """One benchmark row: keras_stable's callable and its built-ins.

    `build(shape, dtype, rng)` returns `(args, diff)`: NumPy arrays and the
    index of the argument to differentiate. `ours` and each built-in are
    factories `f(backend_modules) -> callable(*args)`, or `None` when the
    counterpart does not exist on this backend. The first built-in that
    exists is the primary one.
    """

    def __init__(self, name, kind, group, sizes, build, ours, builtins):
        self.name = name
        self.kind = kind
        self.group = group
        self.sizes = sizes
        self.build = build
        self.ours = ours
        self.builtins = builtins


def _logits(shape, dtype, rng):
    return (3.0 * rng.standard_normal(shape)).astype("float32")


def build_x(shape, dtype, rng):
    return [rng.standard_normal(shape).astype("float32")], 0


def build_positive(shape, dtype, rng):
    return [rng.uniform(0.1, 2.0, shape).astype("float32")], 0


def build_pair(shape, dtype, rng):
    a = rng.standard_normal(shape).astype("float32")
    b = rng.standard_normal(shape).astype("float32")
    return [a, b], 0


def build_divide(shape, dtype, rng):
    a = rng.standard_normal(shape).astype("float32")
    b = rng.uniform(0.5, 2.0, shape).astype("float32")
    return [a, b], 0


def build_dense_ce(shape, dtype, rng):
    labels = np.eye(shape[-1], dtype="float32")[
        rng.integers(0, shape[-1], shape[:-1])
    ]
    return [labels, _logits(shape, dtype, rng)], 1


def build_sparse_ce(shape, dtype, rng):
    labels = rng.integers(0, shape[-1], shape[:-1]).astype("int32")
    return [labels, _logits(shape, dtype, rng)], 1


def build_binary_ce(shape, dtype, rng):
    labels = rng.integers(0, 2, shape).astype("float32")
    return [labels, _logits(shape, dtype, rng)], 1


def build_task(shape, dtype, rng):
    y_true = rng.standard_normal(shape).astype("float32")
    y_pred = rng.standard_normal(shape).astype("float32")
    return [y_true, y_pred], 1


def _cls(module, name, *args, **kwargs):
    """Factory for a keras_stable class, or None if it does not exist yet."""

    def factory(m):
        cls = getattr(getattr(m.ks, module), name, None)
        if cls is None:
            return None
        return cls(*args, **kwargs)

    factory.missing = lambda m: getattr(getattr(m.ks, module), name, None) is None
    factory.label = f"keras_stable.{module}.{name}"
    return factory


def _tf_only(make):
    def factory(m):
        return make(m) if m.backend == "tensorflow" else None

    return factory


def cases():
    K = lambda m: m.keras  # noqa: E731
    ops_cases = [
        Case(
            "safe_norm(axis=-1)", "op", "norm", NORM_SIZES, build_x,
            lambda m: lambda x: m.ks.ops.safe_norm(x, axis=-1),
            {
                "tf.norm": _tf_only(lambda m: lambda x: m.tf.norm(x, axis=-1)),
                "keras.ops.norm": lambda m: lambda x: K(m).ops.norm(x, axis=-1),
            },
        ),
        Case(
            "l2_normalize", "op", "norm", NORM_SIZES, build_x,
            lambda m: lambda x: m.ks.ops.l2_normalize(x, axis=-1),
            {
                "tf.math.l2_normalize": _tf_only(
                    lambda m: lambda x: m.tf.math.l2_normalize(x, axis=-1)
                ),
                "keras.ops.normalize": lambda m: lambda x: K(m).ops.normalize(
                    x, axis=-1
                ),
            },
        ),
        Case(
            "cosine_similarity", "op", "norm", NORM_SIZES, build_pair,
            lambda m: lambda a, b: m.ks.ops.cosine_similarity(a, b),
            {
                "keras.losses.cosine_similarity": lambda m: lambda a, b: (
                    K(m).losses.cosine_similarity(a, b)
                ),
            },
        ),
        Case(
            "softmax", "op", "softmax", SOFTMAX_SIZES, build_x,
            lambda m: lambda x: m.ks.ops.softmax(x),
            {
                "tf.nn.softmax": _tf_only(lambda m: lambda x: m.tf.nn.softmax(x)),
                "keras.ops.softmax": lambda m: lambda x: K(m).ops.softmax(x),
            },
        ),
        Case(
            "log_softmax", "op", "softmax", SOFTMAX_SIZES, build_x,
            lambda m: lambda x: m.ks.ops.log_softmax(x),
            {
                "tf.nn.log_softmax": _tf_only(
                    lambda m: lambda x: m.tf.nn.log_softmax(x)
                ),
                "keras.ops.log_softmax": lambda m: lambda x: K(m).ops.log_softmax(x),
            },
        ),
        Case(
            "logsumexp", "op", "softmax", SOFTMAX_SIZES, build_x,
            lambda m: lambda x: m.ks.ops.logsumexp(x),
            {
                "tf.reduce_logsumexp": _tf_only(
                    lambda m: lambda x: m.tf.reduce_logsumexp(x, axis=-1)
                ),
                "keras.ops.logsumexp": lambda m: lambda x: K(m).ops.logsumexp(
                    x, axis=-1
                ),
            },
        ),
        Case(
            "softmax_cross_entropy", "op", "cross_entropy", SOFTMAX_SIZES,
            build_dense_ce,
            lambda m: lambda y, x: m.ks.ops.softmax_cross_entropy(y, x),
            {
                "tf.nn.softmax_cross_entropy_with_logits": _tf_only(
                    lambda m: lambda y, x: m.tf.nn.softmax_cross_entropy_with_logits(
                        labels=y, logits=x
                    )
                ),
                "keras.losses.categorical_crossentropy": lambda m: lambda y, x: (
                    K(m).losses.categorical_crossentropy(y, x, from_logits=True)
                ),
            },
        ),
        Case(
            "sparse_softmax_cross_entropy", "op", "cross_entropy", SPARSE_SIZES,
            build_sparse_ce,
            lambda m: lambda y, x: m.ks.ops.sparse_softmax_cross_entropy(y, x),
            {
                "tf.nn.sparse_softmax_cross_entropy_with_logits": _tf_only(
                    lambda m: lambda y, x: (
                        m.tf.nn.sparse_softmax_cross_entropy_with_logits(
                            labels=y, logits=x
                        )
                    )
                ),
                "keras.losses.sparse_categorical_crossentropy": lambda m: (
                    lambda y, x: K(m).losses.sparse_categorical_crossentropy(
                        y, x, from_logits=True
                    )
                ),
                "plain logsumexp - take_along_axis": lambda m: lambda y, x: (
                    K(m).ops.logsumexp(x, axis=-1)
                    - K(m).ops.squeeze(
                        K(m).ops.take_along_axis(
                            x, K(m).ops.expand_dims(y, -1), axis=-1
                        ),
                        -1,
                    )
                ),
            },
        ),
        Case(
            "sigmoid_cross_entropy", "op", "cross_entropy", ELEMENTWISE_SIZES,
            build_binary_ce,
            lambda m: lambda y, x: m.ks.ops.sigmoid_cross_entropy(y, x),
            {
                "tf.nn.sigmoid_cross_entropy_with_logits": _tf_only(
                    lambda m: lambda y, x: m.tf.nn.sigmoid_cross_entropy_with_logits(
                        labels=y, logits=x
                    )
                ),
                "keras.ops.binary_crossentropy": lambda m: lambda y, x: (
                    K(m).ops.binary_crossentropy(y, x, from_logits=True)
                ),
            },
        ),
        Case(
            "safe_sqrt", "op", "elementwise", ELEMENTWISE_SIZES, build_positive,
            lambda m: lambda x: m.ks.ops.safe_sqrt(x),
            {"keras.ops.sqrt": lambda m: lambda x: K(m).ops.sqrt(x)},
        ),
        Case(
            "safe_divide", "op", "elementwise", ELEMENTWISE_SIZES, build_divide,
            lambda m: lambda a, b: m.ks.ops.safe_divide(a, b),
            {"keras.ops.divide": lambda m: lambda a, b: K(m).ops.divide(a, b)},
        ),
        Case(
            "masked_task_distance", "op", "norm", TASK_SIZES, build_task,
            lambda m: lambda t, p: m.ks.ops.masked_task_distance(t, p),
            {
                "keras.ops.norm(t - p)": lambda m: lambda t, p: K(m).ops.norm(
                    t - p, axis=-1
                ),
            },
        ),
    ]
    layer_cases = [
        Case(
            "layers.StableSoftmax", "layer", "softmax", SOFTMAX_SIZES, build_x,
            _cls("layers", "StableSoftmax"),
            {"keras.layers.Softmax": lambda m: K(m).layers.Softmax()},
        ),
        Case(
            "layers.LogSoftmax", "layer", "softmax", SOFTMAX_SIZES, build_x,
            _cls("layers", "LogSoftmax"),
            {
                "keras.layers.Activation('log_softmax')": lambda m: (
                    K(m).layers.Activation("log_softmax")
                )
            },
        ),
        Case(
            "layers.SafeNorm", "layer", "norm", NORM_SIZES, build_x,
            _cls("layers", "SafeNorm"),
            {"keras.ops.norm": lambda m: lambda x: K(m).ops.norm(x, axis=-1)},
        ),
        Case(
            "layers.L2Normalize", "layer", "norm", NORM_SIZES, build_x,
            _cls("layers", "L2Normalize"),
            {
                "keras.layers.UnitNormalization": lambda m: (
                    K(m).layers.UnitNormalization()
                )
            },
        ),
    ]
    loss_cases = [
        Case(
            "losses.StableSoftmaxCrossEntropy", "loss", "cross_entropy",
            SOFTMAX_SIZES, build_dense_ce,
            _cls("losses", "StableSoftmaxCrossEntropy"),
            {
                "keras.losses.CategoricalCrossentropy": lambda m: (
                    K(m).losses.CategoricalCrossentropy(from_logits=True)
                )
            },
        ),
        Case(
            "losses.StableSparseSoftmaxCrossEntropy", "loss", "cross_entropy",
            SPARSE_SIZES, build_sparse_ce,
            _cls("losses", "StableSparseSoftmaxCrossEntropy"),
            {
                "keras.losses.SparseCategoricalCrossentropy": lambda m: (
                    K(m).losses.SparseCategoricalCrossentropy(from_logits=True)
                )
            },
        ),
        Case(
            "losses.StableSigmoidCrossEntropy", "loss", "cross_entropy",
            ELEMENTWISE_SIZES, build_binary_ce,
            _cls("losses", "StableSigmoidCrossEntropy"),
            {
                "keras.losses.BinaryCrossentropy": lambda m: (
                    K(m).losses.BinaryCrossentropy(from_logits=True)
                )
            },
        ),
        Case(
            "losses.MaskedMultiTaskDistance", "loss", "norm", TASK_SIZES,
            build_task,
            _cls("losses", "MaskedMultiTaskDistance"),
            {
                "mean(keras.ops.norm(t - p))": lambda m: lambda t, p: K(m).ops.mean(
                    K(m).ops.norm(t - p, axis=-1)
                )
            },
        ),
    ]
    return ops_cases + layer_cases + loss_cases


# --------------------------------------------------------------------------
# One backend, in this process.


class Modules:
    pass


def _import_backend(backend):
    os.environ["KERAS_BACKEND"] = backend
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras

    import keras_stable

    m = Modules()
    m.backend = backend
    m.keras = keras
    m.ks = keras_stable
    if backend == "tensorflow":
        import tensorflow as tf

        m.tf = tf
    if backend == "jax":
        import jax

        m.jax = jax
    return m


def _device(m):
    if m.backend == "tensorflow":
        gpus = m.tf.config.list_physical_devices("GPU")
        return "GPU:0" if gpus else "CPU:0"
    return str(m.jax.devices()[0]).replace(" ", "")


class Step:
    """A compiled forward+backward step for one candidate."""

    def __init__(self, m, fn, args, diff, mode):
        self.m = m
        self.mode = mode
        self.error = None
        keras = m.keras
        out = fn(*args)  # eager call: output shape for the cotangent
        shape = tuple(keras.ops.shape(out))
        rng = np.random.default_rng(0)
        cot = rng.standard_normal(shape).astype("float32")
        self.cot = keras.ops.convert_to_tensor(cot)
        self.args = args
        self.memory_bytes = None
        self.flops = None
        self.bytes_accessed = None
        if m.backend == "tensorflow":
            tf = m.tf

            def step(cot, *args):
                with tf.GradientTape() as tape:
                    tape.watch(args[diff])
                    out = tf.cast(fn(*args), tf.float32)
                    obj = tf.reduce_sum(out * cot)
                return obj, tape.gradient(obj, args[diff])

            self.fn = tf.function(step, jit_compile=(mode == "xla"))
            t0 = time.perf_counter()
            res = self.fn(self.cot, *args)
            res[0].numpy()
            self.compile_s = time.perf_counter() - t0
        else:
            jax = m.jax

            def objective(x, cot, *args):
                args = list(args)
                args[diff] = x
                out = fn(*args).astype("float32")
                return (out * cot).sum()

            def step(cot, *args):
                rest = list(args)
                return jax.value_and_grad(objective)(args[diff], cot, *rest)

            t0 = time.perf_counter()
            compiled = jax.jit(step).lower(self.cot, *args).compile()
            self.compile_s = time.perf_counter() - t0
            self.fn = compiled
            # XLA's static cost model of the compiled step: a profile that
            # does not depend on the machine's load.
            try:
                ca = compiled.cost_analysis()
                ca = ca[0] if isinstance(ca, (list, tuple)) else ca
                self.flops = float(ca.get("flops", 0.0))
                self.bytes_accessed = float(ca.get("bytes accessed", 0.0))
            except Exception:  # noqa: BLE001
                pass
            try:
                ma = compiled.memory_analysis()
                self.memory_bytes = int(ma.temp_size_in_bytes) + int(
                    ma.output_size_in_bytes
                )
            except Exception:  # noqa: BLE001 - not every platform reports it
                self.memory_bytes = None
            jax.block_until_ready(self.fn(self.cot, *args))

    def __call__(self):
        res = self.fn(self.cot, *self.args)
        if self.m.backend == "tensorflow":
            res[0].numpy()
        else:
            self.m.jax.block_until_ready(res)
        return res

    def measure_memory(self, device):
        if self.m.backend != "tensorflow":
            return
        tf = self.m.tf
        try:
            before = tf.config.experimental.get_memory_info(device)["current"]
            tf.config.experimental.reset_memory_stats(device)
            res = self()
            peak = tf.config.experimental.get_memory_info(device)["peak"]
            del res
            self.memory_bytes = peak - before
        except Exception:  # noqa: BLE001
            self.memory_bytes = None


def _to_tensors(m, arrays, dtype, diff):
    ops = m.keras.ops
    out = []
    for i, a in enumerate(arrays):
        t = ops.convert_to_tensor(a)
        if a.dtype.kind == "f" and (i == diff or dtype != "float32"):
            t = ops.cast(t, dtype)
        out.append(t)
    return out


def _callable(m, factory):
    obj = factory(m)
    if obj is None:
        return None
    return obj


def run_backend(backend, opts, flush=None):
    """Runs every selected row on `backend`; `flush(partial)` after each."""
    m = _import_backend(backend)
    device = _device(m)
    results = []
    notes = []

    def partial():
        return {
            "backend": backend,
            "device": device,
            "versions": _versions(m),
            "results": results,
            "notes": notes,
        }

    pattern = re.compile(opts.rows) if opts.rows else None
    rng_order = random.Random(1234)
    for case in cases():
        if pattern and not pattern.search(case.name):
            continue
        missing = getattr(case.ours, "missing", None)
        if missing is not None and missing(m):
            notes.append(
                f"{case.name}: skipped, {case.ours.label} does not exist yet."
            )
            continue
        for size in opts.sizes:
            shape = case.sizes[size]
            for dtype in opts.dtypes:
                rng = np.random.default_rng(0)
                arrays, diff = case.build(shape, dtype, rng)
                args = _to_tensors(m, arrays, dtype, diff)
                for mode in opts.modes.get(backend, MODES[backend]):
                    results.extend(
                        _run_row(m, case, size, shape, dtype, mode, args, diff,
                                 opts, device, rng_order, notes)
                    )
                del args
            if flush is not None:
                flush(partial())
    return partial()


def _versions(m):
    v = {"keras": m.keras.__version__}
    if m.backend == "tensorflow":
        v["tensorflow"] = m.tf.__version__
    else:
        v["jax"] = m.jax.__version__
    return v


def _run_row(m, case, size, shape, dtype, mode, args, diff, opts, device,
             rng_order, notes):
    label = f"{case.name} {size} {dtype} {m.backend}/{mode}"
    candidates = [("keras_stable", case.ours)] + list(case.builtins.items())
    steps = {}
    errors = {}
    for name, factory in candidates:
        try:
            fn = _callable(m, factory)
            if fn is None:
                continue
            steps[name] = Step(m, fn, args, diff, mode)
        except Exception as e:  # noqa: BLE001 - record and go on
            errors[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
    if "keras_stable" not in steps:
        notes.append(f"{label}: keras_stable failed: {errors.get('keras_stable')}")
        return []
    for name, err in errors.items():
        notes.append(f"{label}: {name} failed: {err}")
    names = list(steps)
    # Warm-up, then calibrate how many calls make one sample.
    for _ in range(opts.warmup):
        for name in names:
            steps[name]()
    t0 = time.perf_counter()
    steps[names[-1]]()
    one = max(time.perf_counter() - t0, 1e-6)
    number = max(1, int(opts.min_sample_s / one))
    samples = {name: [] for name in names}
    for _ in range(opts.reps):
        order = names[:]
        rng_order.shuffle(order)
        for name in order:
            t0 = time.perf_counter()
            for _ in range(number):
                steps[name]()
            samples[name].append((time.perf_counter() - t0) / number)
    for name in names:
        steps[name].measure_memory(device)
    ours = samples["keras_stable"]
    rows = []
    for name in names:
        s = samples[name]
        ratios = [a / b for a, b in zip(ours, s)]
        rows.append(
            {
                "case": case.name,
                "kind": case.kind,
                "group": case.group,
                "size": size,
                "shape": list(shape),
                "dtype": dtype,
                "backend": m.backend,
                "mode": mode,
                "candidate": name,
                "median_ms": 1e3 * statistics.median(s),
                "ratio": statistics.median(ratios),
                "compile_s": steps[name].compile_s,
                "memory_bytes": steps[name].memory_bytes,
                "flops": steps[name].flops,
                "bytes_accessed": steps[name].bytes_accessed,
                "reps": opts.reps,
                "number": number,
            }
        )
    print(
        f"  {label}: "
        + ", ".join(
            f"{r['candidate']} {r['median_ms']:.2f} ms" for r in rows
        ),
        file=sys.stderr,
        flush=True,
    )
    return rows


# --------------------------------------------------------------------------
# Reporting.


def _mb(b):
    return "n/a" if b is None else f"{b / 2**20:.1f}"


def _size(b):
    return f"{b / 2**20:.1f} MiB" if b >= 2**20 else f"{b / 2**10:.0f} KiB"


def _is_compiled(mode):
    return mode in ("xla", "jit")


def markdown(all_results, opts):
    lines = []
    meta = []
    for r in all_results:
        v = ", ".join(f"{k} {val}" for k, val in r["versions"].items())
        meta.append(f"{r['backend']} on {r['device']} ({v})")
    lines.append(
        f"Measured by `python benchmarks/run.py {' '.join(opts.argv)}` on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: "
        + "; ".join(meta)
        + f". {opts.reps} interleaved rounds after {opts.warmup} warm-up calls;"
        " forward + backward; times are medians, `ratio` is the median of the"
        " per-round ratios keras_stable / built-in (below 1 = keras_stable is"
        " faster). Memory: TF, measured peak minus current bytes around one"
        " call; JAX, XLA's compiled temp + output bytes (`memory_analysis()`)."
    )
    lines.append("")
    lines.append(
        "| row | size | dtype | backend / mode | built-in | built-in ms "
        "| keras_stable ms | ratio | built-in MiB | keras_stable MiB "
        "| compile s (built-in / ours) | target |"
    )
    lines.append("|" + "---|" * 12)
    for res in all_results:
        rows = res["results"]
        ours = {
            (r["case"], r["size"], r["dtype"], r["mode"]): r
            for r in rows
            if r["candidate"] == "keras_stable"
        }
        for r in rows:
            if r["candidate"] == "keras_stable":
                continue
            o = ours[(r["case"], r["size"], r["dtype"], r["mode"])]
            target = TARGETS.get(r["group"])
            status = ""
            if target is not None and _is_compiled(r["mode"]):
                ok_t = r["ratio"] <= target
                extra = (
                    None
                    if o["memory_bytes"] is None or r["memory_bytes"] is None
                    else o["memory_bytes"] - r["memory_bytes"]
                )
                status = (
                    f"≤{target:.2f}x: "
                    + ("met" if ok_t else "**missed**")
                    + (
                        ""
                        if extra is None or extra <= 0
                        else f", **memory +{_size(extra)}**"
                    )
                )
            shape = "×".join(str(d) for d in r["shape"])
            lines.append(
                f"| {r['case']} | {r['size']} {shape} | {r['dtype']} "
                f"| {r['backend']} / {r['mode']} | `{r['candidate']}` "
                f"| {r['median_ms']:.2f} | {o['median_ms']:.2f} "
                f"| {r['ratio']:.2f} | {_mb(r['memory_bytes'])} "
                f"| {_mb(o['memory_bytes'])} "
                f"| {r['compile_s']:.2f} / {o['compile_s']:.2f} | {status} |"
            )
    profile = []
    for res in all_results:
        rows = res["results"]
        ours = {
            (r["case"], r["size"], r["dtype"], r["mode"]): r
            for r in rows
            if r["candidate"] == "keras_stable"
        }
        for r in rows:
            o = ours[(r["case"], r["size"], r["dtype"], r["mode"])]
            if r is o or not r.get("bytes_accessed") or not o.get("bytes_accessed"):
                continue
            profile.append(
                f"| {r['case']} | {r['size']} | {r['dtype']} "
                f"| {r['backend']} / {r['mode']} | `{r['candidate']}` "
                f"| {r['bytes_accessed'] / 2**20:.1f} "
                f"| {o['bytes_accessed'] / 2**20:.1f} "
                f"| {o['bytes_accessed'] / r['bytes_accessed']:.2f} "
                f"| {r['flops'] / 1e6:.1f} | {o['flops'] / 1e6:.1f} |"
            )
    if profile:
        lines.append("")
        lines.append(
            "XLA's cost model of the same compiled steps (JAX "
            "`compiled.cost_analysis()`: bytes read and written by all "
            "kernels, and flops), independent of the machine's load:"
        )
        lines.append("")
        lines.append(
            "| row | size | dtype | backend / mode | built-in "
            "| built-in MiB accessed | keras_stable MiB accessed | ratio "
            "| built-in Mflop | keras_stable Mflop |"
        )
        lines.append("|" + "---|" * 10)
        lines.extend(profile)
    notes = [n for res in all_results for n in res["notes"]]
    if notes:
        lines.append("")
        lines.append("Notes:")
        lines.append("")
        for n in sorted(set(notes)):
            lines.append(f"- {n}")
    return "\n".join(lines) + "\n"


def write_outputs(all_results, opts, quiet=False):
    text = markdown(all_results, opts)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(all_results, f, indent=1)
    if opts.out:
        path = opts.out
        if os.path.exists(path) and BEGIN in open(path).read():
            old = open(path).read()
            head, rest = old.split(BEGIN, 1)
            _, tail = rest.split(END, 1)
            text_out = head + BEGIN + "\n" + text + END + tail
        else:
            text_out = BEGIN + "\n" + text + END + "\n"
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            f.write(text_out)
        if not quiet:
            print(f"wrote {path}", file=sys.stderr)
    else:
        print(text)


# --------------------------------------------------------------------------
# Command line.


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="all",
                   choices=("all",) + BACKENDS,
                   help="'all' re-runs this script once per backend")
    p.add_argument("--modes", default=None,
                   help="comma list among graph,xla (TF) and jit (JAX)")
    p.add_argument("--sizes", default=None, help="comma list of S,M,L")
    p.add_argument("--dtypes", default="float32",
                   help="comma list, e.g. float32,bfloat16,float16")
    p.add_argument("--reps", type=int, default=None,
                   help="interleaved rounds (samples per candidate)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--min-sample-s", type=float, default=None,
                   help="calls are repeated until one sample lasts this long")
    p.add_argument("--rows", default=None, help="regex on row names")
    p.add_argument("--quick", action="store_true",
                   help="size S, compiled modes (xla, jit), few rounds: under "
                        "two minutes on 2 CPU cores")
    p.add_argument("--out", default=None,
                   help="Markdown file; replaced between the table markers "
                        "if it has them, else written whole")
    p.add_argument("--json", default=None, help="raw results as JSON")
    opts = p.parse_args(argv)
    opts.argv = list(argv)
    if opts.sizes is None:
        opts.sizes = "S" if opts.quick else "S,M,L"
    opts.sizes = [s.strip() for s in opts.sizes.split(",") if s.strip()]
    opts.dtypes = [d.strip() for d in opts.dtypes.split(",") if d.strip()]
    if opts.reps is None:
        opts.reps = 5 if opts.quick else 15
    if opts.min_sample_s is None:
        opts.min_sample_s = 0.005 if opts.quick else 0.02
    if opts.quick:
        opts.warmup = min(opts.warmup, 1)
    modes = {b: MODES[b] for b in BACKENDS}
    if opts.quick and not opts.modes:
        opts.modes = "xla,jit"
    if opts.modes:
        wanted = {x.strip() for x in opts.modes.split(",")}
        modes = {b: tuple(x for x in ms if x in wanted) for b, ms in modes.items()}
    opts.modes = modes
    return opts


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    opts = parse_args(argv)
    if opts.backend != "all":
        print(f"== {opts.backend}", file=sys.stderr, flush=True)
        # Results are rewritten after every size, so a run cut short by a
        # timeout still leaves its table behind.
        flush = (lambda r: write_outputs([r], opts, quiet=True)) if (
            opts.out or opts.json) else None
        write_outputs([run_backend(opts.backend, opts, flush)], opts)
        return 0
    all_results = []
    status = 0
    with tempfile.TemporaryDirectory() as tmp:
        for backend in BACKENDS:
            if not opts.modes.get(backend):
                continue
            if importlib.util.find_spec(_BACKEND_MODULE[backend]) is None:
                print(f"{backend}: not installed, skipped", file=sys.stderr)
                continue
            path = os.path.join(tmp, f"{backend}.json")
            child = [a for a in argv]
            child = _strip_options(child, ("--backend", "--out", "--json"))
            cmd = [sys.executable, os.path.abspath(__file__), "--backend",
                   backend, "--json", path] + child
            env = dict(os.environ, KERAS_BACKEND=backend)
            rc = subprocess.call(cmd, env=env, stdout=subprocess.DEVNULL)
            if rc != 0 or not os.path.exists(path):
                print(f"{backend}: failed with exit code {rc}", file=sys.stderr)
                status = 1
                continue
            with open(path) as f:
                all_results.extend(json.load(f))
    write_outputs(all_results, opts)
    return status


def _strip_options(argv, names):
    out = []
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in names:
            skip = True
            continue
        if any(a.startswith(n + "=") for n in names):
            continue
        out.append(a)
    return out


if __name__ == "__main__":
    sys.exit(main())
