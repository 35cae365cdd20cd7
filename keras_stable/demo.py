"""See the NaN traps happen, and not happen, in one command.

Run ``python -m keras_stable.demo`` (or the console script
``keras-stable-demo``). It trains the two models keras_stable was built
from, each with the plain Keras formulation and with keras_stable, eagerly
(``run_eagerly=True``) and compiled (``jit_compile=True``), and prints a
table: the step at which each run first produced a NaN or inf loss
or weight, and its first and final loss.

1. **Masked multi-task regression** (trap 1, the norm at zero). 30 tasks, one
   active per step: the model's 30 outputs are multiplied by a task mask, and
   the loss is the one of the bug report::

       dist = keras.ops.norm(y_true - y_pred, axis=0)   # one norm per task
       loss = keras.ops.mean(dist**2)

   29 of the 30 columns are all zero, and the gradient of the norm there is
   ``0 / 0``. The keras_stable run changes one line,
   ``loss=keras_stable.losses.MaskedMultiTaskDistance(per="task",
   squared=True)``: the same value, step for step, with no NaN.
2. **Small classifier with a hand-written softmax** (trap 2, overflow). A
   2-3-2 network with large initial weights, trained on
   ``-sum(y * log(exp(s) / sum(exp(s))))``: logits above ~88 overflow
   ``exp`` in float32 and the loss is NaN at the first step. The
   keras_stable run uses
   ``loss=keras_stable.losses.StableSoftmaxCrossEntropy()`` on the logits.

Nothing is hard-coded: every cell of the table is measured on the backend in
use. Options: ``--backend {tensorflow,jax,torch}`` (default: the
``KERAS_BACKEND`` environment variable, else tensorflow), ``--steps N``,
``--modes eager,jit``, ``--plot FILE.png`` (needs matplotlib).

Keras reads its backend once, when it is first imported. This module imports
nothing from Keras at import time; when Keras is already loaded with another
backend (``python -m keras_stable.demo`` imports the ``keras_stable``
package, hence Keras, before the demo starts), the command-line entry point
restarts the demo in a fresh interpreter with ``KERAS_BACKEND`` set, and
:func:`main` called from Python with an explicit ``argv`` returns 2 with a
clear error instead.
"""

import argparse
import os
import subprocess
import sys
import time

BACKENDS = ("tensorflow", "jax", "torch")
MODES = ("eager", "jit")
DEFAULT_STEPS = 60
_RESTARTED = "KERAS_STABLE_DEMO_RESTARTED"

# Scenario 1: the masked multi-task regression of the bug report.
N_TASKS = 30
N_FEATURES = 8
REGRESSION_BATCH = 32
REGRESSION_LR = 0.3

# Scenario 2: the 2-3-2 classifier with large initial weights.
CLASSIFIER_BATCH = 32
CLASSIFIER_INIT_STDDEV = 30.0
CLASSIFIER_LR = 1.0

SEED = 1
CLASSIFIER_SEED = 3


class BackendMismatchError(RuntimeError):
    """Keras is already imported with a backend other than the one asked."""


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
        raise argparse.ArgumentTypeError(
            f"expected a positive integer, got {text!r}"
        )
    return value


def _modes(text):
    modes = tuple(m.strip() for m in text.split(",") if m.strip())
    unknown = [m for m in modes if m not in MODES]
    if not modes or unknown:
        raise argparse.ArgumentTypeError(
            f"expected a comma-separated subset of {','.join(MODES)}, got "
            f"{text!r}"
        )
    return modes


def _loaded_backend():
    """The backend of an already imported Keras, or None."""
    if "keras" not in sys.modules:
        return None
    return sys.modules["keras"].config.backend()


def select_backend(requested):
    """Makes `requested` the Keras backend, or says why it cannot.

    Sets `KERAS_BACKEND` when Keras is not imported yet. Returns the backend
    that will be used. Raises `BackendMismatchError` when Keras is already
    imported with another backend (Keras cannot switch backends in a
    running process).
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


# --------------------------------------------------------------------------
# The two scenarios. Everything below runs after the backend is chosen, so
# Keras is imported inside the functions.


def _regression_batch(step):
    """One batch of the masked 30-task regression: task `step % 30` only.

    As in the bug report, the labels of the inactive tasks are stored as 0
    and the model's outputs are multiplied by the task mask, so 29 of the 30
    columns of `y_true - y_pred` are exactly zero.
    """
    import numpy as np

    rng = np.random.default_rng(1000 + step)
    task = step % N_TASKS
    true_weights = np.random.default_rng(0).normal(
        size=(N_FEATURES, N_TASKS)
    )
    x = rng.normal(size=(REGRESSION_BATCH, N_FEATURES))
    mask = np.zeros((REGRESSION_BATCH, N_TASKS))
    mask[:, task] = 1.0
    noise = 0.1 * rng.normal(size=(REGRESSION_BATCH, N_TASKS))
    y = (x @ true_weights + noise) * mask
    return [x.astype("float32"), mask.astype("float32")], y.astype("float32")


def _initial_weights(shapes, stddev, seed):
    """Initial weights drawn with NumPy: identical on every backend."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return [rng.normal(scale=stddev, size=shape) for shape in shapes]


