"""Argument validation: every check raises a `ValueError` naming the
argument, what it received and what was expected.

Checks of constructor arguments run without tensors (at construction);
checks of shapes run on static shapes at the first call.
"""

import math
import numbers
import warnings

import keras
import numpy as np
from keras import ops

from keras_stable.common.dtypes import dtype_of
from keras_stable.common.dtypes import static_shape
from keras_stable.common.keras_internals import autograd_activation
from keras_stable.common.keras_internals import keras_logits

REDUCTIONS = (
    "sum_over_batch_size",
    "sum",
    "mean",
    "mean_with_sample_weight",
    "none",
    None,
)
# float32 holds every integer up to 2**24 exactly; an int32 index must fit.
_INT32_LIMIT = 2.0**31


def _is_int(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_axis(axis, rank=None, name="axis", multiple=False, where=""):
    """The one axis validator of keras_stable.

    `multiple=False` accepts an int (NumPy integers included);
    `multiple=True` also accepts a tuple or list of ints and `None` (all
    axes), as `keras.ops` reductions do.

    Without `rank` (a constructor argument) the type is checked and a plain
    Python value returned (`int`, `tuple` or `None`: configs stay JSON).
    With `rank`, the axis is checked against it and returned canonical: a
    non-negative int, or (`multiple=True`) a sorted tuple of non-negative
    ints without repeats.

    `where` is appended to the error message (e.g. "for layer 'softmax'").
    """
    suffix = f" {where}" if where else ""
    if multiple and axis is None:
        return None if rank is None else tuple(range(rank))
    if multiple and isinstance(axis, (tuple, list)):
        axes = tuple(check_axis(a, rank, name=name, where=where) for a in axis)
        if rank is not None:
            if len(set(axes)) != len(axes):
                raise ValueError(f"`{name}`={axis!r} repeats an axis{suffix}.")
            return tuple(sorted(axes))
        return axes
    if not _is_int(axis):
        expected = "an int, a tuple of ints or None" if multiple else "an int"
        raise ValueError(
            f"`{name}` must be {expected}{suffix}, got {axis!r} of type {type(axis).__name__}."
        )
    axis = int(axis)
    if rank is None:
        return axis
    if not -rank <= axis < rank:
        raise ValueError(
            f"Invalid `{name}`={axis}{suffix} for an input of rank {rank}: "
            f"expected an integer in [{-rank}, {rank - 1}]."
        )
    if multiple:
        return (axis % rank,)
    return axis % rank


def check_bool(value, name):
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be a bool, got {value!r} of type {type(value).__name__}.")
    return value


def check_layer_axis(axis):
    """A layer's `axis`: an int, or a non-empty tuple/list of ints
    (returned as a tuple).

    Not `None` and not `()`: as `keras.layers.Softmax` and
    `UnitNormalization`, a layer normalises over the axes it is given.
    """
    if isinstance(axis, (tuple, list)) and axis:
        return check_axis(axis, multiple=True)
    if not isinstance(axis, (tuple, list)) and axis is not None:
        try:
            return check_axis(axis)
        except ValueError:
            pass
    # The message starts as `check_axis`'s does for one axis.
    raise ValueError(
        f"`axis` must be an int, got {axis!r} of type {type(axis).__name__} "
        "(a non-empty tuple/list of ints is accepted too)."
    )


def check_positive_int(value, name, allow_none=False):
    """An int > 0 (not a bool), or None where `allow_none`."""
    if allow_none and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        expected = "a positive int or None" if allow_none else "a positive int"
        raise ValueError(f"`{name}` must be {expected}, got {value!r}.")
    return value


def check_finite_float(value, name, positive=False):
    """None, or a finite real number (> 0 where `positive`) -> float."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"`{name}` must be a finite float or None, got {value!r}.")
    if positive and value <= 0:
        raise ValueError(f"`{name}` must be positive, got {value!r}.")
    return float(value)


def check_label_smoothing(label_smoothing, closed=False):
    """Raises a `ValueError` unless `0 <= label_smoothing < 1` (`<= 1` when
    `closed`: the fused head's uniform target is well defined)."""
    interval = "[0, 1]" if closed else "[0, 1)"
    if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, (int, float)):
        raise ValueError(
            f"`label_smoothing` must be a float in {interval}, got {label_smoothing!r}."
        )
    if not (0.0 <= label_smoothing < 1.0 or (closed and label_smoothing == 1.0)):
        raise ValueError(
            f"`label_smoothing` must be in {interval}, got label_smoothing={label_smoothing}."
        )
    return float(label_smoothing)


def check_ignore_class(ignore_class):
    if ignore_class is not None and not _is_int(ignore_class):
        raise ValueError(f"`ignore_class` must be an int or None, got {ignore_class!r}.")
    return None if ignore_class is None else int(ignore_class)


def check_reduction(reduction):
    if reduction not in REDUCTIONS:
        raise ValueError(f"Invalid `reduction`={reduction!r}: expected one of {list(REDUCTIONS)}.")
    return reduction


def check_same_shape(a, b, name_a, name_b, hint=""):
    if static_shape(a) != static_shape(b):
        raise ValueError(
            f"`{name_a}` and `{name_b}` must have the same shape, got "
            f"{name_a}.shape={static_shape(a)} and "
            f"{name_b}.shape={static_shape(b)}.{hint}"
        )


def broadcast_shape(shape_a, shape_b, name_a, name_b):
    """Static broadcast of two shapes (unknown dims allowed), else ValueError."""
    a, b = list(shape_a), list(shape_b)
    n = max(len(a), len(b))
    a = [1] * (n - len(a)) + a
    b = [1] * (n - len(b)) + b
    out = []
    for da, db in zip(a, b):
        if da == 1:
            out.append(db)
        elif db == 1 or db is None:
            out.append(da)
        elif da is None:
            out.append(db)
        elif da == db:
            out.append(da)
        else:
            raise ValueError(
                f"`{name_a}` of shape {tuple(shape_a)} and `{name_b}` of shape "
                f"{tuple(shape_b)} do not broadcast together."
            )
    return tuple(out)


def prepare_mask(mask, x, name="mask"):
    """Validates that `mask` broadcasts to `x` (without changing x's shape).

    Returns a boolean tensor broadcast to `x`'s shape, or `None`. A float
    mask is read as "entry counts where mask > 0".
    """
    if mask is None:
        return None
    mask = ops.convert_to_tensor(mask)
    x_shape = static_shape(x)
    m_shape = static_shape(mask)
    if len(m_shape) > len(x_shape):
        raise ValueError(
            f"`{name}` of shape {m_shape} has a higher rank than the input of "
            f"shape {x_shape}; it must broadcast to the input's shape."
        )
    error = ValueError(
        f"`{name}` of shape {m_shape} does not broadcast to the input's shape {x_shape}."
    )
    try:
        full = broadcast_shape(x_shape, m_shape, "x", name)
    except ValueError:
        raise error from None
    if tuple(full) != tuple(x_shape) and None not in x_shape:
        raise error
    if dtype_of(mask) != "bool":
        mask = ops.greater(mask, 0)
    if isinstance(x, keras.KerasTensor):
        # A symbolic shape may hold None, which `broadcast_to` cannot take.
        return ops.logical_and(mask, ops.ones_like(x, dtype="bool"))
    return ops.broadcast_to(mask, ops.shape(x))


def check_positive(value, name):
    """A finite real number > 0 (e.g. Huber's `delta`) -> float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(
            f"`{name}` must be a finite number > 0, got {value!r} of type {type(value).__name__}."
        )
    value = float(value)
    if not (value > 0 and value < float("inf")):
        raise ValueError(f"`{name}` must be a finite number > 0, got {name}={value}.")
    return value


def check_non_negative(value, name):
    """A finite real number >= 0 (not a bool) -> float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(
            f"`{name}` must be a finite number >= 0, got {value!r} of type {type(value).__name__}."
        )
    value = float(value)
    if not 0.0 <= value < float("inf"):
        raise ValueError(f"`{name}` must be a finite number >= 0, got {name}={value}.")
    return value


def check_gamma(gamma):
    """The focusing parameter of a focal loss: a finite number >= 0, or None
    (TF Addons' spelling of no modulating factor), which is 0."""
    if gamma is None:
        return 0.0
    return check_non_negative(gamma, "gamma")


def check_alpha(alpha, per_class=False):
    """A focal loss's balancing factor: None, or a float in [0, 1].

    With `per_class=True` a list or tuple of floats in [0, 1] (one weight
    per class) is accepted too and returned as a list (configs stay JSON).
    """
    if alpha is None:
        return None
    if per_class and isinstance(alpha, (list, tuple)):
        if not alpha:
            raise ValueError("`alpha` must not be an empty list.")
        return [_check_unit(a, "alpha", per_class) for a in alpha]
    return _check_unit(alpha, "alpha", per_class)


def _check_unit(value, name, per_class):
    expected = "None, a float in [0, 1]" + (
        " or a list of them (one per class)" if per_class else ""
    )
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(
            f"`{name}` must be {expected}, got {value!r} of type {type(value).__name__}."
        )
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"`{name}` must be in [0, 1], got {name}={value}.")
    return value


