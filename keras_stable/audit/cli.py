"""`python -m keras_stable.audit MODEL.keras --data BATCH.npz`: the audit
from the command line.

Prints the report and exits with 0 when no value or gradient is NaN or inf,
1 when the audit found a trap, and 2 on bad input (a file that does not
load, a compiled loss that cannot be restored, data that does not fit the
model, an unknown backend), with a one-line error on stderr and no
traceback. `--import MODULE` (repeatable) imports the module that registers
the model's custom objects before loading.

`python -m keras_stable.audit --explain TRAP` prints the page a finding of
`TRAP` points to (a trap id such as `norm_at_zero`, or a page name such as
`distances`), as installed with the package, as plain text (`--markdown`:
the page's Markdown source), and exits with 0 (2 for an unknown name).

Keras is imported only once the arguments are read: `--backend` sets
`KERAS_BACKEND` first, so the command runs with only the backend it names
installed, and `--help` and `--explain` need no backend at all (see
`keras_stable._launch`). When Keras is already imported with another
backend, the command runs again in a fresh process.
"""

import argparse
import importlib.util
import os
import subprocess
import sys

from keras_stable._launch import not_installed_message
from keras_stable.audit.pages import explain_text
from keras_stable.audit.pages import page_names
from keras_stable.audit.pages import page_text
from keras_stable.audit.report import MODES
from keras_stable.audit.report import PROBES
from keras_stable.audit.report import TRAPS

BACKENDS = ("tensorflow", "jax", "torch")
PROG = "python -m keras_stable.audit"
_RESTARTED = "KERAS_STABLE_AUDIT_RESTARTED"

EXIT_CLEAN = 0
EXIT_FOUND = 1
EXIT_BAD_INPUT = 2


def _parser():
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Run a saved Keras model on a batch layer by layer, eagerly and "
            "compiled, and name the first layer whose value or gradient goes "
            "NaN or inf, with the trap and the keras_stable fix."
        ),
        epilog=(
            "The batch file holds arrays named x (or x.0, x.1, ... / x.<input "
            "name>) and, optionally, y (the labels; the model's compiled loss "
            "is then differentiated). keras_stable.callbacks.NaNAudit writes "
            "such files. Exit status: 0 clean, 1 a trap was found, 2 bad input."
        ),
    )
    parser.add_argument("model", nargs="?", help="the model, a .keras file")
    parser.add_argument("--data", help="the batch, a .npz file (required with a model)")
    parser.add_argument(
        "--explain",
        metavar="TRAP",
        default=None,
        help=(
            "print the page that explains TRAP (a trap id of the report, e.g. "
            "norm_at_zero, or a page: " + ", ".join(page_names()) + ") and exit"
        ),
    )
    parser.add_argument(
        "--markdown",
        action="store_true",
        help="with --explain: print the page's Markdown source instead of plain text",
    )
    parser.add_argument(
        "--stress",
        nargs="?",
        const="all",
        default=None,
        help=(
            "also run the stress probes: all of them, or a comma-separated "
            f"subset of {','.join(PROBES)}"
        ),
    )
    parser.add_argument(
        "--precision",
        choices=("mixed_float16", "mixed_bfloat16"),
        default=None,
        help=(
            "pre-flight for that policy from the float32 run: the layers whose "
            "activations or gradients (at a loss scale of 1) leave its range, "
            "every layer's headroom, and the steps the loss scale will skip"
        ),
    )
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        default=None,
        help="Keras backend (default: $KERAS_BACKEND, else tensorflow)",
    )
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help="comma-separated subset of eager,compiled (default: both)",
    )
    parser.add_argument(
        "--loss",
        default=None,
        help=(
            "the loss, if not the one the model was saved with: a Keras loss "
            "name (mse) or MODULE:FUNCTION, imported from the current directory "
            "(train:task_loss)"
        ),
    )
    parser.add_argument(
        "--import",
        dest="imports",
        metavar="MODULE",
        action="append",
        default=[],
        help=(
            "import MODULE (from the current directory or the installed "
            "packages) before loading: the module that registers the model's "
            "custom layers, losses or functions; repeatable"
        ),
    )
    parser.add_argument(
        "--unsafe",
        action="store_true",
        help=(
            "load the model with safe_mode=False: needed for Lambda layers, "
            "whose Python code is stored in the file; only for files you trust"
        ),
    )
    return parser


class _UsageError(Exception):
    pass


def _stress(value):
    if value is None:
        return False
    if value == "all":
        return True
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in PROBES]
    if unknown or not names:
        raise _UsageError(
            f"--stress: unknown probe(s) {unknown}; expected some of {','.join(PROBES)}"
        )
    return names


def _modes(value):
    modes = [mode.strip() for mode in value.split(",") if mode.strip()]
    if not modes or any(mode not in MODES for mode in modes):
        raise _UsageError(
            f"--modes: expected a comma-separated subset of {','.join(MODES)}, got {value!r}"
        )
    return modes


def _not_installed(backend):
    return not_installed_message(backend).rstrip(".")


def _import_keras(backend):
    """Imports Keras, with `backend` when it is not imported yet (None:
    Keras's own choice, `KERAS_BACKEND` or its config file), and the rest of
    keras_stable (its classes must be registered to load a model)."""
    if "keras" not in sys.modules:
        if backend is not None:
            if importlib.util.find_spec(backend) is None:
                raise _UsageError(_not_installed(backend))
            os.environ["KERAS_BACKEND"] = backend
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras_stable

    try:
        keras_stable._import_submodules()
    except ImportError as error:
        chosen = os.environ.get("KERAS_BACKEND") or "default"
        raise _UsageError(
            f"cannot import Keras with the {chosen} backend ({error}): pass "
            f"--backend {{{','.join(BACKENDS)}}} or set KERAS_BACKEND to an installed one"
        ) from error
    return sys.modules["keras"]