def _regression_model():
    import keras

    x = keras.Input((N_FEATURES,), name="features")
    mask = keras.Input((N_TASKS,), name="task_mask")
    y1 = keras.layers.Dense(N_TASKS)(x)
    y2 = keras.layers.Multiply()([y1, mask])
    model = keras.Model([x, mask], y2)
    model.set_weights(
        _initial_weights(
            [(N_FEATURES, N_TASKS), (N_TASKS,)], 1 / N_FEATURES**0.5, SEED
        )
    )
    return model


def plain_task_norm_loss(y_true, y_pred):
    """The loss of the bug report: `mean(norm(y_true - y_pred, axis=0)**2)`."""
    from keras import ops

    dist = ops.norm(y_true - y_pred, axis=0)
    return ops.mean(dist**2)


def _classifier_batch(step):
    """Two Gaussian blobs in 2-D, one-hot labels."""
    import numpy as np

    rng = np.random.default_rng(2000 + step)
    labels = rng.integers(0, 2, size=CLASSIFIER_BATCH)
    centres = np.where(labels[:, None] == 1, 1.5, -1.5)
    x = rng.normal(size=(CLASSIFIER_BATCH, 2)) + centres
    return x.astype("float32"), np.eye(2, dtype="float32")[labels]


def _classifier_model():
    """A 2-3-2 network whose large initial weights give logits above 88."""
    import keras

    x = keras.Input((2,), name="x")
    hidden = keras.layers.Dense(3, activation="tanh")(x)
    logits = keras.layers.Dense(2)(hidden)
    model = keras.Model(x, logits)
    model.set_weights(
        _initial_weights(
            [(2, 3), (3,), (3, 2), (2,)],
            CLASSIFIER_INIT_STDDEV,
            CLASSIFIER_SEED,
        )
    )
    return model


def plain_softmax_cross_entropy(y_true, scores):
    """Hand-written softmax and cross-entropy: `exp(s) / sum(exp(s))`."""
    from keras import ops

    probs = ops.exp(scores) / ops.sum(ops.exp(scores), axis=1, keepdims=True)
    return -ops.sum(y_true * ops.log(probs), axis=1)


def _scenarios():
    """The two scenarios: model, data, learning rate and the two losses.

    `fix` is the one line that differs between the plain run and the
    keras_stable run; everything else (model, initial weights, data,
    optimizer) is identical.
    """
    import keras_stable

    return [
        {
            "name": "multi-task regression",
            "doc": "docs/traps/norm-at-zero.md",
            "model": _regression_model,
            "batch": _regression_batch,
            "lr": REGRESSION_LR,
            "plain": ("plain (keras.ops.norm)", lambda: plain_task_norm_loss),
            # The same value as the plain loss (each task's squared distance
            # across the batch, averaged over the 30 tasks), with no sqrt
            # whose gradient could meet 0/0.
            "stable": (
                "keras_stable",
                lambda: keras_stable.losses.MaskedMultiTaskDistance(
                    per="task", squared=True
                ),
            ),
            "fix": "loss=keras_stable.losses.MaskedMultiTaskDistance("
            'per="task", squared=True)',
        },
        {
            "name": "2-3-2 classifier",
            "doc": "docs/traps/softmax-overflow.md",
            "model": _classifier_model,
            "batch": _classifier_batch,
            "lr": CLASSIFIER_LR,
            "plain": (
                "plain (exp(s)/sum(exp(s)))",
                lambda: plain_softmax_cross_entropy,
            ),
            "stable": (
                "keras_stable",
                keras_stable.losses.StableSoftmaxCrossEntropy,
            ),
            "fix": "loss=keras_stable.losses.StableSoftmaxCrossEntropy()",
        },
    ]


def _count_nonfinite_weights(model):
    """(non-finite entries, total entries) over the trainable weights."""
    import math

    from keras import ops

    bad = total = 0
    for weight in model.trainable_weights:
        # Counted on the backend and read back as a Python int: converting
        # the weights to NumPy warns under NumPy 2 on some backends.
        finite = ops.cast(ops.isfinite(weight.value), "int32")
        size = math.prod(weight.shape)
        bad += size - int(ops.sum(finite))
        total += size
    return bad, total