def check_unit_interval_labels(labels, name="y_true"):
    """Labels given as host data (NumPy arrays, Python numbers or lists) must
    lie in [0, 1], NaN (a missing label) aside: a `ValueError` naming
    `name`, the shape and the offending range otherwise.

    Tensors are not checked: reading them would cost a device
    synchronisation on every eager step, and a compiled function cannot
    raise on values. Returns `labels` unchanged.
    """
    if not isinstance(labels, (np.ndarray, np.generic, numbers.Real, list, tuple)):
        return labels
    values = np.asarray(labels)
    if values.dtype.kind not in "biuf":
        return labels
    values = values.astype("float64")
    bad = (values < 0) | (values > 1)
    if bad.any():
        raise ValueError(
            f"`{name}` must hold labels in [0, 1] (NaN marks a missing label), got "
            f"values from {values[bad].min()} to {values[bad].max()} outside it in "
            f"{name} of shape {values.shape}."
        )
    return labels


def align_ranks(y_true, y_pred, what="y_pred", check=True):
    """Keras's `squeeze_or_expand_to_same_rank` for a loss's two inputs.

    Where the ranks differ by one and the longer side ends in a size-1 axis,
    a rank-1 shorter side is expanded (`(batch,)` labels for `(batch, 1)`
    predictions) and otherwise the size-1 axis is squeezed, as Keras's
    losses do. With `check`, a `ValueError` unless the shapes then match
    (`what` names the predictions in the message).
    """
    t, p = static_shape(y_true), static_shape(y_pred)
    if len(p) == len(t) + 1 and p[-1] == 1:
        if len(t) == 1:
            y_true = ops.expand_dims(y_true, -1)
        else:
            y_pred = ops.squeeze(y_pred, -1)
    elif len(t) == len(p) + 1 and t[-1] == 1:
        if len(p) == 1:
            y_pred = ops.expand_dims(y_pred, -1)
        else:
            y_true = ops.squeeze(y_true, -1)
    if check and static_shape(y_true) != static_shape(y_pred):
        raise ValueError(
            f"`y_true` and `{what}` must have the same shape, got "
            f"y_true.shape={t} and {what}.shape={p}."
        )
    return y_true, y_pred


