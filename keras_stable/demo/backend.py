"""Choosing the demo's Keras backend, before Keras does any work.

Keras reads `KERAS_BACKEND` once, when it is first imported, and a process
cannot switch backends afterwards. So the backend is checked here before
anything trains: known, installed, and the one Keras was loaded with (else
the command line restarts the demo in a fresh interpreter).
"""

import importlib.util
import os
import subprocess
import sys

from keras_stable._launch import not_installed_message

BACKENDS = ("tensorflow", "jax", "torch")
_RESTARTED = "KERAS_STABLE_DEMO_RESTARTED"


class BackendMismatchError(RuntimeError):
    """Keras is already imported with a backend other than the one asked."""


class BackendNotInstalledError(RuntimeError):
    """The package of the backend asked for is not installed."""


def _loaded_backend():
    """The backend of an already imported Keras, or None."""
    if "keras" not in sys.modules:
        return None
    return sys.modules["keras"].config.backend()


def _installed(backend):
    # Each backend is the package of its name (and the setup.cfg extra of
    # its name installs it). find_spec, not an import: importing TensorFlow or torch takes seconds,
    # and the demo may restart in a fresh process anyway.
    return importlib.util.find_spec(backend) is not None


def _not_installed_message(backend):
    return not_installed_message(backend)


def select_backend(requested):
    """Makes `requested` the Keras backend, or says why it cannot.

    Sets `KERAS_BACKEND` when Keras is not imported yet. Returns the backend
    that will be used. Raises `ValueError` for an unknown backend,
    `BackendNotInstalledError` when its package is not installed, and
    `BackendMismatchError` when Keras is already imported with another
    backend (Keras cannot switch backends in a running process).
    """
    loaded = _loaded_backend()
    if requested is None:
        if loaded is not None:
            return loaded
        requested = os.environ.get("KERAS_BACKEND") or "tensorflow"
    if requested not in BACKENDS:
        raise ValueError(
            f"Unknown backend {requested!r} (from --backend or "
            f"KERAS_BACKEND): expected one of {', '.join(BACKENDS)}."
        )
    # Checked before any restart: the fresh interpreter would fail with an
    # ImportError traceback while importing Keras.
    if requested != loaded and not _installed(requested):
        raise BackendNotInstalledError(_not_installed_message(requested))
    if loaded is None:
        os.environ["KERAS_BACKEND"] = requested
        return requested
    if loaded != requested:
        raise BackendMismatchError(
            f"Keras is already imported with the {loaded!r} backend, and a "
            "process cannot switch backends; the demo was asked for "
            f"{requested!r}. Run `KERAS_BACKEND={requested} python -m "
            f"keras_stable.demo` in a fresh process."
        )
    return requested


def _restart_with_backend(backend, argv):
    """Runs the demo again in a fresh interpreter with KERAS_BACKEND set."""
    print(
        f"Keras was imported with the {_loaded_backend()!r} backend; "
        f"restarting the demo with KERAS_BACKEND={backend}.",
        flush=True,
    )
    env = dict(os.environ, KERAS_BACKEND=backend, **{_RESTARTED: "1"})
    command = [sys.executable, "-m", "keras_stable.demo", *argv]
    return subprocess.call(command, env=env)
