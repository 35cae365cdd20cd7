"""The demo's command line: `python -m keras_stable.demo`, `keras-stable-demo`.

Usage errors (bad arguments, a backend that is not installed or cannot be
selected, `--plot` without matplotlib) are one line on stderr and exit
status 2, never a traceback.
"""

import argparse
import os
import sys
import time

from keras_stable.demo.backend import _RESTARTED
from keras_stable.demo.backend import BACKENDS
from keras_stable.demo.backend import BackendMismatchError
from keras_stable.demo.backend import BackendNotInstalledError
from keras_stable.demo.backend import _restart_with_backend
from keras_stable.demo.backend import select_backend
from keras_stable.demo.report import _mode_label
from keras_stable.demo.report import format_table
from keras_stable.demo.report import save_plot
from keras_stable.demo.report import summary
from keras_stable.demo.training import MODES
from keras_stable.demo.training import run_all

DEFAULT_STEPS = 60


def _parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m keras_stable.demo",
        description=(
            "Train two small models with the plain Keras formulation and "
            "with keras_stable, and show which ones go NaN."
        ),
    )
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default=None,
        help="Keras backend (default: $KERAS_BACKEND, else tensorflow).",
    )
    parser.add_argument(
        "--steps",
        type=_positive_int,
        default=DEFAULT_STEPS,
        help=f"SGD steps per run (default: {DEFAULT_STEPS}).",
    )
    parser.add_argument(
        "--modes",
        type=_modes,
        default=None,
        help=(
            "comma-separated subset of 'eager,jit': eager runs use "
            "run_eagerly=True, jit runs jit_compile=True (default: both; "
            "'eager' only on torch, where jit_compile=True means "
            "torch.compile and takes minutes on a CPU)."
        ),
    )
    parser.add_argument(
        "--no-audit",
        dest="audit",
        action="store_false",
        help=(
            "skip the last section, which runs keras_stable.audit on the "
            "plain models to name the layer and the trap where they go NaN."
        ),
    )
    parser.add_argument(
        "--plot",
        metavar="FILE.png",
        default=None,
        help="save the loss curves to this file (needs matplotlib).",
    )
    return parser.parse_args(argv)


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _modes(text):
    modes = tuple(m.strip() for m in text.split(",") if m.strip())
    unknown = [m for m in modes if m not in MODES]
    if not modes or unknown:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated subset of {','.join(MODES)}, got {text!r}"
        )
    return modes


def audit_plain_models(modes):
    """The audit of both bug reports' plain models: which layer, which trap.

    `keras_stable.audit` reruns one batch of each plain scenario layer by
    layer, eagerly and (where the demo compiled) compiled, and names the
    first non-finite point in the forward and backward passes.
    """
    import keras_stable
    from keras_stable.demo.scenarios import _scenarios

    compiled = [m for m in modes if m != "eager"]
    audit_modes = ["eager"] + (["compiled"] if compiled else [])
    cases = [
        (f"{s['name']}: {s['plain'][0]}", s["model"](), *s["batch"](0), s["plain"][1]())
        for s in _scenarios()
    ]
    title = "Where the plain formulations go NaN (keras_stable.audit)"
    body = keras_stable.audit.audit_section(cases, modes=audit_modes)
    return f"{title}\n{'-' * len(title)}\n{body}"


def _have_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv=None):
    """Runs the demo; the entry point of `keras-stable-demo`.

    Args:
        argv: the command-line arguments, `sys.argv[1:]` when None. Only the
            command-line call (`argv=None`) may restart the demo in a fresh
            interpreter to switch the Keras backend.

    Returns:
        The exit status: 0 when every keras_stable run stayed finite, 1 when
        one did not, 2 for a usage error (including a backend that is not
        installed, or that cannot be selected because Keras is already
        imported with another one).
    """
    from_command_line = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parse_args(argv)
    if args.plot and not _have_matplotlib():
        print(
            "error: --plot needs matplotlib, which is not installed: `pip install matplotlib`.",
            file=sys.stderr,
        )
        return 2
    try:
        backend = select_backend(args.backend)
    except BackendMismatchError as error:
        if from_command_line and not os.environ.get(_RESTARTED):
            return _restart_with_backend(args.backend, argv)
        print(f"error: {error}", file=sys.stderr)
        return 2
    except (BackendNotInstalledError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # `python -m keras_stable.demo` and `keras-stable-demo` left Keras and
    # the rest of keras_stable unimported until the backend was chosen
    # (keras_stable._launch): import them now, with it.
    import keras_stable

    keras_stable._import_submodules()
    import keras

    modes = args.modes
    if modes is None:
        modes = ("eager",) if backend == "torch" else MODES
    print(
        f"keras_stable demo: Keras {keras.__version__}, backend {backend}, "
        f"{args.steps} SGD steps per run, "
        f"{' and '.join(_mode_label(m) for m in modes)}",
        flush=True,
    )
    if backend == "torch" and args.modes is None:
        print(
            "(on torch, jit_compile=True means torch.compile, which takes "
            "minutes on a CPU: add --modes eager,jit to include it)"
        )
    start = time.perf_counter()
    rows = run_all(args.steps, modes, out=lambda s: print(s, flush=True))
    print()
    print(format_table(rows))
    print()
    print(summary(rows, backend))
    if args.plot:
        save_plot(rows, args.plot)
        print(f"loss curves saved to {args.plot}")
    print(f"trained in {time.perf_counter() - start:.1f} s")
    if args.audit:
        print()
        print(audit_plain_models(modes))
    stable_failed = any(r["failure"] is not None for r in rows if r["formulation"] == "stable")
    return 1 if stable_failed else 0