# The distances of the triplet losses (TF Addons' `distance_metric`).
DISTANCE_METRICS = ("L2", "squared-L2", "angular")


def check_margin(margin, name="margin"):
    """A real number (a loss's margin) -> float."""
    if isinstance(margin, bool) or not isinstance(margin, numbers.Real):
        raise ValueError(
            f"`{name}` must be a float, got {margin!r} of type {type(margin).__name__}. "
            "A tensor-valued margin (accepted by TF Addons) is not: it would "
            "not serialize. For a margin per pair, scale the distances instead."
        )
    return float(margin)


def check_similar_label(similar_label):
    """Which 0/1 label marks a similar pair: 1 (TF Addons) or 0."""
    if isinstance(similar_label, bool) or similar_label not in (0, 1):
        raise ValueError(
            "`similar_label` must be 1 (label 1 = similar pair, TF Addons' "
            "convention) or 0 (label 0 = similar pair, the keras-io siamese "
            f"tutorial's), got {similar_label!r}."
        )
    return int(similar_label)


def check_temperature(temperature):
    """A softmax temperature: a finite float > 0."""
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, numbers.Real)
        or not float(temperature) > 0
        or float(temperature) == float("inf")
    ):
        raise ValueError(
            f"`temperature` must be a finite float > 0, got temperature={temperature!r}."
        )
    return float(temperature)


def check_distance_metric(distance_metric):
    """One of `DISTANCE_METRICS` (a string: every loss serializes)."""
    if not isinstance(distance_metric, str) or (distance_metric not in DISTANCE_METRICS):
        raise ValueError(
            f"Invalid `distance_metric`={distance_metric!r}: expected one of "
            f"{list(DISTANCE_METRICS)}. (TF Addons also accepts a callable; "
            "keras_stable does not, so that every loss serializes: compute "
            "custom distances with `keras_stable.ops.pairwise_distance`.)"
        )
    return distance_metric


