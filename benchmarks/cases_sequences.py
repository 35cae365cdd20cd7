"""The benchmark rows of sequences and segmentation (issue 22): CTC against
`keras.ops.ctc_loss` (TF's native `tf.nn.ctc_loss` kernel on TensorFlow,
optax's on JAX, torch's on torch) and `keras.losses.CTC`, and the overlap
losses against `keras.losses.Dice` and `keras.losses.Tversky`; forward and
backward with respect to the logits (CTC) or the predicted mask.

Every label is feasible (lengths and repeats fit the frames), so every
candidate computes a finite loss and the rows compare cost only. CTC sizes
`(B, T, C, L)`: M and L are the sizes of the issue, (32, 200, 64, 40) and
(8, 1000, 32, 200). Overlap sizes `(B, H, W, 1)`: binary masks.
"""

import numpy as np
from case import Case
from case import K
from case import labelled_like
from case import stable_class

CTC_SIZES = {"S": (8, 50, 16, 10), "M": (32, 200, 64, 40), "L": (8, 1000, 32, 200)}
OVERLAP_SIZES = {"S": (8, 64, 64, 1), "M": (16, 128, 128, 1), "L": (8, 256, 256, 1)}


def _labels(shape, rng):
    """Labels in `[1, C)` (0 is the blank) of random lengths in
    `[L // 2, L]`, zero-padded, and the lengths."""
    batch, _, classes, max_label = shape
    lengths = rng.integers(max_label // 2, max_label + 1, batch).astype("int32")
    labels = rng.integers(1, classes, (batch, max_label)).astype("int32")
    labels[np.arange(max_label)[None, :] >= lengths[:, None]] = 0
    return labels, lengths


def build_ctc(shape, dtype, rng):
    """`(target, logits, target_length, output_length)`; every sample uses
    all `T` frames; the logits are differentiated."""
    batch, time, classes, _ = shape
    labels, lengths = _labels(shape, rng)
    logits = (2.0 * rng.standard_normal((batch, time, classes))).astype("float32")
    frames = np.full((batch,), time, "int32")
    return [labels, logits, lengths, frames], 1


def build_ctc_loss(shape, dtype, rng):
    """`(y_true, y_pred)` of the loss classes: zero-padded labels (0 is the
    blank and the padding, as `keras.losses.CTC` reads them) and logits."""
    (labels, logits, _, _), _ = build_ctc(shape, dtype, rng)
    return [labels, logits], 1


def build_ctc_masked(shape, dtype, rng):
    """`(y_true, y_pred, target_length, output_length)`: the logits of
    each sample's frames past its random length in `[3T/4, T]` are all 0,
    the frames a `Masking(0.0)` layer marks as padding."""
    (labels, logits, lengths, _), _ = build_ctc(shape, dtype, rng)
    time = logits.shape[1]
    frames = rng.integers(3 * time // 4, time + 1, len(logits)).astype("int32")
    logits[np.arange(time)[None, :] >= frames[:, None]] = 0.0
    return [labels, logits, lengths, frames], 1


def masked_stable_ctc(m):
    """`StableCTC` of logits whose padded frames a `Masking` layer marks
    (the layer is part of the measured call)."""
    loss, masking = m.ks.losses.StableCTC(), K(m).layers.Masking(0.0)
    return lambda y, p, tl, n: loss(y, masking(p))


def build_masks(shape, dtype, rng):
    """A binary target mask and a predicted mask in (0, 1)."""
    y_true = (rng.uniform(size=shape) < 0.3).astype("float32")
    y_pred = rng.uniform(0.01, 0.99, shape).astype("float32")
    return [y_true, y_pred], 1


def sequence_cases():
    """CTC (op and loss class), Dice and Tversky."""
    return [
        Case(
            "ctc_loss",
            "op",
            "sequences",
            CTC_SIZES,
            build_ctc,
            lambda m: lambda t, o, tl, ol: m.ks.ops.ctc_loss(t, o, tl, ol),
            {
                "keras.ops.ctc_loss": lambda m: (
                    lambda t, o, tl, ol: K(m).ops.ctc_loss(t, o, tl, ol)
                ),
            },
        ),
        Case(
            "losses.StableCTC",
            "loss",
            "sequences",
            CTC_SIZES,
            build_ctc_loss,
            stable_class("losses", "StableCTC"),
            {"keras.losses.CTC": lambda m: K(m).losses.CTC()},
        ),
        Case(
            # Frames padded per sample, as a Keras mask says: Keras's
            # `CTC` reads every frame, so the built-in is the op given
            # the lengths, the same loss.
            "losses.StableCTC (Keras mask)",
            "loss",
            "sequences",
            CTC_SIZES,
            build_ctc_masked,
            labelled_like(masked_stable_ctc, stable_class("losses", "StableCTC")),
            {
                "keras.ops.ctc_loss(output_length)": lambda m: (
                    lambda y, p, tl, n: K(m).ops.ctc_loss(y, p, tl, n)
                ),
            },
        ),
        Case(
            "losses.StableDice",
            "loss",
            "segmentation",
            OVERLAP_SIZES,
            build_masks,
            stable_class("losses", "StableDice"),
            {"keras.losses.Dice": lambda m: K(m).losses.Dice()},
        ),
        Case(
            # Keras 3.15.1's Tversky weights the false negatives by `alpha`:
            # the built-in is given the weights swapped, so that both
            # candidates compute the same loss.
            "losses.StableTversky",
            "loss",
            "segmentation",
            OVERLAP_SIZES,
            build_masks,
            stable_class("losses", "StableTversky", alpha=0.3, beta=0.7),
            {"keras.losses.Tversky": lambda m: K(m).losses.Tversky(alpha=0.7, beta=0.3)},
        ),
    ]
