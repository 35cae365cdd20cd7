"""Measures the distance traps of docs/traps/distances.md on every backend.

    python docs/scripts/measure_distances.py

runs itself once per backend (a fresh process each: Keras picks its backend
at import) and prints the page's table: for each case the built-in (or the
usual hand-written formula) next to keras_stable, on TensorFlow eager,
TensorFlow with XLA (`tf.function(jit_compile=True)`), JAX (`jax.jit`) and
torch (eager). Gradients are of the sum of the outputs. Takes about a
minute on two CPU cores.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = (("tensorflow", "eager"), ("tensorflow", "xla"), ("jax", "jit"), ("torch", "eager"))


def _cases():
    import keras
    import numpy as np

    import keras_stable

    K = keras.ops
    S = keras_stable.ops
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 3)).astype("float32")
    dup = x.copy()
    dup[3] = dup[1]
    near = (rng.normal(size=(4, 8)) * 3).astype("float32")
    near[3] = near[1] + np.float32(1e-3)  # true distance 2.8e-3
    offset = (x + 1e4).astype("float32")
    labels = np.array([0, 1, 0, 1])
    same = labels[:, None] == labels[None, :]

    def tfa_distance(v):
        """TF Addons' `pairwise_distance` (the expansion, 1e-16 inside sqrt)."""
        sq = K.sum(v * v, axis=1, keepdims=True)
        d2 = K.maximum(sq + K.transpose(sq) - 2.0 * K.matmul(v, K.transpose(v)), 0.0)
        zero = K.cast(K.less_equal(d2, 0.0), v.dtype)
        d = K.sqrt(d2 + zero * 1e-16) * (1.0 - zero)
        return d * (1.0 - K.eye(4, dtype=v.dtype))

    def cdist_triplet(v):
        d = K.cdist(v, v)
        pos = K.max(K.where(same & ~np.eye(4, dtype=bool), d, 0.0), axis=1)
        neg = K.min(K.where(same, 1e9, d), axis=1)
        return K.mean(K.relu(pos - neg + 1.0))

    views = rng.normal(size=(2, 4, 3)).astype("float16")
    eye = np.eye(8, dtype="float16")

    def nt_xent_f16(v):
        z = K.reshape(v, (8, 3))
        z = z / K.sqrt(K.sum(z * z, axis=1, keepdims=True))
        big = K.cast(K.convert_to_tensor(np.float32(1e9)), "float16")
        logits = K.matmul(z, K.transpose(z)) / 0.1 - big * K.convert_to_tensor(eye)
        log_p = K.log_softmax(logits, axis=-1)
        partner = np.concatenate([np.arange(4, 8), np.arange(4)])
        return -K.mean(K.take_along_axis(log_p, partner[:, None], axis=1))

    y_true = np.array([[1.0, 2.0, 3.0]], "float32")
    zero_pred = np.zeros((1, 3), "float32")
    cos_keras = keras.losses.CosineSimilarity()
    cos_stable = keras_stable.losses.StableCosineSimilarity()
    return (
        [
            (
                "`keras.ops.cdist(x, x)`: the diagonal",
                "grad",
                lambda v: K.cdist(v, v),
                S.pairwise_distance,
                x,
            ),
            (
                "TF Addons' expansion: two rows 1e-3 apart (relative error)",
                "near",
                tfa_distance,
                S.pairwise_distance,
                near,
            ),
            (
                "TF Addons' expansion: rows offset by 1e4 (max abs error)",
                "offset",
                tfa_distance,
                S.pairwise_distance,
                offset,
            ),
            (
                "batch-hard triplet loss on `cdist`, a duplicated point",
                "grad",
                cdist_triplet,
                lambda v: keras_stable.losses.TripletHardLoss()(labels, v),
                dup,
            ),
            (
                "`keras.ops.std` of a constant row",
                "grad",
                lambda v: K.std(v, axis=1),
                lambda v: S.safe_std(v, axis=1),
                np.full((2, 3), 2.0, "float32"),
            ),
            (
                "`CosineSimilarity` loss, zero `y_pred`",
                "grad",
                lambda p: cos_keras(y_true, p),
                lambda p: cos_stable(y_true, p),
                zero_pred,
            ),
            (
                "NT-Xent, float16, self-similarity masked by `-1e9`",
                "value",
                nt_xent_f16,
                lambda v: keras_stable.losses.InfoNCELoss()(None, v),
                views,
            ),
        ],
        x,
        offset,
    )


