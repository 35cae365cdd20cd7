"""Regenerates the figures of the documentation (docs/img/*.png).

    KERAS_BACKEND=tensorflow python docs/scripts/make_plots.py

Every curve is measured, not drawn: the plain formulation and keras_stable
are run side by side on the TensorFlow backend (the gradients use
`tf.GradientTape`). The figures quoted in the trap pages are printed too.
Needs matplotlib (`pip install -e ".[docs]"`). Takes about a minute on two
CPU cores.
"""

import os
import sys
from pathlib import Path

if os.environ.setdefault("KERAS_BACKEND", "tensorflow") != "tensorflow":
    sys.exit("make_plots.py measures on the TensorFlow backend: unset KERAS_BACKEND.")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import keras  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from keras import ops  # noqa: E402

import keras_stable  # noqa: E402
from keras_stable.demo import cli as demo_cli  # noqa: E402
from keras_stable.demo import report as demo_report  # noqa: E402
from keras_stable.demo import training as demo_training  # noqa: E402

IMG = Path(__file__).resolve().parents[1] / "img"
sys.path.insert(0, str(Path(__file__).resolve().parent))
import plots_entropy_sparsemax  # noqa: E402

RED, BLUE, GREY = "tab:red", "tab:blue", "tab:grey"
# The plain formulation is drawn wide and pale, keras_stable thin on top, so
# both stay visible where they agree.
PLAIN = dict(color=RED, linewidth=4, alpha=0.4)
STABLE = dict(color=BLUE, linewidth=1.5)


def value_and_grad(fn, x, dtype="float32"):
    """`fn(x)` and `d sum(fn(x)) / dx`, as float64 NumPy arrays."""
    x = tf.constant(np.asarray(x), dtype=dtype)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fn(x)
    grad = tape.gradient(y, x)
    return (
        np.asarray(tf.cast(y, "float64")),
        np.asarray(tf.cast(grad, "float64")),
    )


def plot_demo():
    rows = demo_training.run_all(demo_cli.DEFAULT_STEPS, demo_training.MODES, out=lambda s: None)
    demo_report.save_plot(rows, IMG / "demo.png")
    print(demo_report.format_table(rows))


def plot_norm_at_zero():
    """Value and gradient of ||(t, 0, 0, 0)|| around t = 0."""
    ts = np.concatenate([np.linspace(-3e-6, 3e-6, 121), [0.0]])
    ts.sort()
    formulations = {
        "keras.ops.norm": lambda v: ops.norm(v),
        "sqrt(sum(x**2) + 1e-12)": lambda v: ops.sqrt(ops.sum(v**2) + 1e-12),
        "keras_stable.ops.safe_norm": lambda v: keras_stable.ops.safe_norm(v),
    }
    looks = {
        "keras.ops.norm": PLAIN,
        "sqrt(sum(x**2) + 1e-12)": dict(color=GREY, linestyle="--"),
        "keras_stable.ops.safe_norm": STABLE,
    }
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for name, fn in formulations.items():
        values, grads = [], []
        for t in ts:
            v, g = value_and_grad(fn, [t, 0.0, 0.0, 0.0])
            values.append(float(v))
            grads.append(float(g[0]))
        values, grads = np.array(values), np.array(grads)
        left.plot(ts * 1e6, values * 1e6, label=name, **looks[name])
        right.plot(ts * 1e6, grads, label=name, **looks[name])
        zero = np.flatnonzero(ts == 0.0)[0]
        print(f"norm at 0, {name}: value {values[zero]:.3g}, grad {grads[zero]}")
        if np.isnan(grads[zero]):
            right.plot([0], [0], "x", color=RED, markersize=12, mew=3)
            right.annotate(
                "NaN at t = 0",
                (0, 0),
                xytext=(10, 10),
                textcoords="offset points",
                color=RED,
            )
    left.set(
        title="value of ||(t, 0, 0, 0)||",
        xlabel="t (×1e-6)",
        ylabel="norm (×1e-6)",
    )
    right.set(title="gradient d/dt", xlabel="t (×1e-6)", ylabel="gradient")
    left.legend(fontsize=8)
    right.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(IMG / "norm-at-zero.png", dpi=100)
    plt.close(fig)


def _naive_softmax(s):
    return ops.exp(s) / ops.sum(ops.exp(s), axis=-1, keepdims=True)


