"""The figures of the entropy and sparsemax trap pages (called by
make_plots.py, which sets up the backend and matplotlib)."""

import matplotlib.pyplot as plt
import numpy as np
import tensorflow as tf
from keras import ops

import keras_stable

RED, BLUE = "tab:red", "tab:blue"
PLAIN = dict(color=RED, linewidth=4, alpha=0.4)
STABLE = dict(color=BLUE, linewidth=1.5)


def _naive_entropy(x):
    return -ops.sum(ops.softmax(x) * ops.log_softmax(x), axis=-1)


def _value_and_grad(fn, x):
    x = tf.constant(x, "float32")
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = fn(x)
    return np.asarray(y, "float64"), np.asarray(tape.gradient(y, x), "float64")


def plot_entropy(path):
    """Entropy of softmax([0, t, -inf]) (a masked third class) and its
    gradient in t: the hand-written formula is NaN for every t."""
    ts = np.linspace(-8.0, 8.0, 161)
    x = np.stack([np.zeros_like(ts), ts, np.full_like(ts, -np.inf)], axis=-1)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, fn, look in (
        ("-sum(softmax(x) * log_softmax(x))", _naive_entropy, PLAIN),
        ("keras_stable.ops.entropy", keras_stable.ops.entropy, STABLE),
    ):
        value, grad = _value_and_grad(fn, x)
        nan_value, nan_grad = np.isnan(value).mean(), np.isnan(grad).any(-1).mean()
        print(f"{name}: NaN values {nan_value:.0%}, NaN gradient rows {nan_grad:.0%}")
        label = name if np.isfinite(value).all() else f"{name}: NaN for every t"
        axes[0].plot(ts, np.nan_to_num(value, nan=0.0), label=label, **look)
        axes[1].plot(ts, np.nan_to_num(grad[:, 1], nan=0.0), label=name, **look)
    axes[0].set(title="entropy of softmax([0, t, -inf])", xlabel="t", ylabel="nats")
    axes[1].set(title="d entropy / dt (NaN drawn at 0)", xlabel="t")
    for ax in axes:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_sparsemax(path):
    """sparsemax([0, t, 1]) as t moves: p(class 2) and the sum of the
    outputs, Keras 3.15.1 against keras_stable."""
    ts = np.linspace(-1.0, 2.0, 301)
    x = np.stack([np.zeros_like(ts), ts, np.ones_like(ts)], axis=-1).astype("float32")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, fn, look in (
        ("keras.ops.sparsemax", ops.sparsemax, PLAIN),
        ("keras_stable.ops.sparsemax", keras_stable.ops.sparsemax, STABLE),
    ):
        p = np.asarray(fn(x), "float64")
        total = p.sum(-1)
        print(f"{name}: sum of outputs in [{total.min():.3g}, {total.max():.3g}]")
        axes[0].plot(ts, p[:, 2], label=name, **look)
        axes[1].plot(ts, total, label=name, **look)
    axes[0].set(title="p(class 2) of sparsemax([0, t, 1])", xlabel="t", ylabel="probability")
    axes[1].set(title="sum of the outputs (a distribution sums to 1)", xlabel="t")
    for ax in axes:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
