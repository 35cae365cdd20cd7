"""The demo's report: the table, the plain-language summary and the plot.

Everything here reads the measured rows of `training.run_all` (dicts with
`scenario`, `doc`, `fix`, `formulation`, `label`, `mode`, `losses`,
`failure` and `seconds`) and computes nothing else.
"""

import math


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
    if not math.isfinite(value):  # "nan", "inf", "-inf"
        return str(value)
    return f"{value:.4g}"


def _mode_label(mode):
    return "eager" if mode == "eager" else "jit_compile=True"


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
    widths = [max(len(cells[i]) for cells in (header, *body)) for i in range(len(header))]

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
        (
            "Plain formulation: NaN/inf in "
            f"{sum(r['failure'] is not None for r in plain)} of {len(plain)} "
            "runs. keras_stable: NaN/inf in "
            f"{sum(r['failure'] is not None for r in stable)} of "
            f"{len(stable)} runs."
        )
    ]
    for row in plain:
        twin = next(
            r for r in stable if r["scenario"] == row["scenario"] and r["mode"] == row["mode"]
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
    fig, axes = plt.subplots(1, len(scenarios), figsize=(6.5 * len(scenarios), 4.2), squeeze=False)
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