def plot_softmax_overflow():
    """p(class 0) of softmax([s, s - 1, 0]) as s grows, float32 and float16."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, dtype, top in zip(axes, ("float32", "float16"), (120.0, 16.0)):
        ss = np.linspace(0.0, top, 241)
        for name, fn, look in (
            ("exp(s) / sum(exp(s))", _naive_softmax, PLAIN),
            ("keras_stable.ops.softmax", keras_stable.ops.softmax, STABLE),
        ):
            x = np.stack([ss, ss - 1.0, np.zeros_like(ss)], axis=-1)
            p = np.asarray(ops.cast(fn(ops.cast(x, dtype)), "float64"))[:, 0]
            ax.plot(ss, p, label=name, **look)
            bad = np.flatnonzero(~np.isfinite(p))
            if bad.size:
                first = ss[bad[0]]
                ax.axvspan(first, top, color=RED, alpha=0.08)
                ax.annotate(
                    f"NaN from s = {first:.3g}",
                    (first, 0.5),
                    xytext=(6, 0),
                    textcoords="offset points",
                    color=RED,
                )
                print(f"naive softmax {dtype}: first NaN at s = {first:.4g}")
        ax.set(
            title=f"p(class 0) of softmax([s, s-1, 0]), {dtype}",
            xlabel="s",
            ylabel="probability",
            ylim=(0, 1),
        )
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(IMG / "softmax-overflow.png", dpi=100)
    plt.close(fig)


def _masking_cases():
    """(case, plain fn, keras_stable fn, input) for the masking figure."""
    nan_label = np.array([1.0, np.nan, -1.0])
    keep = np.array([True, False, True])
    ce_labels = np.array([[1.0, 0.0, 0.0]])
    return [
        (
            "squared error, NaN label\nmasked by multiplying",
            lambda p: ops.sum(ops.cast(keep, p.dtype) * (nan_label - p) ** 2),
            lambda p: keras_stable.ops.masked_task_distance(nan_label, p, mask=keep, squared=True),
            np.zeros(3),
        ),
        (
            "squared error, NaN label\nmasked by one where()",
            lambda p: ops.sum(ops.where(keep, (nan_label - p) ** 2, 0.0)),
            lambda p: keras_stable.ops.masked_task_distance(nan_label, p, mask=keep, squared=True),
            np.zeros(3),
        ),
        (
            "softmax of a fully\nmasked row [-inf]*3",
            lambda x: ops.softmax(x),
            lambda x: keras_stable.ops.softmax(x),
            np.full(3, -np.inf),
        ),
        (
            "logsumexp of [-inf]*3",
            lambda x: ops.logsumexp(x),
            lambda x: keras_stable.ops.logsumexp(x),
            np.full(3, -np.inf),
        ),
        (
            "cross-entropy, logits\n[2, -inf, 0], label 0",
            lambda x: keras.losses.categorical_crossentropy(ce_labels, x, from_logits=True),
            lambda x: keras_stable.ops.softmax_cross_entropy(ce_labels, x),
            np.array([[2.0, -np.inf, 0.0]]),
        ),
    ]


def _summary(values, grads):
    finite_v = np.all(np.isfinite(values) | np.isneginf(values))
    finite_g = np.all(np.isfinite(grads))
    v = np.asarray(values).ravel()
    text_v = ", ".join(f"{x:.3g}" for x in v[:3])
    text_g = ", ".join(f"{x:.3g}" for x in np.asarray(grads).ravel()[:3])
    return finite_v, finite_g, text_v, text_g


def plot_masking():
    """A grid: value and gradient of each masking case, plain vs keras_stable."""
    cases = _masking_cases()
    columns = [
        "plain: value",
        "plain: gradient",
        "keras_stable: value",
        "keras_stable: gradient",
    ]
    fig, ax = plt.subplots(figsize=(11, 0.9 * len(cases) + 1.0))
    ax.set_xlim(0, len(columns))
    ax.set_ylim(0, len(cases))
    ax.invert_yaxis()
    ax.axis("off")
    for col, title in enumerate(columns):
        ax.text(
            col + 0.5,
            -0.15,
            title,
            ha="center",
            va="bottom",
            fontsize=9,
            weight="bold",
        )
    for row, (name, plain, stable, x) in enumerate(cases):
        ax.text(-0.05, row + 0.5, name, ha="right", va="center", fontsize=8)
        for k, fn in enumerate((plain, stable)):
            values, grads = value_and_grad(fn, x)
            ok_v, ok_g, text_v, text_g = _summary(values, grads)
            who = "plain" if k == 0 else "keras_stable"
            case = name.replace("\n", " ")
            print(f"masking, {case}, {who}: value [{text_v}], grad [{text_g}]")
            for j, (ok, text) in enumerate(((ok_v, text_v), (ok_g, text_g))):
                col = 2 * k + j
                ax.add_patch(
                    plt.Rectangle(
                        (col + 0.03, row + 0.08),
                        0.94,
                        0.84,
                        color="#d9f2d9" if ok else "#f8d0d0",
                    )
                )
                ax.text(
                    col + 0.5,
                    row + 0.5,
                    text,
                    ha="center",
                    va="center",
                    fontsize=8,
                )
    fig.subplots_adjust(left=0.2, right=0.99, top=0.9, bottom=0.02)
    fig.savefig(IMG / "masking.png", dpi=100)
    plt.close(fig)


def plot_half_precision():
    """float16 norm and l2-normalisation of [t, t, t, t] as t grows."""
    ts = np.linspace(1.0, 400.0, 400)
    x = np.repeat(ts[:, None], 4, axis=1).astype("float16")
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    plain_norm = np.asarray(ops.cast(ops.norm(x, axis=-1), "float64"))
    stable_norm = np.asarray(ops.cast(keras_stable.ops.safe_norm(x, axis=-1), "float64"))
    shown = np.where(np.isinf(plain_norm), np.nan, plain_norm)
    left.plot(ts, shown, label="keras.ops.norm (float16)", **PLAIN)
    left.plot(ts, stable_norm, label="keras_stable.ops.safe_norm (float16)", **STABLE)
    first_inf = ts[np.flatnonzero(np.isinf(plain_norm))[0]]
    left.axvspan(first_inf, ts[-1], color=RED, alpha=0.08)
    left.annotate(
        f"inf from t = {first_inf:.0f}",
        (first_inf, 200),
        xytext=(6, 0),
        textcoords="offset points",
        color=RED,
    )
    print(f"float16 norm of [t]*4: keras.ops.norm is inf from t = {first_inf:.0f}")
    left.set(
        title="||(t, t, t, t)|| in float16 (true value 2t)",
        xlabel="t",
        ylabel="norm",
    )
    left.legend(fontsize=8, loc="upper left")

    def first_entry(values):
        return np.asarray(ops.cast(values, "float64"))[:, 0]

    plain_unit = first_entry(ops.normalize(x, axis=-1))
    stable_unit = first_entry(keras_stable.ops.l2_normalize(x, axis=-1))
    right.plot(ts, plain_unit, label="keras.ops.normalize (float16)", **PLAIN)
    right.plot(
        ts,
        stable_unit,
        label="keras_stable.ops.l2_normalize (float16)",
        **STABLE,
    )
    print(
        f"float16 normalize of [300]*4: keras {plain_unit[299]:.3g}, "
        f"keras_stable {stable_unit[299]:.3g}"
    )
    right.set(
        title="first entry of (t, t, t, t) / ||·|| in float16 (true 0.5)",
        xlabel="t",
        ylim=(-0.05, 0.6),
    )
    right.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(IMG / "half-precision.png", dpi=100)
    plt.close(fig)


def plot_regression():
    """Poisson under a log link, and the Gaussian NLL against the log-variance."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    zs = np.linspace(-25.0, 3.0, 281)
    y = np.ones((1,), "float32")
    exact_value = np.exp(zs) - zs
    keras_poisson = lambda z: keras.losses.poisson(y, ops.exp(z))  # noqa: E731
    stable_poisson = lambda z: keras_stable.ops.poisson_nll(y, z)  # noqa: E731
    for name, fn, look in (
        ("keras.losses.poisson(y, exp(z))", keras_poisson, PLAIN),
        ("keras_stable.ops.poisson_nll(y, z)", stable_poisson, STABLE),
    ):
        values, grads = [], []
        for z in zs:
            v, g = value_and_grad(fn, [z])
            values.append(float(np.ravel(v)[0]))
            grads.append(float(g[0]))
        axes[0].plot(zs, values, label=name, **look)
        axes[1].plot(zs, grads, label=name, **look)
        at = np.flatnonzero(zs == -20.0)[0]
        print(
            f"Poisson, y = 1, z = -20, {name}: value {values[at]:.4g} "
            f"(exact {exact_value[at]:.4g}), d/dz {grads[at]:.4g} (exact -1)"
        )
    axes[0].plot(zs, exact_value, color=GREY, linestyle=":", label="exact exp(z) - z")
    axes[0].set(title="Poisson loss, y = 1, rate exp(z)", xlabel="log-rate z", ylabel="loss")
    axes[1].set(title="gradient d/dz (exact: exp(z) - 1)", xlabel="log-rate z", ylim=(-1.1, 1.0))
    axes[0].legend(fontsize=8)
    axes[1].legend(fontsize=8, loc="upper left")

    # Gaussian NLL with a tiny error: diff**2 underflows and exp(-log_var)
    # overflows below -88.7 in float32 (0 * inf = NaN).
    lvs = np.linspace(-150.0, 150.0, 601).astype("float32")
    diff = np.float32(1e-30)
    exact = 0.5 * (lvs + np.exp(2 * np.log(1e-30) - lvs.astype("float64")))
    naive = np.asarray(
        0.5 * (lvs + ops.square(ops.convert_to_tensor(diff)) * ops.exp(-lvs)), "float64"
    )
    stable = np.asarray(
        ops.cast(
            keras_stable.ops.gaussian_nll(np.zeros_like(lvs), np.full_like(lvs, diff), lvs),
            "float64",
        )
    )
    axes[2].plot(
        lvs, np.where(np.isfinite(naive), naive, np.nan), label="0.5 (v + d² exp(-v))", **PLAIN
    )
    axes[2].plot(lvs, stable, label="keras_stable.ops.gaussian_nll", **STABLE)
    axes[2].plot(lvs, exact, color=GREY, linestyle=":", label="exact")
    first_nan = lvs[np.flatnonzero(~np.isfinite(naive))].max()
    axes[2].axvspan(lvs[0], first_nan, color=RED, alpha=0.08)
    axes[2].annotate(
        f"naive form NaN\nbelow v = {first_nan:.1f}",
        (first_nan, 40),
        xytext=(6, 0),
        textcoords="offset points",
        color=RED,
    )
    print(f"Gaussian NLL, d = 1e-30: naive NaN for log_var <= {first_nan:.1f}")
    axes[2].set(
        title="Gaussian NLL, error d = 1e-30, float32",
        xlabel="log-variance v",
        ylim=(-80, 80),
    )
    axes[2].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(IMG / "regression.png", dpi=100)
    plt.close(fig)


