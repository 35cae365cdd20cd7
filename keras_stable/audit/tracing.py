"""Running a model layer by layer: what each layer received and returned.

Every layer (and every functional operation, such as a `keras.ops.norm`
applied to a Keras tensor) gets a temporary `call` that reports to the
active `Recorder` and otherwise calls the original. The same code serves
functional, Sequential and subclassed models, nested models, shared layers
and the traced functions of `tf.function` and `jax.jit`. The wrappers exist
only inside `instrument()`: importing keras_stable installs nothing.

For the gradient stage, the recorder adds a zero tensor (a "delta") to each
floating input and output of each layer; the gradient of the loss with
respect to that delta is the gradient reaching that input or output of
that call, and `x + 0` changes no value.
"""

import contextlib
import functools
import inspect

import keras
import numpy as np

# The recorders in use, innermost last (a stack, so that a recorder can run
# while another one is paused, e.g. inside a probe).
_ACTIVE = []
# The functions of `keras.ops`, as imported (before any wrapping).
_KERAS_OPS = {
    name: f
    for name, f in vars(keras.ops).items()
    if inspect.isfunction(f) and not name.startswith("_")
}
# The operations whose first argument is counted for exact zeros.
_LOGS = ("log", "log2", "log10")


class Node:
    """A layer or operation whose calls are recorded.

    `kind` is `"layer"`, `"op"` (a functional operation), `"model"` (a
    nested model: recorded, never perturbed, since its layers are),
    `"top"` (the audited model itself) or `"loss"`.
    """

    def __init__(self, op, name, kind, depth=0, arg_names=()):
        self.op = op
        self.name = name
        self.kind = kind
        self.depth = depth
        self.arg_names = arg_names

    @property
    def perturbed(self):
        return self.kind in ("layer", "op")

    @property
    def compute_dtype(self):
        policy = getattr(self.op, "dtype_policy", None)
        return getattr(policy, "compute_dtype", None)

    def __repr__(self):
        return f"Node({self.name!r}, {self.kind})"


def _children(model):
    operations = getattr(model, "operations", None)
    if operations is not None:  # functional: layers and keras.ops nodes
        return list(operations)
    return list(getattr(model, "layers", []))


def collect_nodes(model):
    """Every layer and operation of `model`, nested models included.

    A nested `keras.Model` is a `"model"` node whose own layers follow it
    (named `"outer/inner"`); any other layer is a leaf, audited as a whole.
    A layer reused in several places is listed once.
    """
    nodes = []
    seen = set()

    def visit(parent, prefix, depth):
        for child in _children(parent):
            if isinstance(child, keras.layers.InputLayer) or id(child) in seen:
                continue
            seen.add(id(child))
            name = prefix + child.name
            if isinstance(child, keras.Model):
                nodes.append(Node(child, name, "model", depth))
                visit(child, name + "/", depth + 1)
            else:
                kind = "layer" if isinstance(child, keras.layers.Layer) else "op"
                nodes.append(Node(child, name, kind, depth))

    visit(model, "", 0)
    return nodes


def _wrapper(node, original):
    @functools.wraps(original)
    def call(*args, **kwargs):
        if not _ACTIVE:
            return original(*args, **kwargs)
        return _ACTIVE[-1].run(node, original, args, kwargs)

    return call


@contextlib.contextmanager
def replaced_calls(nodes, make_call):
    """Installs `make_call(node, node.op.call)` as the `call` of every
    node's layer, and restores each layer's own on exit."""
    saved = []
    try:
        for node in nodes:
            attributes = vars(node.op)
            saved.append((node.op, "call" in attributes, attributes.get("call")))
            # Straight into the instance dict: no attribute tracking, and it
            # shadows the class's `call` for Keras's `__call__` and torch's.
            attributes["call"] = make_call(node, node.op.call)
        yield
    finally:
        for op, had, previous in reversed(saved):
            if had:
                vars(op)["call"] = previous
            else:
                vars(op).pop("call", None)


