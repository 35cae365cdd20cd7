"""Which examples of the batch cause a finding: each row run alone.

Row `i` is guilty of a finding when the model run on `x[i:i+1]` (and
`y[i:i+1]`) alone makes the finding's call non-finite: its value for a
forward finding, the gradient reaching its inputs for a gradient finding.
A trap coupled across the batch (a norm over the batch axis, a batch
statistic) that no single row sets off has no guilty row.
"""

import keras
import numpy as np

from keras_stable.audit import execution
from keras_stable.audit.data import to_tensors
from keras_stable.audit.execution import LOSS

# Each row is one eager run with gradients: a batch larger than this is
# examined on its first rows only (said in a note).
MAX_ROWS = 256


def _finite(arrays):
    return all(
        np.all(np.isfinite(a)) for a in arrays if np.issubdtype(np.asarray(a).dtype, np.floating)
    )


def _take(data, i):
    if data is None:
        return None
    return keras.tree.map_structure(lambda a: a[i : i + 1], data)


def _row_rows(data):
    return int(np.shape(keras.tree.flatten(data)[0])[0])


def _non_finite(run, finding):
    """Whether `finding`'s call is non-finite in the single-row `run`."""
    for i, info in enumerate(run.calls):
        if info.node.name != finding.layer and not (i == 0 and finding.layer == info.node.name):
            continue
        if finding.stage == "forward":
            if not _finite(run.outputs[i]):
                return True
        elif run.grads_in is not None:
            grads = run.grads_out[0] if info.node.kind == LOSS else run.grads_in[i]
            if not _finite(grads):
                return True
    return False


class RowRuns:
    """The single-row runs of one (model, batch), made once, when needed."""

    def __init__(self, model, x, y, loss_fn):
        self.model, self.x, self.y, self.loss_fn = model, x, y, loss_fn
        self._runs = None
        self.note = None

    def runs(self):
        if self._runs is None:
            self._runs = []
            n = _row_rows(self.x)
            if n > MAX_ROWS:
                self.note = f"examples: only the first {MAX_ROWS} of {n} rows were run alone"
            plan = None
            for i in range(min(n, MAX_ROWS)):
                xi, yi = to_tensors(_take(self.x, i)), to_tensors(_take(self.y, i))
                try:
                    if plan is None:
                        plan = execution.plan_deltas(self.model, self.loss_fn, xi, yi)
                    run = execution.differentiate(self.model, self.loss_fn, xi, yi, plan, "eager")
                except Exception:  # noqa: BLE001 - a model that needs the whole batch
                    self.note = "examples: the model cannot run on one row alone"
                    self._runs = []
                    break
                self._runs.append(run)
        return self._runs

    def guilty(self, finding):
        """The rows that set off `finding` when run alone, as a tuple."""
        return tuple(i for i, run in enumerate(self.runs()) if _non_finite(run, finding))
