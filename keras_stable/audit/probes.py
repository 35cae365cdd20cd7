"""Stress probes: the latent traps a batch has not hit yet.

Each probe changes the batch (or the model's precision) the way training
eventually will, and the audit runs again on the result:

- `zeros`: every floating input is 0 (a norm, a normalisation or a
  `sqrt` at the zero vector);
- `coincident`: every example is the first one (distances between
  examples are exactly 0);
- `large`: floating inputs times 1e3 (large logits: `exp` overflow);
  0/1 inputs (masks) are left alone;
- `masked`: every mask off: boolean and 0/1 inputs all 0, and token inputs
  all padding (0) when an `Embedding` has `mask_zero=True` (fully masked
  rows);
- `mixed_float16`, `mixed_bfloat16`: the model rebuilt from its config
  under that dtype policy (set globally while it is rebuilt, so the
  sublayers a custom layer creates in `__init__` take it too, as in a user's
  mixed-precision run), with the same weights (vanishing epsilons,
  float16 overflow).

A probe that does not apply to a model (no floating input, a batch of one,
no mask, a subclassed model without `get_config`) is skipped with a note.
"""

import keras
import numpy as np

from keras_stable.audit.report import PROBES

LARGE_SCALE = 1e3


class ProbeNotApplicable(Exception):
    """The probe has nothing to change in this model or batch."""


def _is_float(a):
    return np.issubdtype(a.dtype, np.floating)


def _is_mask(a):
    return a.dtype == bool or (a.ndim >= 1 and a.size > 1 and bool(np.all((a == 0) | (a == 1))))


def _map(data, fn):
    return keras.tree.map_structure(fn, data) if data is not None else None


def _changes(before, after):
    return any(
        not np.array_equal(a, b)
        for a, b in zip(keras.tree.flatten(before), keras.tree.flatten(after))
    )


def _has_mask_zero(model):
    for layer in _all_layers(model):
        if getattr(layer, "mask_zero", False):
            return True
    return False


def _all_layers(model):
    for layer in getattr(model, "layers", []):
        yield layer
        if isinstance(layer, keras.Model):
            yield from _all_layers(layer)


def _zeros(model, x, y):
    new = _map(x, lambda a: np.zeros_like(a) if _is_float(a) else a)
    return model, new, y


def _coincident(model, x, y):
    def first(a):
        return np.repeat(a[:1], a.shape[0], axis=0)

    return model, _map(x, first), _map(y, first)


def _large(model, x, y):
    new = _map(
        x, lambda a: (a * LARGE_SCALE).astype(a.dtype) if _is_float(a) and not _is_mask(a) else a
    )
    return model, new, y


def _masked(model, x, y):
    pad_tokens = _has_mask_zero(model)

    def off(a):
        if _is_mask(a):
            return np.zeros_like(a)
        if pad_tokens and np.issubdtype(a.dtype, np.integer):
            return np.zeros_like(a)
        return a

    return model, _map(x, off), y


def _clone_layer(policy):
    def clone(layer):
        if not isinstance(layer, keras.layers.Layer):
            return layer  # a functional operation (keras.ops): no weights, no dtype
        keep = layer.dtype_policy.name != "float32" or isinstance(layer, keras.layers.InputLayer)
        dtype = layer.dtype_policy if keep else policy
        if isinstance(layer, keras.layers.Lambda):
            # Its Python function does not survive get_config/from_config in
            # safe mode; the same function object does the same work.
            config = layer.get_config()
            output_shape = config.get("output_shape")
            return keras.layers.Lambda(
                layer.function,
                output_shape=None if isinstance(output_shape, dict) else output_shape,
                mask=layer.mask if not isinstance(config.get("mask"), dict) else None,
                arguments=layer.arguments,
                name=layer.name,
                dtype=dtype,
            )
        config = layer.get_config()
        if not keep:
            config["dtype"] = policy
        return layer.__class__.from_config(config)

    return clone


def _precision(policy):
    def probe(model, x, y):
        # Under the policy set globally, as a user trains in mixed
        # precision: the sublayers a custom layer creates in `__init__`
        # without a dtype take it too (its config does not hold them).
        before = keras.config.dtype_policy()
        try:
            keras.config.set_dtype_policy(policy)
            clone = keras.models.clone_model(
                model, clone_function=_clone_layer(policy), recursive=True
            )
            clone.set_weights(model.get_weights())
        except Exception as error:  # noqa: BLE001 - any failure: cannot rebuild
            message = str(error).strip().splitlines()
            raise ProbeNotApplicable(
                f"cannot rebuild the model under {policy}: "
                f"{message[0] if message else type(error).__name__}"
            ) from error
        finally:
            keras.config.set_dtype_policy(before)
        return clone, x, y

    return probe


_PROBES = {
    "zeros": _zeros,
    "coincident": _coincident,
    "large": _large,
    "masked": _masked,
    "mixed_float16": _precision("mixed_float16"),
    "mixed_bfloat16": _precision("mixed_bfloat16"),
}

_NOT_APPLICABLE = {
    "zeros": "the batch has no floating input",
    "coincident": "every example is already the same (or the batch has one)",
    "large": "the batch has no floating input other than 0/1 masks",
    "masked": "the batch has no mask (boolean or 0/1 input, or tokens of an Embedding with mask_zero=True)",
}


def check_probes(stress):
    """The probes `stress` asks for: `True` is all of them."""
    if stress is True:
        return list(PROBES)
    if not stress:
        return []
    names = [stress] if isinstance(stress, str) else list(stress)
    unknown = [name for name in names if name not in PROBES]
    if unknown:
        raise ValueError(f"Unknown stress probe(s) {unknown}: expected some of {list(PROBES)}.")
    return names


def apply(name, model, x, y):
    """`(model, x, y)` under the probe `name`; `ProbeNotApplicable` when it
    would change nothing."""
    new_model, new_x, new_y = _PROBES[name](model, x, y)
    y_changed = y is not None and _changes(y, new_y)
    if new_model is model and not _changes(x, new_x) and not y_changed:
        raise ProbeNotApplicable(_NOT_APPLICABLE[name])
    return new_model, new_x, new_y