def _watching(name, original):
    @functools.wraps(original)
    def operation(*args, **kwargs):
        if _ACTIVE:
            _ACTIVE[-1].saw(name, args)
        return original(*args, **kwargs)

    return operation


@contextlib.contextmanager
def watched_operations():
    """Reports every `keras.ops.<name>` call to the active recorder (the
    operations a layer or a loss computes: evidence for the traps), and
    restores `keras.ops` on exit."""
    current = {name: getattr(keras.ops, name) for name in _KERAS_OPS}
    try:
        for name, f in current.items():
            setattr(keras.ops, name, _watching(name, f))
        yield
    finally:
        for name, f in current.items():
            setattr(keras.ops, name, f)


@contextlib.contextmanager
def instrument(nodes):
    """Installs the recording `call` of every node and the watch on
    `keras.ops`, and removes both on exit."""
    with replaced_calls(nodes, _wrapper), watched_operations():
        yield


def is_tensor(value):
    return value is not None and keras.ops.is_tensor(value)


def is_float(value):
    return is_tensor(value) and keras.backend.is_float_dtype(
        keras.backend.standardize_dtype(value.dtype)
    )


def _perturbable_kwarg(key):
    # Masks and flags select; they do not carry a gradient worth reporting.
    return "mask" not in key and key != "training"


def _labelled(base, arg):
    """`(label, tensor)` for the tensors of one argument: `base`, or
    `base[i]` for the i-th tensor of a list/tuple/dict argument."""
    if is_tensor(arg):
        return [(base, arg)]
    flat = [t for t in keras.tree.flatten(arg) if is_tensor(t)]
    return [(f"{base}[{i}]", t) for i, t in enumerate(flat)]


def tensor_leaves(args, kwargs, arg_names=()):
    """`(label, tensor, perturbable)` for every tensor of a call's arguments."""
    leaves = []
    for n, arg in enumerate(args):
        base = arg_names[n] if n < len(arg_names) else ("input" if n == 0 else f"argument {n}")
        leaves += [(label, t, is_float(t)) for label, t in _labelled(base, arg)]
    for key, arg in kwargs.items():
        perturbable = _perturbable_kwarg(key)
        leaves += [(label, t, perturbable and is_float(t)) for label, t in _labelled(key, arg)]
    return leaves


def _add_deltas(structure, deltas, start, predicate):
    """`structure` with `deltas[start], deltas[start+1], ...` added to the
    tensors for which `predicate` holds, in flattening order."""
    position = [start]

    def add(t):
        if not predicate(t):
            return t
        delta = deltas[position[0]] if position[0] < len(deltas) else None
        position[0] += 1
        if delta is None or tuple(delta.shape) != tuple(t.shape):
            return t
        return t + delta

    return keras.tree.map_structure(add, structure), position[0]


class CallInfo:
    """One recorded call: its node, its place in the run, its tensors' labels."""

    def __init__(self, node, index, depth):
        self.node = node
        self.index = index
        self.depth = depth
        self.input_labels = []
        self.input_dtypes = []
        self.perturbable = []
        self.output_dtypes = []
        self.template = None  # (args, kwargs) with tensors replaced by slots
        # The `keras.ops` functions the call ran itself (not inside a
        # recorded sublayer), by name, and how many exact zeros reached a
        # `log` (where the values are concrete: eager runs).
        self.operations = set()
        self.log_zeros = 0

    @property
    def name(self):
        return self.node.name