def plot_saturated_probabilities():
    """Focal losses and probability inputs once a probability saturates."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    # 1. Categorical focal loss (alpha 0.25, gamma 2) of the logits
    #    [0, s, -s] with label 0: exact 0.25 (1 - p0)**2 (-log p0).
    ss = np.linspace(0.0, 40.0, 161)
    y = np.array([[1.0, 0.0, 0.0]], "float32")
    keras_focal = keras.losses.CategoricalFocalCrossentropy(from_logits=True)
    stable_focal = keras_stable.losses.StableSoftmaxFocalCrossEntropy(alpha=0.25)
    for name, loss, look in (
        ("keras CategoricalFocalCrossentropy", keras_focal, PLAIN),
        ("keras_stable StableSoftmaxFocalCrossEntropy", stable_focal, STABLE),
    ):
        values = [float(value_and_grad(lambda x: loss(y, x), [[0.0, s, -s]])[0]) for s in ss]
        axes[0].plot(ss, values, label=name, **look)
        print(f"focal, logits [0, 30, -30], label 0, {name}: {values[120]:.4g} (exact 7.5)")
    axes[0].set(
        title="categorical focal loss, logits [0, s, -s], label 0",
        xlabel="s",
        ylabel="loss (alpha 0.25, gamma 2)",
    )
    axes[0].legend(fontsize=8)

    # 2. Gradient of the binary focal loss (gamma 0.5) of an easy example.
    xs = np.linspace(0.0, 100.0, 401)
    y = np.ones((1, 1), "float32")
    keras_binary = keras.losses.BinaryFocalCrossentropy(gamma=0.5, from_logits=True)
    stable_binary = keras_stable.losses.StableSigmoidFocalCrossEntropy(gamma=0.5)
    for name, loss, look in (
        ("keras BinaryFocalCrossentropy", keras_binary, PLAIN),
        ("keras_stable StableSigmoidFocalCrossEntropy", stable_binary, STABLE),
    ):
        grads = np.array([float(value_and_grad(lambda v: loss(y, v), [[x]])[1][0, 0]) for x in xs])
        axes[1].semilogy(xs, np.where(np.isfinite(grads), -grads, np.nan), label=name, **look)
        if not np.isfinite(grads).all():
            first = xs[np.flatnonzero(~np.isfinite(grads)).min()]
            axes[1].axvspan(first, xs[-1], color=RED, alpha=0.08)
            axes[1].annotate(
                f"Keras: NaN gradient\nfrom x = {first:.2f}",
                (first, 1e-3),
                xytext=(6, 0),
                textcoords="offset points",
                color=RED,
            )
            print(f"binary focal, gamma 0.5, label 1, {name}: NaN gradient from logit {first:.2f}")
    axes[1].set(
        title="binary focal loss (gamma 0.5), label 1: -d/dx", xlabel="logit x", ylim=(1e-45, 10)
    )
    axes[1].legend(fontsize=8, loc="lower left")

    # 3. Cross-entropy of a probability read as data: p = softmax([0, s])[0].
    ss = np.linspace(0.0, 120.0, 481)
    probs = np.exp(-ss - np.logaddexp(0.0, -ss)).astype("float32")  # denormal past 87.3
    y = np.array([[1.0, 0.0]], "float32")
    exact = ss + np.logaddexp(0.0, -ss)
    curves = {
        "-log(p) by hand": lambda p: -ops.log(p[..., 0]),
        "keras CategoricalCrossentropy()": lambda p: keras.losses.CategoricalCrossentropy()(y, p),
        "keras_stable (from_logits=False)": (
            lambda p: keras_stable.losses.StableSoftmaxCrossEntropy(from_logits=False)(y, p)
        ),
    }
    looks = [dict(color=GREY, linestyle="--"), PLAIN, STABLE]
    for (name, fn), look in zip(curves.items(), looks):
        values = np.array(
            [float(np.ravel(value_and_grad(fn, [[p, 1.0 - p]])[0])[0]) for p in probs]
        )
        axes[2].plot(ss, np.where(np.isfinite(values), values, np.nan), label=name, **look)
        at = np.flatnonzero(ss == 90.0)[0]
        print(
            f"CE of p = softmax([0, 90])[0] = {probs[at]:.3g}, {name}: {values[at]:.4g} (exact 90)"
        )
    axes[2].plot(ss, exact, color=GREY, linestyle=":", label="exact")
    axes[2].axvline(-np.log(np.finfo(np.float32).tiny), color=GREY, linewidth=0.8)
    axes[2].set(
        title="cross-entropy of p = softmax([0, s])[0] as data",
        xlabel="logit gap s",
        ylabel="loss",
        ylim=(0, 125),
    )
    axes[2].legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(IMG / "saturated-probabilities.png", dpi=100)
    plt.close(fig)


def _expansion_distance(v):
    """TF Addons' `pairwise_distance`: sqrt(|x|^2 + |y|^2 - 2 x.y), with its
    1e-16 inside the square root where the expansion is <= 0."""
    sq = ops.sum(v * v, axis=1, keepdims=True)
    d2 = ops.maximum(sq + ops.transpose(sq) - 2.0 * ops.matmul(v, ops.transpose(v)), 0.0)
    zero = ops.cast(ops.less_equal(d2, 0.0), v.dtype)
    return ops.sqrt(d2 + zero * 1e-16) * (1.0 - zero)


def plot_distances():
    """Distance between a row `a` (entries around 30) and `a + t e1`."""
    rng = np.random.default_rng(0)
    a = (30.0 + rng.normal(size=4)).astype("float32")
    e1 = np.eye(4, dtype="float32")[0]
    ts = np.concatenate([np.linspace(-0.2, 0.2, 201), [0.0]])
    ts.sort()
    formulations = {
        "keras.ops.cdist": lambda v: ops.cdist(v, v),
        "expansion |x|²+|y|²-2x·y (TF Addons)": _expansion_distance,
        "keras_stable.ops.pairwise_distance": keras_stable.ops.pairwise_distance,
    }
    looks = {
        "keras.ops.cdist": PLAIN,
        "expansion |x|²+|y|²-2x·y (TF Addons)": dict(color=GREY, linestyle="--"),
        "keras_stable.ops.pairwise_distance": STABLE,
    }
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for name, dist in formulations.items():
        values, grads = [], []
        for t in ts:

            def d01(tt, dist=dist):
                rows = ops.stack([ops.convert_to_tensor(a), a + tt * e1])
                return dist(rows)[0, 1]

            v, g = value_and_grad(d01, t)
            values.append(float(v))
            grads.append(float(g))
        values, grads = np.array(values), np.array(grads)
        left.plot(ts, values, label=name, **looks[name])
        right.plot(ts, np.where(np.isfinite(grads), grads, np.nan), label=name, **looks[name])
        zero = np.flatnonzero(ts == 0.0)[0]
        err = np.max(np.abs(values - np.abs(ts)))
        print(
            f"distance to a + t e1, {name}: max error {err:.3g}, value at 0 {values[zero]:.3g}, grad at 0 {grads[zero]}"
        )
        if np.isnan(grads[zero]):
            right.plot([0], [0], "x", color=RED, markersize=12, mew=3)
            right.annotate(
                "NaN at t = 0", (0, 0), xytext=(10, 10), textcoords="offset points", color=RED
            )
    left.set(
        title="distance between a and a + t·e1 (|a| ≈ 60), float32", xlabel="t", ylabel="distance"
    )
    right.set(title="gradient d/dt (exact: sign(t), 0 at 0)", xlabel="t", ylim=(-3, 3))
    left.legend(fontsize=8, loc="upper center")
    right.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(IMG / "distances.png", dpi=100)
    plt.close(fig)


def plot_attention():
    """Per query row of a causal, left-padded sequence (keys 0-2 padded):
    the output and the query gradient of Keras's attention (padding as a
    boolean mask, and as a -inf bias) and of keras_stable's."""
    rng = np.random.default_rng(0)
    t, h = 8, 4
    q = rng.normal(size=(1, t, 1, h)).astype("float32")
    k = rng.normal(size=(1, t, 1, h)).astype("float32")
    v = rng.normal(size=(1, t, 1, h)).astype("float32")
    pad = np.ones((1, 1, 1, t), bool)
    pad[..., :3] = False
    bias = np.where(pad, 0.0, -np.inf).astype("float32")
    cases = {
        "keras.ops.dot_product_attention(mask=padding)": (
            lambda x: ops.dot_product_attention(x, k, v, mask=pad, is_causal=True),
            dict(color=GREY, linestyle="--", marker="s"),
        ),
        "keras.ops.dot_product_attention(bias=-inf padding)": (
            lambda x: ops.dot_product_attention(x, k, v, bias=bias, is_causal=True),
            dict(PLAIN, marker="o"),
        ),
        "keras_stable.ops.dot_product_attention": (
            lambda x: keras_stable.ops.dot_product_attention(x, k, v, mask=pad, is_causal=True),
            dict(STABLE, marker="."),
        ),
    }
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    rows = np.arange(t)
    for name, (fn, look) in cases.items():
        out, grad = value_and_grad(fn, q)
        norms = np.linalg.norm(out[0, :, 0], axis=-1)
        grads = np.linalg.norm(grad[0, :, 0], axis=-1)
        print(f"attention, {name}: |out| rows 0-2 {norms[:3]}, |dq| rows 0-2 {grads[:3]}")
        for ax, y in ((left, norms), (right, grads)):
            ax.plot(rows, np.where(np.isnan(y), 0.0, y), label=name, **look)
            bad = np.isnan(y)
            if bad.any():
                ax.plot(rows[bad], 0 * rows[bad], "x", color=RED, markersize=12, mew=3)
    left.set(title="|output| per query row (rows 0-2: nothing to attend to)", xlabel="query row")
    right.set(title="|d query| per row (x marks NaN)", xlabel="query row")
    left.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(IMG / "attention.png", dpi=100)


