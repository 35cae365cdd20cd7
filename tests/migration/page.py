"""The migration page's tables, parsed, and the helpers the row checks share:
`agree` and the other comparisons, the backend's own framework, and small
deterministic inputs."""

from pathlib import Path

import keras
import numpy as np
from keras import ops as kops
from packaging.version import Version

from tests.backend_utils import BACKEND
from tests.backend_utils import assert_close
from tests.backend_utils import to_numpy

DOC = Path(__file__).resolve().parents[2] / "docs" / "migration.md"
SECTIONS = ("Losses", "Metrics", "Layers", "Functions")
F64 = "float64"


# --- the page --------------------------------------------------------------


def _cells(line):
    """The cells of a Markdown table row; a `|` inside backticks is text."""
    cells, cell, code = [], "", False
    for char in line.strip().strip("|"):
        if char == "`":
            code = not code
        if char == "|" and not code:
            cells.append(cell.strip())
            cell = ""
        else:
            cell += char
    return cells + [cell.strip()]


def migration_rows():
    """`(section, left cell)` of every body row of the tables in SECTIONS."""
    rows, section, table = [], None, []
    for line in DOC.read_text(encoding="utf-8").splitlines() + [""]:
        if line.startswith("|"):
            table.append(line)
            continue
        if table and section in SECTIONS:
            # The first two lines of a table are its header and the `|---|` rule.
            rows += [(section, _cells(row)[0]) for row in table[2:]]
        table = []
        if line.startswith("## "):
            section = line[3:].strip()
    return rows


def mismatch(reason, documented=False, fixed_in=None):
    """Marks a check whose right side does not give the left side's number
    (before Keras `fixed_in`, where Keras changed its number to ours)."""
    prefix = "documented deliberate difference: " if documented else "MISMATCH: "

    def mark(check):
        if fixed_in is None or Version(keras.__version__) < Version(fixed_in):
            check.mismatch = prefix + reason
        return check

    return mark


# --- comparisons -----------------------------------------------------------


def _np(x):
    if isinstance(x, np.ndarray | np.generic | float | int):
        return np.asarray(x, F64)
    return to_numpy(x)


def agree(right, left, what="", tol=None):
    """`right` gives `left`'s number: same shape, float32 tolerance."""
    right, left = _np(right), _np(left)
    assert np.isfinite(left).all(), f"{what}: the left side is not finite here"
    assert right.shape == left.shape, f"{what}: shape {right.shape} != left's {left.shape}"
    assert_close(right, left, "float32", what=what, tol=tol)


def agree_where_finite(right, left, what=""):
    """`right` gives `left`'s number wherever `left` is finite."""
    right, left = _np(right), _np(left)
    assert right.shape == left.shape, f"{what}: shape {right.shape} != left's {left.shape}"
    finite = np.isfinite(left)
    assert finite.any() and not finite.all(), f"{what}: expected some non-finite left entries"
    assert_close(right[finite], left[finite], "float32", what=what)


def _framework(name):
    """`tensorflow`, `jax.numpy` or `torch` when it is the backend, else None:
    a left side written in that framework also runs natively there."""
    if name == "tf" and BACKEND == "tensorflow":
        import tensorflow

        return tensorflow
    if name == "jnp" and BACKEND == "jax":
        import jax.numpy

        return jax.numpy
    if name == "torch" and BACKEND == "torch":
        import torch

        return torch
    return None


def compiled(fn):
    """`fn` taking its array arguments as tensors: under `jax.jit` on JAX,
    eagerly elsewhere. Eager JAX compiles every op it dispatches (seconds for
    a CTC or an attention layer); one compilation per call keeps this file
    fast. Same computation, same number."""
    if BACKEND == "jax":
        import jax

        return jax.jit(fn)

    def eager(*args):
        return fn(*[None if a is None else kops.convert_to_tensor(a) for a in args])

    return eager


def tensors(*arrays):
    """Inputs of a hand-written formula as tensors (torch cannot multiply a
    NumPy array by a tensor)."""
    return [kops.convert_to_tensor(a) for a in arrays]


def _torch_tensor(x):
    import torch

    return torch.as_tensor(np.asarray(x, "float32"))


def _rng(seed):
    return np.random.default_rng(seed)


def _normal(seed, shape, scale=1.0):
    return (_rng(seed).normal(size=shape) * scale).astype("float32")


def _onehot(seed, batch, classes):
    return np.eye(classes, dtype="float32")[_rng(seed).integers(0, classes, batch)]


def _soft_labels(seed, shape):
    """Strictly positive distributions (no `0 log 0`, no `1e-7` clip)."""
    p = _rng(seed).uniform(0.2, 1.0, shape)
    return (p / p.sum(-1, keepdims=True)).astype("float32")


def _sigmoid64(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, F64)))


def _metric(metric, batches):
    metric.reset_state()
    for batch in batches:
        metric.update_state(*batch)
    return metric.result()


def _regression(seed, shape=(6, 4)):
    return _normal(seed, shape), _normal(seed + 1, shape)


def _with_nan_rows(y_true, rows=(1, 4), cols=(0, 2)):
    """Missing labels: the left side is NaN on these examples, finite elsewhere."""
    y_true = y_true.copy()
    y_true[list(rows), list(cols)] = np.nan
    return y_true


def _counts(seed, shape=(6, 4)):
    return _rng(seed).poisson(1.5, shape).astype("float32")


def _huber64(diff, delta):
    a = np.abs(diff)
    return np.where(a <= delta, 0.5 * diff**2, delta * (a - 0.5 * delta))
