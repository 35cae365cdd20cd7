"""The batch and the loss the audit runs on: checks, `.npz` files, the loss.

A batch on disk is one `.npz` file: `x` (one input), `x.0`, `x.1`, ...
(a list of inputs) or `x.<name>` (a dict of inputs); the same for `y`,
which is optional. `NaNAudit` writes this format and
`python -m keras_stable.audit` reads it.
"""

import re

import keras
import numpy as np


class AuditInputError(ValueError):
    """The model, the batch or the loss given to the audit cannot be used."""


def _first_line(error):
    """The gist of an exception in one line (Keras puts the cause of a
    failing `call()` on the line after "Exception encountered when ...")."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip() for line in str(error).splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return type(error).__name__
    if lines[0].startswith("Exception encountered") and len(lines) > 1:
        return f"{lines[0]} {lines[1]}"
    return lines[0]


def as_arrays(data, name):
    """`data` (an array, a list/tuple or dict of arrays) as NumPy arrays."""
    if data is None:
        return None
    try:
        return keras.tree.map_structure(
            lambda a: (
                np.asarray(keras.ops.convert_to_numpy(a))
                if keras.ops.is_tensor(a)
                else np.asarray(a)
            ),
            data,
        )
    except Exception as error:  # noqa: BLE001 - any failure is a bad input
        raise AuditInputError(
            f"`{name}` is not an array or a list/dict of arrays: {_first_line(error)}"
        ) from error


def batch_size(x, name="x"):
    """The common leading dimension of the arrays of `x`."""
    sizes = {np.shape(a)[0] if np.ndim(a) else None for a in keras.tree.flatten(x)}
    if not sizes or None in sizes:
        raise AuditInputError(
            f"`{name}` must hold arrays with a batch dimension; got shapes {shapes(x)}."
        )
    if len(sizes) != 1:
        raise AuditInputError(
            f"the arrays of `{name}` have different batch sizes: shapes {shapes(x)}."
        )
    return sizes.pop()


def shapes(data):
    return keras.tree.map_structure(lambda a: tuple(np.shape(a)), data)


def _check_input_shapes(model, x):
    """A clear error when `x` cannot match a functional model's inputs."""
    inputs = getattr(model, "inputs", None)
    if not inputs:
        return
    try:
        flat = keras.tree.flatten(x)
    except Exception:  # noqa: BLE001
        return
    if len(flat) != len(inputs):
        raise AuditInputError(
            f"the model takes {len(inputs)} input(s) "
            f"({', '.join(i.name for i in inputs)}), the data holds {len(flat)}: "
            f"shapes {shapes(x)}."
        )
    if isinstance(x, dict):
        return  # matched by name when the model is called
    for array, spec in zip(flat, inputs):
        expected = tuple(spec.shape)
        got = tuple(np.shape(array))
        if len(got) != len(expected) or any(
            e is not None and e != g for e, g in zip(expected, got)
        ):
            raise AuditInputError(
                f"input '{spec.name}' expects shape {expected}, the data has {got}."
            )


def check_batch(model, x, y):
    """`x` and `y` as NumPy arrays, checked against each other and `model`."""
    if not isinstance(model, keras.Model):
        raise AuditInputError(f"`model` must be a keras.Model, got {type(model).__name__}.")
    if x is None:
        raise AuditInputError("`x` is required: the batch the model is called on.")
    x = as_arrays(x, "x")
    y = as_arrays(y, "y")
    n = batch_size(x, "x")
    if y is not None and batch_size(y, "y") != n:
        raise AuditInputError(
            f"`x` has {n} examples and `y` {batch_size(y, 'y')}: shapes {shapes(x)} and {shapes(y)}."
        )
    _check_input_shapes(model, x)
    return x, y


def to_tensors(data):
    if data is None:
        return None
    return keras.tree.map_structure(keras.ops.convert_to_tensor, data)


class _FunctionLoss(keras.losses.Loss):
    """A loss function as `compile(loss=fn)` runs it: `keras.losses.Loss`
    casts `y_true` and `y_pred` to float32, applies the Keras mask of
    `y_pred` and takes the mean."""

    def __init__(self, fn):
        super().__init__(name=getattr(fn, "__name__", None) or "loss")
        self.fn = fn

    def call(self, y_true, y_pred):
        return self.fn(y_true, y_pred)


def _loss_callable(loss):
    if isinstance(loss, (str, dict)):
        loss = keras.losses.get(loss)
    if isinstance(loss, keras.losses.Loss):
        return loss
    if callable(loss):
        return _FunctionLoss(loss)
    raise AuditInputError(f"`loss` must be a loss, a function or a name, got {loss!r}.")


def loss_name(loss):
    return getattr(loss, "name", None) or getattr(loss, "__name__", None) or type(loss).__name__