class Recorder:
    """Collects every call made while it is active (`with Recorder(): ...`).

    `deltas`, when given, is indexed by call: `deltas[i] = (ins, outs)`, the
    zero tensors added to the floating inputs and outputs of call `i`.
    After the run, `calls[i]` describes call `i` and `tensors[i]` is its
    `(inputs, outputs)`, lists of backend tensors.
    """

    def __init__(self, deltas=None):
        self.deltas = deltas
        self.calls = []
        self.tensors = []
        self._depth = 0
        self._running = []  # the indices of the calls in progress, innermost last

    def __enter__(self):
        _ACTIVE.append(self)
        return self

    def __exit__(self, *exc):
        _ACTIVE.remove(self)
        return False

    def run(self, node, original, args, kwargs):
        index = len(self.calls)
        info = CallInfo(node, index, self._depth)
        self.calls.append(info)
        self.tensors.append(([], []))
        deltas = None
        if node.perturbed and self.deltas is not None and index < len(self.deltas):
            deltas = self.deltas[index]
        if deltas is not None:
            args, kwargs = self._perturb_inputs(args, kwargs, deltas[0])
        self._depth += 1
        self._running.append(index)
        try:
            outputs = original(*args, **kwargs)
        finally:
            self._depth -= 1
            self._running.pop()
        if deltas is not None:
            outputs, _ = _add_deltas(outputs, deltas[1], 0, is_float)
        self._store(info, args, kwargs, outputs)
        return outputs

    def saw(self, name, args):
        """The call in progress ran `keras.ops.<name>(*args)`."""
        if not self._running:
            return
        info = self.calls[self._running[-1]]
        info.operations.add(name)
        if name in _LOGS and args and is_float(args[0]):
            try:
                values = _KERAS_OPS["convert_to_numpy"](args[0])
            except Exception:  # noqa: BLE001 - a traced tensor has no values
                return
            info.log_zeros += int(np.count_nonzero(np.asarray(values) == 0))

    def _perturb_inputs(self, args, kwargs, deltas):
        args, position = _add_deltas(args, deltas, 0, is_float)
        perturbed = {}
        for key, value in kwargs.items():
            if _perturbable_kwarg(key):
                value, position = _add_deltas(value, deltas, position, is_float)
            perturbed[key] = value
        return args, perturbed

    def _store(self, info, args, kwargs, outputs):
        leaves = tensor_leaves(args, kwargs, info.node.arg_names)
        info.input_labels = [label for label, _, _ in leaves]
        info.input_dtypes = [keras.backend.standardize_dtype(t.dtype) for _, t, _ in leaves]
        info.perturbable = [flag for _, _, flag in leaves]
        out = [t for t in keras.tree.flatten(outputs) if is_tensor(t)]
        info.output_dtypes = [keras.backend.standardize_dtype(t.dtype) for t in out]
        slot = iter(range(len(leaves)))
        info.template = keras.tree.map_structure(
            lambda t: _Slot(next(slot)) if is_tensor(t) else t, (args, kwargs)
        )
        self.tensors[info.index] = ([t for _, t, _ in leaves], out)


class _Slot:
    """Stands for the n-th tensor of a call in `CallInfo.template`."""

    def __init__(self, n):
        self.n = n


def fill_template(template, tensors):
    """The `(args, kwargs)` of a recorded call, with `tensors` put back."""
    return keras.tree.map_structure(lambda v: tensors[v.n] if isinstance(v, _Slot) else v, template)


def delta_plan(recorder):
    """For each recorded call, the shapes and dtypes of its deltas.

    Returns a list indexed by call: `(ins, outs)` of `(shape, dtype)`, empty
    for calls that are not perturbed.
    """
    plan = []
    for info, (inputs, outputs) in zip(recorder.calls, recorder.tensors):
        if not info.node.perturbed:
            plan.append(([], []))
            continue
        ins = [
            (tuple(t.shape), dtype)
            for t, dtype, flag in zip(inputs, info.input_dtypes, info.perturbable)
            if flag
        ]
        outs = [
            (tuple(t.shape), dtype)
            for t, dtype in zip(outputs, info.output_dtypes)
            if keras.backend.is_float_dtype(dtype)
        ]
        plan.append((ins, outs))
    return plan