def _summary(kind, value, grad, expected=None):
    import numpy as np

    value = np.asarray(value, "float64")
    grad = np.asarray(grad, "float64")
    if kind == "value":
        if not np.all(np.isfinite(value)):
            return "**NaN**"
        return f"{float(value):.4g}"
    if kind == "offset":
        return f"{np.max(np.abs(value - expected)):.2g}"
    if kind == "near":
        return f"{abs(value[1, 3] / expected[1, 3] - 1):.1%}"
    if not np.all(np.isfinite(grad)):
        return "**NaN grad**"
    g = np.max(np.abs(grad))
    return f"max grad {g:.2g}" if g > 1e3 else "ok"


def _vjp(fn, x, mode):
    import keras
    import numpy as np

    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        def run(v):
            with tf.GradientTape() as tape:
                tape.watch(v)
                out = fn(v)
            return out, tape.gradient(out, v)

        if mode == "xla":
            run = tf.function(run, jit_compile=True)
        out, grad = run(tf.constant(x))
    elif backend == "jax":
        import jax

        def run(v):
            out, pullback = jax.vjp(fn, v)
            return out, pullback(jax.numpy.ones_like(out))[0]

        out, grad = jax.jit(run)(jax.numpy.asarray(x))
    else:
        import torch

        v = torch.tensor(x, requires_grad=True)
        out = fn(v)
        (grad,) = torch.autograd.grad(out, v, torch.ones_like(out))
        out = out.detach()
    to_np = lambda t: np.asarray(keras.ops.convert_to_numpy(keras.ops.cast(t, "float32")))  # noqa: E731
    return to_np(out), to_np(grad)


def _metric_cases():
    import keras
    import numpy as np

    import keras_stable

    y = np.array([1.0, 2.0, 3.0, 4.0], "float32")
    flat = np.full(4, 2.5, "float32")
    rows = []
    for name, plain, ours, args in (
        (
            "`PearsonCorrelation`, constant predictions",
            keras.metrics.PearsonCorrelation(axis=0),
            keras_stable.metrics.StablePearsonCorrelation(axis=0),
            (y, flat),
        ),
        (
            "`R2Score`, constant target, perfect prediction",
            keras.metrics.R2Score(),
            keras_stable.metrics.StableR2Score(),
            (flat[:, None], flat[:, None]),
        ),
    ):
        out = []
        for metric in (plain, ours):
            metric.update_state(*args)
            v = float(keras.ops.convert_to_numpy(metric.result()))
            out.append("**NaN**" if not np.isfinite(v) else f"{v:.4g}")
        rows.append((name, out))
    return rows


def measure(backend_mode):
    """The cells of one column (run inside the backend's process)."""
    import numpy as np

    from tests import reference

    cases, _, _ = _cases()
    cells = []
    for name, kind, plain, ours, x in cases:
        expected = reference.pairwise_distance(x) if kind in ("offset", "near") else None
        pair = []
        for fn in (plain, ours):
            out, grad = _vjp(fn, x, backend_mode)
            pair.append(_summary(kind, out, grad, expected))
        cells.append((name, pair))
    if backend_mode != "xla":
        cells.extend(_metric_cases())
    else:
        cells.extend((name, ["n/m", "n/m"]) for name, _ in _metric_cases())
    np.seterr(all="ignore")
    return cells


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--column":
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        sys.path.insert(0, str(ROOT))
        print(json.dumps(measure(sys.argv[2])))
        return
    columns = {}
    for backend, mode in COLUMNS:
        env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
        result = subprocess.run(
            [sys.executable, __file__, "--column", mode],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        columns[(backend, mode)] = json.loads(result.stdout.strip().splitlines()[-1])
    names = [name for name, _ in columns[COLUMNS[0]]]
    header = "| case | " + " | ".join(f"{b} {m}" for b, m in COLUMNS) + " |"
    print(header)
    print("|---" * (len(COLUMNS) + 1) + "|")
    for i, name in enumerate(names):
        cells = [" / ".join(columns[c][i][1]) for c in COLUMNS]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
