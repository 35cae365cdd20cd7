"""Labels the loss cannot take, and indices an `Embedding` cannot look up.

Neither makes a NaN everywhere: JAX's sparse cross-entropy gives loss 0
and a zero gradient for label 3 of 3 classes (or -1), TF on a GPU gives
NaN, and an `Embedding` maps index -1 to its last row on JAX and torch.
So they are checked from the recorded run, whatever the values are: the
integer labels of a sparse loss outside `[0, classes)` that are not its
`ignore_class`, each `Embedding`'s indices outside `[0, input_dim)`, and
the labels of a CTC loss that no alignment fits in their frames (Keras's
CTC is finite there on TF and JAX: 709, 1e5).
"""

import keras
import numpy as np

from keras_stable.audit.ctc_calls import infeasible_rows
from keras_stable.audit.ctc_calls import needed_frames
from keras_stable.audit.ctc_calls import watched_ctc
from keras_stable.audit.data import to_tensors
from keras_stable.audit.report import Finding
from keras_stable.audit.report import fix_for
from keras_stable.audit.tracing import collect_nodes
from keras_stable.audit.tracing import replaced_calls
from keras_stable.common.keras_internals import keras_mask
from keras_stable.common.keras_internals import wrapped_loss_kwargs

_SPARSE_NAMES = ("sparse_categorical_crossentropy", "sparse_softmax_cross_entropy")


def _is_sparse(loss):
    """Whether `loss` takes integer labels (one per example or token)."""
    if isinstance(loss, str):
        return loss in _SPARSE_NAMES
    fn = getattr(loss, "fn", None)
    names = [
        type(loss).__name__,
        getattr(loss, "__name__", ""),
        getattr(fn, "__name__", ""),
        getattr(loss, "name", "") or "",
    ]
    return any("sparse" in str(n).lower() for n in names)


def _is_ctc(loss):
    """Whether `loss` is a CTC loss (`keras.losses.CTC`, `StableCTC`)."""
    names = [loss] if isinstance(loss, str) else [type(loss).__name__, getattr(loss, "name", "")]
    return any("ctc" in str(n).lower() for n in names)


def _infeasible_ctc(labels, y_pred):
    """The `ctc_infeasible` finding: labels (0 pads, as for both CTC
    losses) longer than their frames, counting the blank that must
    separate two equal neighbours. The frames are `y_pred`'s time axis, or
    those its Keras mask keeps (`StableCTC` reads it)."""
    labels = np.asarray(labels)
    if labels.ndim != 2 or len(y_pred.shape) != 3:
        return []
    mask = keras_mask(y_pred)
    if mask is None:
        frames = np.full(labels.shape[0], int(y_pred.shape[1]))
    else:
        frames = np.sum(np.asarray(keras.ops.convert_to_numpy(mask)) > 0, axis=-1)
    need = [needed_frames(row[row != 0]) for row in labels.astype("int64")]
    return _ctc_finding("loss", "loss", infeasible_rows([(need, frames)]))


def _ctc_finding(layer, kind, bad):
    """The `ctc_infeasible` finding of `bad` (`{row: (needed, frames)}`),
    as a list (empty when nothing is infeasible)."""
    if not bad:
        return []
    rows = tuple(sorted(bad))
    shown = ", ".join(f"row {i}: {bad[i][0]} > {bad[i][1]}" for i in rows[:5])
    return [
        Finding(
            layer=layer,
            stage="forward",
            trap="ctc_infeasible",
            fix=fix_for("ctc_infeasible", kind),
            mode="eager",
            detail=(
                f"{len(rows)} label(s) need more frames than the model gives them "
                f"(labels plus a blank between equal neighbours; {shown}): no alignment, "
                "probability 0; keras.losses.CTC gives about 709 on TF, 1e5 on JAX, inf on torch"
            ),
            examples=rows,
        )
    ]


def _ignore_class(loss):
    ignore = getattr(loss, "ignore_class", None)
    if ignore is None:
        ignore = wrapped_loss_kwargs(loss).get("ignore_class")
    return ignore