def _ctc_reference(labels, logits):
    """-log p(labels | logits) in float64, the textbook forward recursion."""
    logp = logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)
    ext = [0]
    for label in labels:
        ext += [label, 0]
    alpha = np.full(len(ext), -np.inf)
    alpha[0], alpha[1] = logp[0, ext[0]], logp[0, ext[1]]
    for t in range(1, len(logits)):
        prev = alpha.copy()
        for s in range(len(ext)):
            terms = [prev[s]] + ([prev[s - 1]] if s else [])
            if s >= 2 and ext[s] != 0 and ext[s] != ext[s - 2]:
                terms.append(prev[s - 2])
            alpha[s] = np.logaddexp.reduce(terms) + logp[t, ext[s]]
    return -np.logaddexp(alpha[-1], alpha[-2])


def plot_sequences():
    """CTC at large logits, and a label that cannot fit its frames."""
    rng = np.random.default_rng(1)
    base = rng.uniform(-1, 1, size=(2, 12, 6))[:1]
    labels = np.array([[1, 2, 3, 4]], "int32")
    n_label, n_frames = np.array([4], "int32"), np.array([12], "int32")
    scales = np.geomspace(1, 1000, 31)
    errors = {"keras.ops.ctc_loss": [], "keras_stable.ops.ctc_loss": []}
    for scale in scales:
        logits = (scale * base).astype("float32")
        exact = _ctc_reference(labels[0], logits[0].astype("float64"))
        for name, fn in (
            ("keras.ops.ctc_loss", keras.ops.ctc_loss),
            ("keras_stable.ops.ctc_loss", keras_stable.ops.ctc_loss),
        ):
            value = float(np.asarray(fn(labels, logits, n_label, n_frames))[0])
            errors[name].append(max(abs(value - exact) / exact, 1e-9))
    for name, errs in errors.items():
        print(f"CTC at logits of 1e3, {name}: relative error {errs[-1]:.3g}")
    frames = np.arange(1, 7)
    repeat = np.array([[1, 1]], "int32")
    keras_loss, stable_loss, stable_grad = [], [], []
    for t in frames:
        logits = rng.normal(size=(1, int(t), 3)).astype("float32")
        lengths = (np.array([2], "int32"), np.array([t], "int32"))
        keras_loss.append(float(np.asarray(keras.ops.ctc_loss(repeat, logits, *lengths))[0]))
        value, grad = value_and_grad(
            lambda x: keras_stable.ops.ctc_loss(repeat, x, *lengths), logits
        )
        stable_loss.append(float(value[0]))
        stable_grad.append(float(np.max(np.abs(grad))))
    print(f"CTC of [1, 1] in 2 frames: keras {keras_loss[1]:.4g}, keras_stable {stable_loss[1]}")
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.loglog(scales, errors["keras.ops.ctc_loss"], label="keras.ops.ctc_loss", **PLAIN)
    left.loglog(scales, errors["keras_stable.ops.ctc_loss"], label="keras_stable", **STABLE)
    left.set(
        title="CTC, relative error against float64 (float32 logits)",
        xlabel="logit scale",
        ylabel="relative error",
    )
    right.plot(frames, keras_loss, "o-", label="keras.ops.ctc_loss", **PLAIN)
    right.plot(frames, stable_loss, "o-", label="keras_stable (zero_infinity)", **STABLE)
    right.axvspan(0.5, 2.5, color=GREY, alpha=0.15)
    right.annotate("infeasible: loss +inf", (1.0, max(keras_loss) * 0.5), color=GREY)
    right.set(title="CTC of the label [1, 1]", xlabel="frames", ylabel="loss")
    left.legend(fontsize=8)
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(IMG / "sequences.png", dpi=100)
    plt.close(fig)


