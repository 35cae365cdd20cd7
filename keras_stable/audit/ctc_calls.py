"""CTC computed inside a layer: the labels no alignment fits, seen where the
CTC operation itself is called.

A CTC loss is not always the compiled loss: the keras-io captcha OCR
tutorial's `CTCLayer` computes it in its `call` and `add_loss`es it (with
`tf.compat.v1.nn.ctc_loss`), others call `keras.ops.ctc_loss` or
`keras.losses.CTC` there. The label check of `labels.py` reads the compiled
loss only; this one watches the CTC operations themselves while the model
runs (`keras.ops.ctc_loss`, which `keras.losses.CTC` calls,
`keras_stable.ops.ctc_loss`, and on TensorFlow `tf.nn.ctc_loss` and
`tf.compat.v1.nn.ctc_loss`), reads their
labels, label lengths and frame counts, and names the layer whose call ran
one with a label longer than its frames. Values are read where they are
concrete (the eager run of `find_labels`).
"""

import contextlib
import functools
import inspect
import sys

import keras
import numpy as np

from keras_stable.common.keras_internals import keras_ops_modules


def needed_frames(label):
    """Frames a CTC label needs: one per class, plus a blank between two
    equal neighbours."""
    label = np.asarray(label).reshape(-1)
    return len(label) + int(np.sum(label[1:] == label[:-1]))


def _numpy(t):
    return np.asarray(keras.ops.convert_to_numpy(t))


def _dense_rows(labels, lengths):
    labels, lengths = _numpy(labels), _numpy(lengths).reshape(-1)
    return [labels[i, : int(n)] for i, n in enumerate(lengths)]


def _sparse_rows(labels, batch):
    """The label sequences of a `tf.SparseTensor` of `(row, position)`."""
    rows = [[] for _ in range(batch)]
    for (row, _position), value in sorted(
        zip(map(tuple, _numpy(labels.indices).tolist()), _numpy(labels.values).tolist())
    ):
        rows[row].append(value)
    return rows


def _keras_rows(a):
    """`keras.ops.ctc_loss(target, output, target_length, output_length)`."""
    return _dense_rows(a["target"], a["target_length"]), _numpy(a["output_length"]).reshape(-1)


def _tf_rows(a):
    """`tf.nn.ctc_loss(labels, logits, label_length, logit_length, ...)`."""
    frames = _numpy(a["logit_length"]).reshape(-1)
    labels = a["labels"]
    if hasattr(labels, "indices"):
        return _sparse_rows(labels, len(frames)), frames
    return _dense_rows(labels, a["label_length"]), frames


def _tf_v1_rows(a):
    """`tf.compat.v1.nn.ctc_loss(labels, inputs, sequence_length, ...)`:
    sparse labels, one frame count per sample."""
    frames = _numpy(a["sequence_length"]).reshape(-1)
    return _sparse_rows(a["labels"], len(frames)), frames


def _watch(original, read, on_call):
    signature = inspect.signature(original)

    @functools.wraps(original)
    def ctc(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            rows, frames = read(bound.arguments)
            on_call([needed_frames(r) for r in rows], [int(f) for f in frames])
        except Exception:  # noqa: BLE001 - traced tensors, other forms: not known
            pass
        return original(*args, **kwargs)

    return ctc


@contextlib.contextmanager
def watched_ctc(on_call):
    """Calls `on_call(needed, frames)` at every CTC call while active (the
    frames each sample's label needs, and those it has: lists, one entry per
    sample)."""
    from keras_stable import ops as stable_ops

    modules = (*keras_ops_modules(), stable_ops)
    targets = [(module, "ctc_loss", _keras_rows) for module in modules]
    tf = sys.modules.get("tensorflow")
    if keras.backend.backend() == "tensorflow" and tf is not None:
        targets += [(tf.nn, "ctc_loss", _tf_rows), (tf.compat.v1.nn, "ctc_loss", _tf_v1_rows)]
    saved = []
    try:
        for module, name, read in targets:
            original = getattr(module, name)
            saved.append((module, name, original))
            setattr(module, name, _watch(original, read, on_call))
        yield
    finally:
        for module, name, original in reversed(saved):
            setattr(module, name, original)


def infeasible_rows(calls):
    """The samples (rows) of the CTC calls `[(needed, frames)]` whose label
    needs more frames than it has, with both counts: `{row: (needed,
    frames)}`."""
    bad = {}
    for needed, frames in calls:
        for row, (n, f) in enumerate(zip(needed, frames)):
            if n > f:
                bad.setdefault(row, (n, f))
    return bad