def _restart(backend, argv):
    """Runs the command again with KERAS_BACKEND set: Keras reads its
    backend once, when first imported, and keras_stable imported it."""
    if importlib.util.find_spec(backend) is None:
        raise _UsageError(_not_installed(backend))
    if os.environ.get(_RESTARTED):
        raise _UsageError(f"could not switch Keras to the {backend} backend")
    argv = list(argv)
    env = dict(os.environ, KERAS_BACKEND=backend, **{_RESTARTED: "1"})
    return subprocess.call([sys.executable, "-m", "keras_stable.audit", *argv], env=env)


def _import_modules(names):
    """`--import`: the modules that register the model's custom objects."""
    from keras_stable.audit.data import AuditInputError
    from keras_stable.audit.data import _first_line

    if names and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as error:  # noqa: BLE001 - any failure: a bad --import
            raise AuditInputError(f"--import {name}: {_first_line(error)}") from error


_CUSTOM_HINT = (
    "if the model uses custom objects, pass --import MODULE, the module that "
    "registers them (keras.saving.register_keras_serializable)"
)


def _load_model(path, unsafe, loss_given):
    """The model; a compiled loss that cannot be restored is an error
    (exit 2) unless `--loss` replaces it: the audit would differentiate
    something other than what the model trains on."""
    import keras

    from keras_stable.audit.data import AuditInputError
    from keras_stable.audit.data import _first_line

    if not os.path.isfile(path):
        raise AuditInputError(f"no such model file: {path}")
    if not path.endswith(".keras"):
        raise AuditInputError(
            f"{path} is not a .keras file (save the model with model.save('model.keras'))"
        )
    try:
        return keras.saving.load_model(path, safe_mode=not unsafe)
    except Exception as error:  # noqa: BLE001 - any failure: the file does not load
        if not unsafe and "safe_mode" in str(error):
            raise AuditInputError(
                f"cannot load the model {path}: it holds Python code (a Lambda layer); "
                "rerun with --unsafe if you trust the file"
            ) from error
        try:
            model = keras.saving.load_model(path, safe_mode=not unsafe, compile=False)
        except Exception:  # noqa: BLE001 - report the first error
            model = None
        message = _first_line(error)
        if model is None:
            raise AuditInputError(
                f"cannot load the model {path}: {message}; {_CUSTOM_HINT}"
            ) from error
        if not loss_given:
            raise AuditInputError(
                f"the compiled loss of {path} cannot be restored ({message}); "
                f"{_CUSTOM_HINT}, or pass --loss MODULE:FUNCTION"
            ) from error
        return model


def _loss(spec):
    """`--loss`: a Keras loss name, or `module:attribute` to import."""
    from keras_stable.audit.data import AuditInputError
    from keras_stable.audit.data import _first_line

    if spec is None:
        return None
    if ":" not in spec:
        return spec
    module_name, _, attribute = spec.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
        return getattr(module, attribute)
    except Exception as error:  # noqa: BLE001 - any failure: a bad --loss
        raise AuditInputError(f"--loss {spec}: cannot import it: {_first_line(error)}") from error


def _error(message):
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _explain(name, markdown=False):
    """`--explain`: the page on stdout (0), or an error (2)."""
    try:
        text = page_text(name) if markdown else explain_text(name)
    except KeyError:
        known = ", ".join(sorted(t for t in TRAPS if t != "unknown") + page_names())
        return _error(f"--explain: unknown trap or page {name!r}; expected one of {known}")
    text = text if text.endswith("\n") else text + "\n"
    try:
        sys.stdout.write(text)
    except UnicodeEncodeError:  # a console that cannot show `×`: replace it
        encoding = sys.stdout.encoding or "ascii"
        sys.stdout.write(text.encode(encoding, "replace").decode(encoding))
    return EXIT_CLEAN


def main(argv=None):
    """Runs the command line; returns the exit status (0, 1 or 2)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = _parser()
    args = parser.parse_args(argv)
    if args.explain is not None:
        return _explain(args.explain, markdown=args.markdown)
    if args.model is None or args.data is None:
        # argparse's own usage error (exit status 2, as for bad input).
        parser.error("the following arguments are required: model, --data")
    try:
        stress = _stress(args.stress)
        modes = _modes(args.modes)
        keras = _import_keras(args.backend)
        if args.backend and args.backend != keras.config.backend():
            rest = [
                a
                for n, a in enumerate(argv)
                if a != "--backend" and (n == 0 or argv[n - 1] != "--backend")
            ]
            rest = [a for a in rest if not a.startswith("--backend=")]
            return _restart(args.backend, rest)
    except _UsageError as error:
        return _error(str(error))

    from keras_stable.audit.core import audit
    from keras_stable.audit.data import AuditInputError
    from keras_stable.audit.data import load_batch

    try:
        _import_modules(args.imports)
        model = _load_model(args.model, args.unsafe, loss_given=args.loss is not None)
        notes = []
        x, y = load_batch(args.data)
        loss = _loss(args.loss)
        if loss is not None and y is None:
            raise AuditInputError(f"--loss needs labels: {args.data} holds no `y`")
        if y is not None and loss is None and getattr(model, "loss", None) is None:
            notes.append(
                "the model has no compiled loss: y is ignored, the gradient is that of the sum of the outputs"
            )
            y = None
        report = audit(model, x, y, loss=loss, stress=stress, modes=modes, precision=args.precision)
    except AuditInputError as error:
        return _error(str(error))
    report.notes.extend(notes)
    print(report)
    return EXIT_CLEAN if report.ok else EXIT_FOUND
