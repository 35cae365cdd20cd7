"""Runs Python code in a fresh interpreter and returns what it reports (private).

Round trips that matter across processes (a `.keras` file loaded where only
`import keras_stable` has run, a SavedModel served without keras_stable, a
`tf.distribute` strategy that needs logical devices configured before
TensorFlow initialises) cannot run inside the pytest process: it has already
imported Keras and its classes. `run_fresh` starts a new interpreter with the
requested `KERAS_BACKEND`, runs `code` there and returns the JSON object the
code passed to `report(...)`. Importing TensorFlow costs several seconds, so
tests batch all their checks for one scenario into one call.
"""

import json
import os
import subprocess
import sys
import textwrap

# Prepended to every script: `report(obj)` prints one tagged JSON line that
# `run_fresh` picks out of whatever else the process prints.
_PRELUDE = """
import json as _json
def report(obj):
    print("@@REPORT@@" + _json.dumps(obj), flush=True)
"""

_TAG = "@@REPORT@@"


def fresh_env(backend, **extra):
    """The environment for a child process on `backend`.

    The child inherits the parent's environment (so numerics match: same
    thread pools, same flags) and gets two host devices on JAX, as the pytest
    process does (tests/conftest.py), and quiet TensorFlow logs.
    """
    env = dict(os.environ)
    env["KERAS_BACKEND"] = backend
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_fresh(code, backend, cwd=None, timeout=240, env=None):
    """Runs `code` in a new Python process on `backend`; returns its report.

    Args:
        code: Python source. It may call `report(obj)` (a JSON-serializable
            object) once; that object is returned.
        backend: the `KERAS_BACKEND` of the child.
        cwd: working directory of the child (a temporary directory, so that
            the child imports the installed package, not a stray file).
        timeout: seconds before the child is killed and the test fails.
        env: extra environment variables.

    Returns:
        The reported object, or `None` if the code reported nothing.

    Raises:
        AssertionError: the child exited with a non-zero status; the message
            holds the tail of its output.
    """
    script = _PRELUDE + textwrap.dedent(code)
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=cwd,
        env=fresh_env(backend, **(env or {})),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"fresh {backend} process failed (exit {proc.returncode}):\n"
            f"--- stdout ---\n{proc.stdout[-4000:]}\n"
            f"--- stderr ---\n{proc.stderr[-6000:]}"
        )
    reports = [line[len(_TAG) :] for line in proc.stdout.splitlines() if line.startswith(_TAG)]
    return json.loads(reports[-1]) if reports else None