def _rows(bad):
    """The batch rows (axis 0) holding at least one True of `bad`."""
    bad = np.asarray(bad)
    if bad.ndim == 0:
        return ()
    return tuple(int(i) for i in np.nonzero(bad.reshape(bad.shape[0], -1).any(-1))[0])


def _outside(values, size, ignore=None):
    values = np.asarray(values)
    if not (np.issubdtype(values.dtype, np.integer) or np.issubdtype(values.dtype, np.floating)):
        return None
    finite = np.isfinite(values) if np.issubdtype(values.dtype, np.floating) else True
    bad = finite & ((values < 0) | (values >= size))
    if ignore is not None:
        bad = bad & (values != ignore)
    return bad


def _finding(layer, kind, bad, values, what):
    shown = sorted({v.item() for v in np.asarray(values)[bad].ravel()})[:8]
    shown = [int(v) if float(v).is_integer() else v for v in shown]
    return Finding(
        layer=layer,
        stage="forward",
        trap="label_out_of_range",
        fix=fix_for("label_out_of_range", kind),
        mode="eager",
        detail=f"{int(np.sum(bad))} {what} outside the range, values {shown}",
        examples=_rows(bad),
    )


def _embeddings(model):
    return [n for n in collect_nodes(model) if isinstance(n.op, keras.layers.Embedding)]


def find_labels(model, x, y, loss):
    """The `label_out_of_range` findings of the batch (a list).

    Runs the model once, eagerly, with each `Embedding`'s indices recorded
    before its lookup and clipped into range for it (TensorFlow on a CPU
    raises on them), then checks `y` against the classes of the output
    for a sparse loss. Returns `[]` when the model cannot run this way.
    """
    seen = []
    running = []  # the nodes whose call is in progress, innermost last
    ctc_calls = {}  # node name -> the CTC calls it ran itself

    def tracked_call(node, original):
        def call(*args, **kwargs):
            running.append(node.name)
            try:
                return original(*args, **kwargs)
            finally:
                running.pop()

        return call

    def clipped_call(node, original):
        def call(inputs, *args, **kwargs):
            seen.append((node, np.asarray(keras.ops.convert_to_numpy(inputs))))
            safe = keras.ops.clip(inputs, 0, node.op.input_dim - 1)
            return original(safe, *args, **kwargs)

        return call

    def ctc_call(needed, frames):
        name = running[-1] if running else model.name
        ctc_calls.setdefault(name, []).append((needed, frames))

    with (
        replaced_calls(collect_nodes(model), tracked_call),
        replaced_calls(_embeddings(model), clipped_call),
        watched_ctc(ctc_call),
    ):
        try:
            y_pred = model(to_tensors(x), training=False)
        except Exception:  # noqa: BLE001 - the audit's own run reports the failure
            y_pred = None
    findings = []
    for name, node_calls in ctc_calls.items():
        # A CTC loss computed in a layer (`add_loss`): its own labels.
        findings.extend(_ctc_finding(name, "layer", infeasible_rows(node_calls)))
    for node, values in seen:
        bad = _outside(values, node.op.input_dim)
        if bad is not None and np.any(bad) and not any(f.layer == node.name for f in findings):
            what = f"indices for input_dim={node.op.input_dim} are"
            findings.append(_finding(node.name, "layer", bad, values, what))
    if y is None or y_pred is None or loss is None:
        return findings
    labels, preds = keras.tree.flatten(y), keras.tree.flatten(y_pred)
    if len(labels) != 1 or len(preds) != 1 or len(preds[0].shape) == 0:
        return findings
    if _is_ctc(loss):
        return findings + _infeasible_ctc(labels[0], preds[0])
    if not _is_sparse(loss):
        return findings
    classes = int(preds[0].shape[-1])
    ignore = _ignore_class(loss)
    bad = _outside(labels[0], classes, ignore)
    if bad is not None and np.any(bad):
        kept = "" if ignore is None else f" (ignore_class={ignore} excepted)"
        findings.append(
            _finding("loss", "loss", bad, labels[0], f"labels for {classes} classes{kept} are")
        )
    return findings
