"""Training the demo's runs: one SGD run, and every scenario × loss × mode.

A run stops at its first NaN or inf, in the loss or in the weights: it
never recovers.
"""

import time

from keras_stable.demo.report import _mode_label
from keras_stable.demo.report import describe_failure
from keras_stable.demo.scenarios import SEED
from keras_stable.demo.scenarios import _scenarios

MODES = ("eager", "jit")


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
                out(f"      {seconds:.1f} s, first NaN/inf: {describe_failure(failure)}")
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
