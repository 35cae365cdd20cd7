#!/usr/bin/env python3
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
    PyTorch backend: `eager` (autograd, no compilation).

Memory:
    TensorFlow: peak minus current bytes of `tf.config.experimental.
    get_memory_info` around one call (works on CPU and GPU). It counts every
    buffer the call allocates, the returned gradient included.
    JAX: XLA's buffer assignment of the compiled step, `memory_analysis()`:
    temporary plus output bytes (what the call allocates beyond its inputs).
    A static figure, exact for XLA's allocation plan, not a measured peak.
    PyTorch: the CUDA allocator's peak minus current bytes around one call;
    n/a on the CPU, which keeps no allocator statistics.

Usage:
    python benchmarks/run.py --quick                 # the CI smoke test, ~1 min
    python benchmarks/run.py --sizes S,M --out docs/benchmarks.md
    python benchmarks/run.py --backend jax --dtypes float32,bfloat16,float16
    python benchmarks/run.py --rows "norm|softmax" --sizes M --reps 20

`--quick` is the smoke test that CI runs (`tests/run.sh`): one row per op
family (`QUICK` in `cases.py`), size S, the compiled modes (xla, jit) and
torch eager, 3 rounds. It exits with status 1 if a keras_stable candidate
fails, a quick row is missing or the TF or JAX memory figure is empty; any
run exits with status 1 if a keras_stable candidate fails.

With `--backend all` (the default) the script re-runs itself once per
backend in a subprocess (Keras picks its backend at import) and merges the
results into one Markdown table. Each backend process sets
`TF_CPU_ALLOCATOR_USE_BFC=true` (unless it is set) before TF starts, so that
TF keeps the CPU allocator statistics of the memory column.

This file is the command line only. The rows are in `cases_core.py`,
`cases_catalogue.py` and `cases_attention.py` (one function per op family,
built on `case.py`), put in order in `cases.py`, with their sizes and data
in `inputs.py` (attention's in `cases_attention.py`); the interleaved measurement is in `timing.py` and the tables in `report.py`.
"""

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

from report import write_outputs
from timing import BACKENDS
from timing import MODES
from timing import run_backend

_BACKEND_MODULE = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--backend",
        default="all",
        choices=("all",) + BACKENDS,
        help="'all' re-runs this script once per backend",
    )
    p.add_argument(
        "--modes", default=None, help="comma list among graph,xla (TF), jit (JAX) and eager (torch)"
    )
    p.add_argument("--sizes", default=None, help="comma list of S,M,L")
    p.add_argument("--dtypes", default="float32", help="comma list, e.g. float32,bfloat16,float16")
    p.add_argument(
        "--reps", type=int, default=None, help="interleaved rounds (samples per candidate)"
    )
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument(
        "--min-sample-s",
        type=float,
        default=None,
        help="calls are repeated until one sample lasts this long",
    )
    p.add_argument("--rows", default=None, help="regex on row names")
    p.add_argument(
        "--quick",
        action="store_true",
        help="the smoke test: one row per family, size S, xla, jit and torch eager, 3 rounds",
    )
    p.add_argument(
        "--out",
        default=None,
        help="Markdown file; replaced between the table markers if it has them, else written whole",
    )
    p.add_argument("--json", default=None, help="raw results as JSON")
    opts = p.parse_args(argv)
    opts.argv = list(argv)
    if opts.sizes is None:
        opts.sizes = "S" if opts.quick else "S,M,L"
    opts.sizes = [s.strip() for s in opts.sizes.split(",") if s.strip()]
    opts.dtypes = [d.strip() for d in opts.dtypes.split(",") if d.strip()]
    if opts.reps is None:
        opts.reps = 3 if opts.quick else 15
    if opts.min_sample_s is None:
        opts.min_sample_s = 0.002 if opts.quick else 0.02
    if opts.quick:
        opts.warmup = min(opts.warmup, 1)
    modes = {b: MODES[b] for b in BACKENDS}
    if opts.quick and not opts.modes:
        opts.modes = "xla,jit,eager"
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
        flush = (
            (lambda r: write_outputs([r], opts, quiet=True)) if (opts.out or opts.json) else None
        )
        result = run_backend(opts.backend, opts, flush)
        write_outputs([result], opts)
        return _report_failures(opts.backend, result["failures"])
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
            child = _strip_options(argv, ("--backend", "--out", "--json"))
            cmd = [
                sys.executable,
                os.path.abspath(__file__),
                "--backend",
                backend,
                "--json",
                path,
            ] + child
            env = dict(os.environ, KERAS_BACKEND=backend)
            t0 = time.perf_counter()
            rc = subprocess.call(cmd, env=env, stdout=subprocess.DEVNULL)
            print(f"== {backend}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
            if rc != 0:
                print(f"{backend}: exit code {rc}", file=sys.stderr)
                status = 1
            if os.path.exists(path):
                with open(path) as f:
                    all_results.extend(json.load(f))
    write_outputs(all_results, opts)
    return status


def _report_failures(backend, failures):
    for failure in failures:
        print(f"{backend} FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


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