def plot_mixture_densities():
    """The mixture NLL of one far target, naive and in log space."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    ys = np.linspace(0.0, 60.0, 241).astype("float32")
    zeros = np.zeros((1, 1, 1), "float32")

    def naive(y):
        density = ops.exp(-0.5 * y * y) / np.float32(np.sqrt(2 * np.pi))
        return -ops.log(density)

    def stable(y):
        return keras_stable.ops.mixture_nll(
            ops.reshape(y, (1, 1)), np.zeros((1, 1), "float32"), y * 0 + zeros, zeros
        )

    for name, fn, look in (
        ("-log(sum(pi * N(y)))", naive, PLAIN),
        ("keras_stable.ops.mixture_nll", stable, STABLE),
    ):
        values, grads = [], []
        for y in ys:
            v, g = value_and_grad(fn, [y])
            values.append(float(np.ravel(v)[0]))
            grads.append(-float(g[0]))  # d/d(mean) = -d/dy
        values, grads = np.array(values), np.array(grads)
        axes[0].plot(ys, np.where(np.isfinite(values), values, np.nan), label=name, **look)
        axes[1].plot(ys, np.where(np.isfinite(grads), grads, np.nan), label=name, **look)
        at = np.flatnonzero(ys == 40.0)[0]
        print(f"mixture NLL, y = 40, {name}: value {values[at]:.6g}, d/d(mean) {grads[at]:.4g}")
    first_inf = ys[np.flatnonzero(~np.isfinite(naive_values(ys)))].min()
    for ax in axes:
        ax.axvspan(first_inf, ys[-1], color=RED, alpha=0.08)
    axes[0].annotate(
        f"naive: inf, NaN gradient\nfrom {first_inf:.1f} sigmas",
        (first_inf, 1200),
        xytext=(6, 0),
        textcoords="offset points",
        color=RED,
    )
    axes[0].set(title="NLL of y, one component N(0, 1), float32", xlabel="y", ylabel="NLL")
    axes[1].set(title="gradient d/d(mean) (exact: -y)", xlabel="y")
    axes[0].legend(fontsize=8, loc="upper left")
    axes[1].legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(IMG / "mixture-densities.png", dpi=100)
    plt.close(fig)


def naive_values(ys):
    """The naive NLL of `plot_mixture_densities` in float32, for its limit."""
    with np.errstate(divide="ignore", over="ignore"):
        density = np.exp(-0.5 * ys * ys) / np.float32(np.sqrt(2 * np.pi))
        return -np.log(density.astype("float32"))


def plot_vae_half_precision():
    """The keras-io VAE's KL in float16 against ops.gaussian_kl."""
    fig, ax = plt.subplots(figsize=(6, 4))
    lvs = np.linspace(0.0, 16.0, 321).astype("float16")
    mean = ops.zeros((len(lvs), 1), "float16")
    lv = ops.convert_to_tensor(lvs[:, None])
    naive = -0.5 * ops.sum(1 + lv - ops.square(mean) - ops.exp(lv), axis=1)
    naive = np.asarray(ops.cast(naive, "float64"))
    stable = np.asarray(ops.cast(keras_stable.ops.gaussian_kl(mean, lv), "float64"))
    exact = 0.5 * (np.expm1(lvs.astype("float64")) - lvs.astype("float64"))
    ax.plot(lvs, np.where(np.isfinite(naive), naive, np.nan), label="keras-io KL, float16", **PLAIN)
    ax.plot(lvs, stable, label="keras_stable.ops.gaussian_kl (float32)", **STABLE)
    ax.plot(lvs, exact, color=GREY, linestyle=":", label="exact")
    first_inf = float(lvs[np.flatnonzero(~np.isfinite(naive))].min())
    ax.axvspan(first_inf, float(lvs[-1]), color=RED, alpha=0.08)
    ax.axhline(65504, color=GREY, linewidth=0.8)
    print(f"VAE KL in float16: inf from log-variance {first_inf:.3f}")
    ax.set(
        title="KL(N(0, exp(lv)) || N(0, 1)), float16 inputs",
        xlabel="log-variance lv",
        yscale="log",
        ylim=(1e-2, 1e7),
    )
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(IMG / "vae-half-precision.png", dpi=100)
    plt.close(fig)


def main():
    IMG.mkdir(exist_ok=True)
    print(
        f"Keras {keras.__version__}, TensorFlow {tf.__version__}, backend {keras.config.backend()}"
    )
    plot_norm_at_zero()
    plot_softmax_overflow()
    plot_masking()
    plot_half_precision()
    plot_regression()
    plot_saturated_probabilities()
    plot_distances()
    plot_attention()
    plot_sequences()
    plots_entropy_sparsemax.plot_entropy(IMG / "entropy.png")
    plots_entropy_sparsemax.plot_sparsemax(IMG / "sparsemax.png")
    plot_mixture_densities()
    plot_vae_half_precision()
    plot_demo()
    print(f"figures written to {IMG}")


if __name__ == "__main__":
    main()
