"""The measurement: compiled forward+backward steps, timed interleaved.

`run_backend` runs every selected row on the backend of this process. Each
row compiles one `Step` per candidate (keras_stable's callable and its
built-ins), warms them up, then times them in rounds, every candidate once
per round in a shuffled order, so that the ratios compare runs made under
the same machine load. The memory figure is measured (TensorFlow) or read
from XLA's buffer assignment (JAX); see `run.py`.
"""

import os
import random
import re
import statistics
import sys
import time

import numpy as np
from cases import cases

BACKENDS = ("tensorflow", "jax", "torch")
MODES = {"tensorflow": ("graph", "xla"), "jax": ("jit",), "torch": ("eager",)}


_MEMORY_SOURCE = {
    "tensorflow": "tf.config.experimental.get_memory_info",
    "jax": "compiled.memory_analysis()",
}


class Modules:
    pass


def _import_backend(backend):
    os.environ["KERAS_BACKEND"] = backend
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if backend == "tensorflow":
        # TF keeps the CPU allocator statistics of the memory column
        # (`get_memory_info`) only with its BFC allocator on the CPU (or
        # oneDNN's, not on every install). TF reads the variable once, when
        # it starts: this is before the first import of TF in this process.
        os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
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
    if backend == "torch":
        import torch

        m.torch = torch
    return m


def _device(m):
    if m.backend == "tensorflow":
        gpus = m.tf.config.list_physical_devices("GPU")
        return "GPU:0" if gpus else "CPU:0"
    if m.backend == "torch":
        return "cuda:0" if m.torch.cuda.is_available() else "cpu"
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
        elif m.backend == "torch":
            torch = m.torch

            def step(cot, *args):
                args = list(args)
                x = args[diff].detach().requires_grad_(True)
                args[diff] = x
                obj = (fn(*args).float() * cot).sum()
                (grad,) = torch.autograd.grad(obj, x)
                return obj.detach(), grad

            self.fn = step
            t0 = time.perf_counter()
            self()
            self.compile_s = time.perf_counter() - t0  # eager: the first call
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
            except Exception:  # noqa: BLE001, S110 - a profile is optional
                pass
            try:
                ma = compiled.memory_analysis()
                self.memory_bytes = int(ma.temp_size_in_bytes) + int(ma.output_size_in_bytes)
            except Exception:  # noqa: BLE001 - not every platform reports it
                self.memory_bytes = None
            jax.block_until_ready(self.fn(self.cot, *args))

    def __call__(self):
        res = self.fn(self.cot, *self.args)
        if self.m.backend == "tensorflow":
            res[0].numpy()
        elif self.m.backend == "torch":
            res[0].item()  # waits for the device
        else:
            self.m.jax.block_until_ready(res)
        return res

    def measure_memory(self, device):
        if self.m.backend == "torch":
            # Only CUDA keeps allocator statistics; on the CPU: n/a.
            torch = self.m.torch
            if torch.cuda.is_available():
                before = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                res = self()
                self.memory_bytes = torch.cuda.max_memory_allocated() - before
                del res
            return
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


def run_backend(backend, opts, flush=None):
    """Runs every selected row on `backend`; `flush(partial)` after each.

    Returns the backend's results: `results` (one dict per candidate and
    row), `notes` for the table, and `failures`, what went wrong on
    keras_stable's side (the exit status of `run.py`)."""
    preloaded = backend == "tensorflow" and "tensorflow" in sys.modules
    m = _import_backend(backend)
    device = _device(m)
    results = []
    notes = []
    failures = []
    if preloaded:
        notes.append("TF was imported before the benchmark set TF_CPU_ALLOCATOR_USE_BFC.")

    def partial():
        return {
            "backend": backend,
            "device": device,
            "versions": _versions(m),
            "results": results,
            "notes": notes,
            "failures": failures,
        }

    pattern = re.compile(opts.rows) if opts.rows else None
    rng_order = random.Random(1234)
    for case in cases(quick=opts.quick):
        if pattern and not pattern.search(case.name):
            continue
        missing = getattr(case.ours, "missing", None)
        if missing is not None and missing(m):
            notes.append(f"{case.name}: skipped, {case.ours.label} does not exist yet.")
            if opts.quick:
                failures.append(notes[-1])
            continue
        for size in opts.sizes:
            shape = case.sizes[size]
            for dtype in opts.dtypes:
                rng = np.random.default_rng(0)
                arrays, diff = case.build(shape, dtype, rng)
                args = _to_tensors(m, arrays, dtype, diff)
                for mode in opts.modes.get(backend, MODES[backend]):
                    results.extend(
                        _run_row(
                            m,
                            case,
                            size,
                            shape,
                            dtype,
                            mode,
                            args,
                            diff,
                            opts,
                            device,
                            rng_order,
                            notes,
                            failures,
                        )
                    )
                del args
            if flush is not None:
                flush(partial())
    return partial()


def _versions(m):
    v = {"keras": m.keras.__version__}
    if m.backend == "tensorflow":
        v["tensorflow"] = m.tf.__version__
    elif m.backend == "torch":
        v["torch"] = m.torch.__version__
    else:
        v["jax"] = m.jax.__version__
    return v


def _run_row(
    m, case, size, shape, dtype, mode, args, diff, opts, device, rng_order, notes, failures
):
    label = f"{case.name} {size} {dtype} {m.backend}/{mode}"
    candidates = [("keras_stable", case.ours)] + list(case.builtins.items())
    steps = {}
    errors = {}
    for name, factory in candidates:
        try:
            fn = factory(m)
            if fn is None:
                continue
            steps[name] = Step(m, fn, args, diff, mode)
        except Exception as e:  # noqa: BLE001 - record and go on
            errors[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
    if "keras_stable" not in steps:
        notes.append(f"{label}: keras_stable failed: {errors.get('keras_stable')}")
        failures.append(notes[-1])
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
    if m.backend in ("tensorflow", "jax") and steps["keras_stable"].memory_bytes is None:
        why = _MEMORY_SOURCE[m.backend]
        if m.backend == "tensorflow":
            why += f", TF_CPU_ALLOCATOR_USE_BFC={os.environ.get('TF_CPU_ALLOCATOR_USE_BFC')}"
        notes.append(f"{label}: no memory figure ({why}).")
        if opts.quick:
            failures.append(notes[-1])
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
        f"  {label}: " + ", ".join(f"{r['candidate']} {r['median_ms']:.2f} ms" for r in rows),
        file=sys.stderr,
        flush=True,
    )
    return rows