def warn_if_probabilities(logits, from_logits, name):
    """Warns, as Keras does, when `from_logits=True` meets probabilities.

    Keras marks the output of a softmax or sigmoid activation (the tensor
    keeps its logits as `_keras_logits`: TF and torch tensors, concrete JAX
    arrays; on TF graphs the producing op is `Softmax`/`Sigmoid`).
    keras_stable's losses default to `from_logits=True` where Keras defaults
    to False, so a literal swap of a model with a softmax head would
    silently compute the cross-entropy of probabilities read as logits.
    Inside `jax.jit` (a JAX model's `fit`) tracers take no mark: nothing is
    warned about there; `keras_stable.audit` runs the model eagerly and
    warns.
    """
    if not from_logits:
        return
    if exposed_logits(logits) is not None:
        warnings.warn(
            f"`{name}` received `from_logits=True`, but its input was "
            "produced by a softmax or sigmoid activation and does not hold "
            "logits. Pass `from_logits=False` (keras_stable defaults to "
            "`from_logits=True`; Keras defaults to `False`), or remove the "
            "activation.",
            stacklevel=3,
        )


def exposed_logits(y_pred):
    """The logits behind a softmax or sigmoid output, or None.

    Keras's activations keep their input on their output
    (`keras_internals.keras_logits`: TensorFlow and torch tensors, concrete
    JAX arrays; not JAX tracers); on a
    TensorFlow graph the producing op is `Softmax` or `Sigmoid` and its
    input is the logits. Which activation produced the output is not
    recorded on the tensor: `softmax_scores` and `sigmoid_log_probabilities`
    check that the activation reproduces `y_pred` before using the logits.
    """
    logits = keras_logits(y_pred)
    if logits is not None:
        return logits
    try:
        if y_pred.op.type in ("Softmax", "Sigmoid"):
            return y_pred.op.inputs[0]
    except Exception:  # eager tensors and other backends have no op
        pass
    return None


def graph_activation(y_pred, logits, rank):
    """`"softmax"` (over the last of `rank` axes) or `"sigmoid"` where the
    graph that produced `y_pred` shows it is that activation of `logits`,
    else None.

    A TensorFlow graph shows it in the producing op (`Softmax`, always over
    the last axis, or `Sigmoid`, with `logits` as its input); torch's
    autograd graph (`keras_internals.autograd_activation`: a softmax over
    the last axis or a sigmoid, whose input node is `logits`'s). Eager TF
    tensors, JAX arrays and tensors that track no gradient show nothing.
    What the graph shows needs no check of the values: reading them would
    make a step compute the activation that a loss reading only the logits
    lets a compiler drop.
    """
    try:
        op = y_pred.op
        if len(op.inputs) == 1 and op.inputs[0].name == logits.name:
            return {"Softmax": "softmax", "Sigmoid": "sigmoid"}.get(op.type)
        return None
    except Exception:  # eager tensors and other backends have no op
        pass
    shown = autograd_activation(y_pred, logits)
    if shown is None:
        return None
    kind, dim = shown
    if kind == "sigmoid":
        return "sigmoid"
    return "softmax" if dim % rank == rank - 1 else None


def integer_labels(y_true, y_pred, axis):
    """Returns `(labels, integral)`: int32 labels and where they are exact.

    Integer labels are used as they are. Float labels (Keras's data adapters
    may hand integer targets over as floats) are read exactly where they
    hold an integral value; `integral` is False where they do not (a
    fractional or NaN label), and the loss is NaN there - never the loss of a
    silently truncated class. A size-1 class axis on the labels (`(batch, 1)`
    for `(batch, classes)` logits) is squeezed.
    """
    y_true = ops.convert_to_tensor(y_true)
    rank = len(static_shape(y_pred))
    class_axis = check_axis(axis, rank)
    if len(static_shape(y_true)) == rank and static_shape(y_true)[class_axis] == 1:
        y_true = ops.squeeze(y_true, axis=class_axis)
    dtype = dtype_of(y_true)
    if dtype.startswith(("int", "uint")):
        return y_true, None
    if dtype == "bool" or not dtype.startswith("float"):
        raise ValueError(
            f"`y_true` must hold integer class indices, got dtype {dtype} "
            f"with shape {static_shape(y_true)}."
        )
    y_true = ops.cast(y_true, "float32") if dtype != "float64" else y_true
    integral = ops.logical_and(
        ops.equal(y_true, ops.floor(y_true)),
        ops.less(ops.abs(y_true), _INT32_LIMIT),
    )
    labels = ops.cast(ops.where(integral, y_true, ops.zeros_like(y_true)), "int32")
    return labels, integral