def resolve_loss(model, loss, y):
    """The loss as a function of `(y, y_pred)`, or `None` (no labels).

    `loss` given, else the loss `model` was compiled with. Several outputs
    take a list or dict of losses (by output name) or one loss for all, and
    their sum is the loss, as in `model.fit` with equal weights.
    """
    if loss is None:
        loss = getattr(model, "loss", None)
        if loss is not None and y is None:
            return None  # compiled, but no labels: the sum of the outputs
    if y is None:
        if loss is not None:
            raise AuditInputError("`loss` was given without `y`: pass the labels of the batch too.")
        return None
    if loss is None:
        raise AuditInputError(
            "`y` was given without a loss: pass `loss=` or audit a model compiled with one."
        )
    if isinstance(loss, (list, tuple)):
        # `compile(loss=[loss_fn, None])`: an output without a loss (the
        # keras-io GPT's second output) takes no labels.
        losses = [None if item is None else _loss_callable(item) for item in loss]
        if all(fn is None for fn in losses):
            raise AuditInputError(f"`loss` has no loss for any output: {loss!r}.")
    elif (
        isinstance(loss, dict)
        and all(isinstance(k, str) for k in loss)
        and "class_name" not in loss
    ):
        names = list(getattr(model, "output_names", []) or [])
        missing = [name for name in loss if name not in names]
        if missing:
            raise AuditInputError(f"`loss` names outputs {missing}; the model's are {names}.")
        losses = [_loss_callable(loss[name]) if name in loss else None for name in names]
    else:
        single = _loss_callable(loss)
        return _mean_loss(single)
    return _sum_of_losses(losses)


def _mean(value):
    value = keras.ops.convert_to_tensor(value)
    return keras.ops.mean(value) if len(value.shape) else value


def _mean_loss(fn):
    def loss(y_true, y_pred):
        y_true = keras.tree.flatten(y_true)
        y_pred = [t for t in keras.tree.flatten(y_pred)]
        if len(y_true) == 1 and len(y_pred) == 1:
            return _mean(fn(y_true[0], y_pred[0]))
        return sum(_mean(fn(t, p)) for t, p in zip(y_true, y_pred))

    loss.__name__ = loss_name(fn)
    return loss


def _sum_of_losses(losses):
    def loss(y_true, y_pred):
        y_true, y_pred = keras.tree.flatten(y_true), keras.tree.flatten(y_pred)
        pairs = list(zip(y_pred, losses))
        if len(y_true) == sum(fn is not None for fn in losses) < len(losses):
            # As `fit`: the labels are those of the outputs with a loss.
            pairs = [(p, fn) for p, fn in pairs if fn is not None]
        return sum(_mean(fn(t, p)) for t, (p, fn) in zip(y_true, pairs) if fn is not None)

    loss.__name__ = "+".join(loss_name(fn) for fn in losses if fn is not None)
    return loss


def _flat_items(prefix, data):
    if data is None:
        return {}
    if isinstance(data, dict):
        return {f"{prefix}.{key}": np.asarray(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return {f"{prefix}.{n}": np.asarray(value) for n, value in enumerate(data)}
    return {prefix: np.asarray(data)}


def save_batch(path, x, y=None):
    """Writes a batch to the `.npz` file `path`, as the command line reads it.

    Args:
        path: the file to write (`numpy.savez` adds `.npz` if missing).
        x: an array (stored as `x`), a list of arrays (`x.0`, `x.1`, ...)
            or a dict of arrays by input name (`x.<name>`).
        y: the labels, optional, stored the same way under `y`.
    """
    np.savez(path, **_flat_items("x", x), **_flat_items("y", y))


def _unflatten(prefix, items):
    if prefix in items:
        return items[prefix]
    keys = {k[len(prefix) + 1 :]: v for k, v in items.items() if k.startswith(prefix + ".")}
    if not keys:
        return None
    if all(k.isdigit() for k in keys):
        return [keys[k] for k in sorted(keys, key=int)]
    return keys


def load_batch(path):
    """Reads a batch written by `save_batch` (or by `NaNAudit`).

    Args:
        path: the `.npz` file.

    Returns:
        `(x, y)`: each an array, a list or a dict of arrays as it was
        saved; `y` is `None` when the file holds no labels.

    Raises:
        AuditInputError: the file cannot be read or holds no `x`.
    """
    try:
        with np.load(path, allow_pickle=False) as archive:
            items = {key: archive[key] for key in archive.files}
    except (OSError, ValueError) as error:
        raise AuditInputError(f"cannot read the batch {path}: {_first_line(error)}") from error
    x = _unflatten("x", items)
    if x is None:
        raise AuditInputError(
            f"{path} holds no `x`: expected arrays named x (one input), x.0, x.1, ... "
            f"or x.<input name>; found {sorted(items)}."
        )
    return x, _unflatten("y", items)