def train(scenario, loss, mode, steps):
    """Trains one run with SGD; returns its losses and its first failure.

    Each step is one `train_on_batch`, whose loss is computed before that
    step's update. The failure is None, or a dict: `step`, `what` ("loss" or
    "weights") and `detail`. NaN weights after step `k` with a finite loss
    (the norm trap: the value is fine, the gradient is not) are reported at
    step `k`. Training stops at the first non-finite value: it never
    recovers.
    """
    import keras
    import numpy as np

    keras.utils.clear_session()
    keras.utils.set_random_seed(SEED)  # the same initial weights every run
    model = scenario["model"]()
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=scenario["lr"]),
        loss=loss,
        run_eagerly=mode == "eager",
        jit_compile=mode == "jit",
    )
    losses = []
    for step in range(1, steps + 1):
        x, y = scenario["batch"](step)
        value = float(np.asarray(model.train_on_batch(x, y)))
        losses.append(value)
        if not np.isfinite(value):
            kind = "NaN" if np.isnan(value) else "inf"
            return losses, {"step": step, "what": "loss", "detail": kind}
        bad, total = _count_nonfinite_weights(model)
        if bad:
            return losses, {
                "step": step,
                "what": "weights",
                "detail": f"{bad}/{total}",
            }
    return losses, None


def describe_failure(failure):
    """`never`, `step 3 (NaN loss)` or `step 1 (232/270 weights NaN)`."""
    if failure is None:
        return "never"
    if failure["what"] == "weights":
        return f"step {failure['step']} ({failure['detail']} weights NaN)"
    return f"step {failure['step']} ({failure['detail']} loss)"


def _mean(values):
    import numpy as np

    return float(np.mean(values)) if len(values) else float("nan")


def _final_loss(row):
    """Mean loss of the last 10 steps; NaN (or inf) once a run has failed."""
    failure = row["failure"]
    if failure is None:
        return _mean(row["losses"][-10:])
    return float("inf") if failure["detail"] == "inf" else float("nan")


def _fmt(value):
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    return f"{value:.4g}"


def _mode_label(mode):
    return "eager" if mode == "eager" else "jit_compile=True"


def run_all(steps, modes, out=print):
    """Runs every scenario × formulation × mode; returns the result rows."""
    rows = []
    scenarios = _scenarios()
    total = len(scenarios) * 2 * len(modes)
    index = 0
    for scenario in scenarios:
        for formulation in ("plain", "stable"):
            label, make_loss = scenario[formulation]
            for mode in modes:
                index += 1
                out(
                    f"[{index}/{total}] {scenario['name']}, {label}, "
                    f"{_mode_label(mode)}, {steps} steps ..."
                )
                start = time.perf_counter()
                losses, failure = train(scenario, make_loss(), mode, steps)
                seconds = time.perf_counter() - start
                out(
                    f"      {seconds:.1f} s, first NaN/inf: "
                    f"{describe_failure(failure)}"
                )
                rows.append(
                    {
                        "scenario": scenario["name"],
                        "doc": scenario["doc"],
                        "fix": scenario["fix"],
                        "formulation": formulation,
                        "label": label,
                        "mode": mode,
                        "losses": losses,
                        "failure": failure,
                        "seconds": seconds,
                    }
                )
    return rows


def format_table(rows):
    """The side-by-side table of the measured rows, as a string."""
    header = (
        "scenario",
        "formulation",
        "mode",
        "first NaN/inf",
        "loss at step 1",
        "mean loss, last 10 steps",
    )
    body = []
    previous = None
    for row in rows:
        losses = row["losses"]
        body.append(
            (
                row["scenario"] if row["scenario"] != previous else "",
                row["label"],
                _mode_label(row["mode"]),
                describe_failure(row["failure"]),
                _fmt(losses[0]),
                _fmt(_final_loss(row)),
            )
        )
        previous = row["scenario"]
    widths = [
        max(len(cells[i]) for cells in (header, *body))
        for i in range(len(header))
    ]

    def line(cells):
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *map(line, body)])


