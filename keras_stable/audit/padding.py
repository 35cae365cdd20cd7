"""Padded steps that reach the loss unmasked: a sequence model whose batch is
padded (an `Embedding(mask_zero=True)` or `Masking` layer masks some steps)
while the model's output, `y_pred`, carries no mask. Keras 3.16's RNN layers,
`Bidirectional` and `TimeDistributed` drop the mask (keras-team/keras#23235),
so the loss then averages over the padded steps too. Not a NaN: a warning of
the report (`AuditReport.warnings`)."""

import keras
from keras import ops

from keras_stable.common.keras_internals import keras_mask

_PRODUCERS = (keras.layers.Embedding, keras.layers.Masking)


def _produces_mask(layer):
    return isinstance(layer, keras.layers.Masking) or (
        isinstance(layer, keras.layers.Embedding) and getattr(layer, "mask_zero", False)
    )


def _mask_dropper(model):
    """The first layer of the graph whose input has a mask and whose
    output, with the time steps, has none (its name), or None."""
    for layer in model.layers:
        inputs, outputs = _symbolic(layer, "input"), _symbolic(layer, "output")
        if inputs is None or outputs is None:
            continue
        masks = [keras_mask(t) for t in inputs]
        if any(m is not None for m in masks) and all(keras_mask(t) is None for t in outputs):
            if all(len(t.shape) >= 2 for t in outputs):
                return layer.name
    return None


def _symbolic(layer, which):
    try:
        tensors = getattr(layer, which)
    except (AttributeError, ValueError):  # not called, or called several times
        return None
    return [t for t in keras.tree.flatten(tensors) if isinstance(t, keras.KerasTensor)]


def padding_warnings(model, x):
    """Warnings (strings) for the mask producers of a functional `model` whose
    padding reaches `y_pred` unmasked on the batch `x`; none on unpadded
    data, on a model whose output keeps the mask, or on a model that is not
    functional (no graph to read)."""
    if not isinstance(getattr(model, "outputs", None), list) or not model.outputs:
        return []
    producers = [layer for layer in model.layers if _produces_mask(layer)]
    producers = [layer for layer in producers if _symbolic(layer, "output")]
    if not producers:
        return []
    try:
        outputs = keras.tree.flatten(model(x, training=False))
    except Exception:  # noqa: BLE001 - the runs that follow report a model that fails
        return []
    unmasked = [out for out in outputs if keras_mask(out) is None and len(out.shape) >= 2]
    if not unmasked:
        return []
    found = []
    for layer in producers:
        probe = keras.Model(model.input, _symbolic(layer, "output")[0])
        mask = keras_mask(probe(x, training=False))
        if mask is None:
            continue
        steps = tuple(mask.shape)
        reaching = [out for out in unmasked if tuple(out.shape[: len(steps)]) == steps]
        padded = int(ops.convert_to_numpy(ops.sum(ops.cast(ops.logical_not(mask), "int32"))))
        if not reaching or not padded:
            continue
        total = int(ops.convert_to_numpy(ops.size(mask)))
        dropper = _mask_dropper(model)
        where = f" (layer {dropper!r} drops it" if dropper else " (a layer drops it"
        found.append(
            f"{padded} of the {total} steps of this batch are padding (the mask of layer "
            f"{layer.name!r}), but the model's output has no mask{where}; Keras 3.16's "
            "RNN layers do): the loss counts the padded steps. Put the mask back with "
            "`keras_stable.layers.CarryMask()([rnn_output, masked_input])`, or pass "
            "`sample_weight` from the padding with reduction='mean_with_sample_weight' "
            "(docs/keras-versions.md)."
        )
    return found
