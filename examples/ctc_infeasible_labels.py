"""A CTC sequence model trained on data where some labels cannot fit.

Synthetic "OCR": each sequence is 12 noisy frames, each frame showing one
of 4 symbols or a gap; the label is the symbols read left to right (a
symbol spanning several frames counts once). One sample in eight carries a
corrupted label, `[1, 1, 1, 1, 1, 1, 1]`: seven labels with six repeats
need 13 frames, so it has no alignment and its CTC loss is `+inf`.

The same small convolutional model is trained with `keras.losses.CTC` and
with `keras_stable.losses.StableCTC` (compiled with XLA on TensorFlow and
JAX). With Keras the impossible samples give a loss of about 709 (TF) or
1e5 (JAX) with a gradient that pushes the weights, or `inf` and NaN
weights (torch); StableCTC scores them 0 with a zero gradient, and the
model learns to read the feasible sequences (greedy decoding), while
`keras_stable.metrics.CTCInfeasibleLabels` counts the impossible labels in
`fit`'s logs (128 per epoch), so they do not pass unnoticed.

    python examples/ctc_infeasible_labels.py
"""

import keras
import numpy as np

import keras_stable

FRAMES, SYMBOLS, MAX_LABEL = 12, 4, 7
CLASSES = SYMBOLS + 1  # class 0 is the blank, as in keras.losses.CTC


def make_data(n, seed):
    rng = np.random.default_rng(seed)
    shown = np.zeros((n, FRAMES), "int64")  # 0: a gap between symbols
    labels = np.zeros((n, MAX_LABEL), "int32")
    for i in range(n):
        t, k = 0, 0
        while k < 4:
            t += int(rng.integers(0, 2))  # an optional gap
            width = int(rng.integers(1, 3))
            if t + width > FRAMES:
                break
            symbol = int(rng.integers(1, SYMBOLS + 1))
            shown[i, t : t + width] = symbol
            labels[i, k] = symbol
            k, t = k + 1, t + width + 1  # a gap after each symbol
    x = np.eye(CLASSES, dtype="float32")[shown] + 0.3 * rng.normal(size=(n, FRAMES, CLASSES))
    corrupted = np.arange(n) % 8 == 0
    labels[corrupted] = 1  # [1] * 7 needs 13 frames: no alignment
    return x.astype("float32"), labels, corrupted


def build_model(seed=0):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((FRAMES, CLASSES))
    hidden = keras.layers.Conv1D(32, 3, padding="same", activation="relu")(inputs)
    hidden = keras.layers.Conv1D(32, 3, padding="same", activation="relu")(hidden)
    return keras.Model(inputs, keras.layers.Dense(CLASSES)(hidden))  # logits


def greedy_decode(logits):
    out = []
    for best in np.argmax(logits, axis=-1):
        collapsed = [c for j, c in enumerate(best) if c != 0 and (j == 0 or c != best[j - 1])]
        out.append(collapsed)
    return out


def accuracy(model, x, labels, corrupted):
    decoded = greedy_decode(keras.ops.convert_to_numpy(model(x)))
    hits = [
        decoded[i] == [int(v) for v in labels[i] if v != 0]
        for i in range(len(x))
        if not corrupted[i]
    ]
    return float(np.mean(hits))


def train(loss, x, y, metrics=None):
    model = build_model()
    jit = keras.config.backend() in ("tensorflow", "jax")
    model.compile(
        optimizer=keras.optimizers.Adam(0.01), loss=loss, metrics=metrics, jit_compile=jit
    )
    history = model.fit(x, y, batch_size=64, epochs=15, verbose=0)
    finite = all(np.all(np.isfinite(keras.ops.convert_to_numpy(w))) for w in model.weights)
    return model, history.history, finite


def main():
    x, y, corrupted = make_data(1024, seed=0)
    x_test, y_test, corrupted_test = make_data(256, seed=1)
    keras_model, keras_logs, keras_finite = train(keras.losses.CTC(), x, y)
    # StableCTC scores the infeasible labels 0: CTCInfeasibleLabels counts
    # them in the logs, each epoch.
    stable_model, stable_logs, stable_finite = train(
        keras_stable.losses.StableCTC(), x, y, [keras_stable.metrics.CTCInfeasibleLabels()]
    )
    keras_losses, stable_losses = keras_logs["loss"], stable_logs["loss"]
    keras_acc = accuracy(keras_model, x_test, y_test, corrupted_test) if keras_finite else 0.0
    stable_acc = accuracy(stable_model, x_test, y_test, corrupted_test)
    print(f"backend {keras.config.backend()}, {corrupted.mean():.0%} of the labels infeasible")
    print(
        f"keras.losses.CTC:  last loss {keras_losses[-1]:.4g}, weights finite "
        f"{keras_finite}, exact reads {keras_acc:.1%}"
    )
    print(
        f"StableCTC:         last loss {stable_losses[-1]:.4g}, weights finite "
        f"{stable_finite}, exact reads {stable_acc:.1%}"
    )
    counted = stable_logs["ctc_infeasible_labels"]
    print(f"CTCInfeasibleLabels: {counted[-1]:.0f} infeasible labels per epoch")
    assert counted == [float(corrupted.sum())] * len(counted), counted
    assert stable_finite and np.all(np.isfinite(stable_losses))
    assert stable_losses[-1] < stable_losses[0]
    assert stable_acc > 0.8, stable_acc
    print("ok")


if __name__ == "__main__":
    main()