def summary(rows, backend, width=79):
    """Plain-language conclusions, drawn from the measured rows only."""
    import textwrap

    import numpy as np

    plain = [r for r in rows if r["formulation"] == "plain"]
    stable = [r for r in rows if r["formulation"] == "stable"]
    paragraphs = [
        "Plain formulation: NaN/inf in "
        f"{sum(r['failure'] is not None for r in plain)} of {len(plain)} "
        "runs. keras_stable: NaN/inf in "
        f"{sum(r['failure'] is not None for r in stable)} of {len(stable)} "
        "runs."
    ]
    for row in plain:
        twin = next(
            r
            for r in stable
            if r["scenario"] == row["scenario"] and r["mode"] == row["mode"]
        )
        if row["failure"] is not None or twin["failure"] is not None:
            continue
        a, b = np.asarray(row["losses"]), np.asarray(twin["losses"])
        gap = float(np.max(np.abs(a - b) / np.maximum(np.abs(a), 1e-30)))
        text = (
            f"Where the plain run stayed finite ({row['scenario']}, "
            f"{_mode_label(row['mode'])}), keras_stable's loss matches it "
            f"step for step (largest relative difference {gap:.1e})."
        )
        if row["scenario"] == "multi-task regression":
            if backend == "tensorflow":
                text += (
                    " The norm trap is hidden there: TensorFlow's CPU "
                    "kernels return 0 for the gradient of sqrt at 0 when "
                    "the incoming gradient is 0. Under XLA (jit_compile="
                    "True, Keras's default on a GPU) and on JAX the same "
                    "code goes NaN."
                )
            else:
                text += (
                    f" The norm trap is hidden there: {backend}'s norm "
                    "special-cases the zero vector. A hand-written "
                    "sqrt(sum(x**2)), XLA and JAX still go NaN."
                )
        paragraphs.append(text)
    lines = []
    for text in paragraphs:
        lines.extend(textwrap.wrap(text, width))
    lines.append("")
    lines.append("The one-line change (model, data and optimizer identical):")
    seen = dict.fromkeys((r["scenario"], r["fix"], r["doc"]) for r in rows)
    pad = max(len(name) for name, _, _ in seen)
    for name, fix, doc in seen:
        lines.append(f"  {name.ljust(pad)}  {fix}")
        lines.append(f"  {' ' * pad}  why: {doc}")
    return "\n".join(lines)


def save_plot(rows, path):
    """Loss curves of every run (moving average of 5 steps), one panel each.

    A run that went NaN or inf is marked by a cross at that step, at the top
    of its panel.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    scenarios = list(dict.fromkeys(r["scenario"] for r in rows))
    fig, axes = plt.subplots(
        1, len(scenarios), figsize=(6.5 * len(scenarios), 4.2), squeeze=False
    )
    # The plain runs are drawn wide and pale, so a keras_stable run that
    # matches one step for step stays visible on top of it.
    looks = {
        "plain": {"color": "tab:red", "linewidth": 4, "alpha": 0.45},
        "stable": {"color": "tab:blue", "linewidth": 1.5},
    }
    dashes = {"eager": "-", "jit": "--"}
    for ax, name in zip(axes[0], scenarios):
        top = ax.get_xaxis_transform()  # x in steps, y in axes fraction
        for row in (r for r in rows if r["scenario"] == name):
            look = looks[row["formulation"]]
            label = f"{row['label']}, {_mode_label(row['mode'])}"
            losses = np.asarray(row["losses"], dtype="float64")
            if row["failure"] is not None:
                step = row["failure"]["step"]
                y = 0.93 if row["mode"] == "eager" else 0.85
                ax.plot(
                    [step],
                    [y],
                    "x",
                    transform=top,
                    color=look["color"],
                    markersize=11,
                    markeredgewidth=2.5,
                    label=f"{label}: NaN at step {step}",
                )
                ax.annotate(
                    f"NaN ({_mode_label(row['mode'])})",
                    (step, y),
                    xycoords=top,
                    xytext=(8, -4),
                    textcoords="offset points",
                    color=look["color"],
                    fontsize=8,
                )
                continue
            window = min(5, losses.size)
            smooth = np.convolve(losses, np.ones(window) / window, "valid")
            ax.plot(
                np.arange(window, losses.size + 1),
                smooth,
                dashes[row["mode"]],
                label=label,
                **look,
            )
        ax.set_title(name)
        ax.set_xlabel("SGD step")
        ax.set_ylabel("loss (moving average of 5 steps)")
        ax.set_yscale("log")
        ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


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
        one did not, 2 for a usage error (including a backend that cannot be
        selected because Keras is already imported with another one).
    """
    from_command_line = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parse_args(argv)
    if args.plot and not _have_matplotlib():
        print(
            "error: --plot needs matplotlib, which is not installed: "
            "`pip install matplotlib` (or `pip install keras_stable[plot]`).",
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
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
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
    stable_failed = any(
        r["failure"] is not None for r in rows if r["formulation"] == "stable"
    )
    return 1 if stable_failed else 0


if __name__ == "__main__":
    sys.exit(main())
