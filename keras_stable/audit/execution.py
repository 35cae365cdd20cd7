"""One recorded run of the model and its loss, eager or compiled, per backend.

A run calls the model on the batch with every layer recorded (see
`tracing`), applies the loss, and differentiates the loss with respect to
the zero deltas added to each layer's floating inputs and outputs. The
differentiation is the backend's own: `tf.GradientTape` (compiled:
`tf.function(jit_compile=True)`), `jax.value_and_grad` (compiled:
`jax.jit`), `torch.autograd` (eager only). These, `random_state_kept`
(torch's global generator) and `compile_function` (the callbacks' per-step
check, compiled), are the only
places where the audit uses a backend directly; each is imported inside
the function that needs it, never when keras_stable is imported.
"""

import contextlib
import inspect

import keras
import numpy as np

from keras_stable.audit.tracing import Node
from keras_stable.audit.tracing import Recorder
from keras_stable.audit.tracing import _add_deltas
from keras_stable.audit.tracing import delta_plan
from keras_stable.audit.tracing import fill_template
from keras_stable.audit.tracing import is_float
from keras_stable.audit.tracing import is_tensor
from keras_stable.common.keras_internals import sublayers

TOP = "top"
LOSS = "loss"


class LossError(Exception):
    """The loss failed on `(y, y_pred)` (the model itself ran)."""


def _checked_loss(loss_fn):
    def loss(y_true, y_pred):
        try:
            return loss_fn(y_true, y_pred)
        except Exception as error:
            raise LossError(str(error)) from error

    return loss


class Run:
    """The numbers of one run, as NumPy arrays (half precision as float32).

    Attributes:
        mode: `"eager"` or `"compiled"`.
        calls: the `CallInfo` of each recorded call, in call order.
        inputs, outputs: per call, the list of its tensors.
        grads_in: per call, the gradient reaching each perturbed input (in
            the order of `CallInfo.perturbable`).
        grads_out: per call, the gradient reaching each floating output.
        loss: the scalar that was differentiated.
        producers: for each model output, `(call, position among the
            call's floating outputs)` of the layer that returned it, or None.
    """

    def __init__(self, mode):
        self.mode = mode
        self.calls = []
        self.inputs = []
        self.outputs = []
        self.grads_in = None
        self.grads_out = None
        self.loss = None
        self.producers = []


def to_numpy(t):
    """A backend tensor as a NumPy array; float16/bfloat16 as float32."""
    dtype = keras.backend.standardize_dtype(t.dtype)
    if dtype in ("float16", "bfloat16"):
        t = keras.ops.cast(t, "float32")
    return np.asarray(keras.ops.convert_to_numpy(t))


def _scalar(loss_value, outputs):
    """The number that is differentiated: the loss, else the sum of the
    finite model outputs (a -inf that a mask put there is not an error)."""
    if loss_value is not None:
        value = keras.ops.cast(loss_value, "float32")
        return keras.ops.mean(value) if len(value.shape) else value
    total = keras.ops.zeros((), "float32")
    for out in outputs:
        if is_float(out):
            out = keras.ops.cast(out, "float32")
            total = total + keras.ops.sum(
                keras.ops.where(keras.ops.isfinite(out), out, keras.ops.zeros_like(out))
            )
    return total


def _producers(recorder, outputs):
    """Which recorded call returned each floating model output (by identity)."""
    found = []
    for out in outputs:
        if not is_float(out):
            continue
        producer = None
        for info, (_, outs) in zip(recorder.calls, recorder.tensors):
            if not info.node.perturbed:
                continue
            floats = [t for t in outs if is_float(t)]
            for position, t in enumerate(floats):
                if t is out:
                    producer = (info.index, position)
        found.append(producer)
    return found


def _perturb_unproduced(y_pred, producers, deltas):
    """Adds `deltas` to the floating outputs that no recorded layer returned
    (computed in a subclassed model's own `call`), in order."""
    missing = iter(deltas)
    position = iter(range(len(producers)))

    def add(t):
        if not is_float(t):
            return t
        return t + next(missing) if producers[next(position)] is None else t

    return keras.tree.map_structure(add, y_pred)


def _plus_model_losses(loss_value, model):
    """The compiled loss (or None: a model trained on its `add_loss` terms
    alone, as the keras-io captcha OCR's CTC layer) plus the model's
    `add_loss` terms and weight regularizers, as `fit` adds them
    (`Trainer.compute_loss`)."""
    extra = [keras.ops.sum(keras.ops.cast(t, "float32")) for t in model.losses]
    if not extra:
        return loss_value
    if loss_value is not None:
        value = keras.ops.cast(loss_value, "float32")
        extra.append(keras.ops.mean(value) if len(value.shape) else value)
    return sum(extra)


def make_body(model, loss_fn):
    """`body(x, y, deltas) -> (scalar, recorder, producers)`: one recorded
    call of the model and the loss; `deltas=None` records only."""
    top = Node(model, model.name, TOP, arg_names=("x",))
    loss_node = Node(loss_fn, LOSS, LOSS, arg_names=("y_true", "y_pred"))

    def body(x, y, deltas):
        recorder = Recorder(deltas["calls"] if deltas else None)
        with recorder:
            if deltas:
                x, _ = _add_deltas(x, deltas["x"], 0, is_float)
            y_pred = recorder.run(top, lambda x: model(x, training=False), (x,), {})
            outputs = [t for t in keras.tree.flatten(y_pred) if is_tensor(t)]
            producers = _producers(recorder, outputs)
            if deltas and deltas["out"]:
                y_pred = _perturb_unproduced(y_pred, producers, deltas["out"])
            loss_value = None
            if loss_fn is not None:
                loss_value = recorder.run(loss_node, _checked_loss(loss_fn), (y, y_pred), {})
            if loss_fn is not None or getattr(model, "loss", None) is None:
                loss_value = _plus_model_losses(loss_value, model)
        return _scalar(loss_value, outputs), recorder, producers

    return body


def make_deltas(plan):
    """Zero tensors of the shapes and dtypes of `plan` (see `delta_plan`)."""

    def zeros(spec):
        shape, dtype = spec
        return keras.ops.zeros(shape, dtype)

    return {
        "calls": [
            ([zeros(s) for s in ins], [zeros(s) for s in outs]) for ins, outs in plan["calls"]
        ],
        "x": [zeros(s) for s in plan["x"]],
        "out": [zeros(s) for s in plan["out"]],
    }


def _differentiate_tensorflow(body, deltas, x, y, compiled):
    import tensorflow as tf

    holder = {}

    def step(deltas, x, y):
        with tf.GradientTape() as tape:
            tape.watch(keras.tree.flatten(deltas))
            scalar, recorder, producers = body(x, y, deltas)
        grads = tape.gradient(scalar, deltas, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        holder["recorder"], holder["producers"] = recorder, producers
        return scalar, recorder.tensors, grads

    if compiled:
        step = tf.function(step, jit_compile=True)
    # Each audit traces a new function once, which TensorFlow would log as
    # "excessive retracing" after a few audits.
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel("ERROR")
    try:
        scalar, tensors, grads = step(deltas, x, y)
    finally:
        logger.setLevel(level)
    return scalar, holder["recorder"], holder["producers"], tensors, grads


def _differentiate_jax(body, deltas, x, y, compiled):
    import jax

    holder = {}

    def step(deltas, x, y):
        scalar, recorder, producers = body(x, y, deltas)
        holder["recorder"], holder["producers"] = recorder, producers
        return scalar, recorder.tensors

    step = jax.value_and_grad(step, has_aux=True)
    if compiled:
        step = jax.jit(step)
    (scalar, tensors), grads = step(deltas, x, y)
    return scalar, holder["recorder"], holder["producers"], tensors, grads


@contextlib.contextmanager
def random_state_kept():
    """Puts back the backend's global random state on exit: Keras's torch
    dropout draws from torch's global generator, not from the layer's
    seed generator (whose state the audit restores as a model variable)."""
    if keras.backend.backend() != "torch":
        yield
        return
    import torch

    state = torch.get_rng_state()
    try:
        yield
    finally:
        torch.set_rng_state(state)


def _differentiate_torch(body, deltas, x, y, compiled):
    import torch

    del compiled  # torch runs eagerly (torch.compile takes minutes on a CPU)
    flat = keras.tree.flatten(deltas)
    for d in flat:
        d.requires_grad_(True)
    scalar, recorder, producers = body(x, y, deltas)
    grads = [None] * len(flat)
    if scalar.requires_grad and flat:
        grads = torch.autograd.grad(scalar, flat, allow_unused=True)
    grads = [torch.zeros_like(d) if g is None else g for d, g in zip(flat, grads)]
    packed = keras.tree.pack_sequence_as(deltas, grads)
    return scalar, recorder, producers, recorder.tensors, packed


_DIFFERENTIATE = {
    "tensorflow": _differentiate_tensorflow,
    "jax": _differentiate_jax,
    "torch": _differentiate_torch,
}


def compile_function(fn):
    """`fn` compiled once for the backend in use (`jax.jit`, a
    `tf.function` graph); eager on torch, where each op is already one
    call. For the callbacks' per-step checks: one dispatch instead of one
    per weight."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return jax.jit(fn)
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(fn, reduce_retracing=True)
    return fn


def compiled_mode_available():
    """Whether this backend has a compiled mode the audit runs (not torch)."""
    return keras.backend.backend() in ("tensorflow", "jax")


def _fill(run, recorder, tensors, producers):
    run.calls = recorder.calls
    run.inputs = [[to_numpy(t) for t in ins] for ins, _ in tensors]
    run.outputs = [[to_numpy(t) for t in outs] for _, outs in tensors]
    run.producers = producers


def plan_deltas(model, loss_fn, x, y):
    """Runs the model and the loss once, eagerly, recording every call.

    Returns the plan of the deltas of the gradient runs: the shapes and
    dtypes of the floating inputs and outputs of each call (see
    `tracing.delta_plan`), of the model's inputs (`"x"`) and of the outputs
    no recorded layer returned (`"out"`).
    """
    _, recorder, producers = make_body(model, loss_fn)(x, y, None)
    inputs, outputs = recorder.tensors[0] if recorder.calls else ([], [])

    def spec(t):
        return tuple(t.shape), keras.backend.standardize_dtype(t.dtype)

    floats = [t for t in outputs if is_float(t)]
    return {
        # What each call computed, seen where the values are concrete.
        "operations": [(i.node.name, i.operations, i.log_zeros) for i in recorder.calls],
        "calls": delta_plan(recorder),
        "x": [spec(t) for t in inputs if is_float(t)],
        "out": [spec(t) for t, p in zip(floats, producers) if p is None],
    }


def differentiate(model, loss_fn, x, y, plan, mode):
    """A recorded run with gradients, in `mode` (`"eager"`/`"compiled"`)."""
    body = make_body(model, loss_fn)
    deltas = make_deltas(plan)
    differentiate_fn = _DIFFERENTIATE[keras.backend.backend()]
    scalar, recorder, producers, tensors, grads = differentiate_fn(
        body, deltas, x, y, compiled=(mode == "compiled")
    )
    run = Run(mode)
    _fill(run, recorder, tensors, producers)
    for info, (name, operations, log_zeros) in zip(run.calls, plan["operations"]):
        if info.node.name == name:  # traced runs see no values: the plan's
            info.operations |= operations
            info.log_zeros = max(info.log_zeros, log_zeros)
    run.loss = to_numpy(scalar)
    run.grads_in = [[to_numpy(g) for g in ins] for ins, _ in grads["calls"]]
    run.grads_out = [[to_numpy(g) for g in outs] for _, outs in grads["calls"]]
    # The model itself (call 0): the gradient reaching x and its outputs.
    if run.calls:
        run.grads_in[0] = [to_numpy(g) for g in grads["x"]]
        missing = iter(grads["out"])
        run.grads_out[0] = [
            to_numpy(next(missing)) if p is None else run.grads_out[p[0]][p[1]] for p in producers
        ]
    return run


def rerun_in_float32(info, inputs, grad_out):
    """Calls the layer of `info` again on its recorded inputs, in float32.

    Returns `(value_finite, gradient_finite)`: whether the layer's output,
    and the gradient reaching its floating inputs (for the recorded output
    gradient, else ones), are finite when the same inputs are computed in
    float32. Tells an epsilon that vanished in half precision from a trap
    that fires in any precision. Returns `None` when the layer cannot be
    called again this way.
    """
    try:
        tensors = []
        floats = []
        for array, dtype in zip(inputs, info.input_dtypes):
            if keras.backend.is_float_dtype(dtype):
                t = keras.ops.convert_to_tensor(np.asarray(array, "float32"))
                floats.append(len(tensors))
            else:
                t = keras.ops.convert_to_tensor(np.asarray(array).astype(dtype))
            tensors.append(t)
        op = info.node.op
        call = op if inspect.isfunction(op) else op.call  # the loss is a function
        # Its sublayers too (a custom layer's, made in `__init__`): each
        # casts its inputs to its own compute dtype.
        inner = [] if inspect.isfunction(op) else sublayers(op)

        def fn(float_tensors):
            current = list(tensors)
            for n, t in zip(floats, float_tensors):
                current[n] = t
            args, kwargs = fill_template(info.template, current)
            return [t for t in keras.tree.flatten(call(*args, **kwargs)) if is_float(t)]

        primals = [tensors[n] for n in floats]
        policies = [layer.dtype_policy for layer in inner]
        try:
            for layer in inner:
                layer.dtype_policy = "float32"
            outputs, grads = _value_and_vjp(fn, primals, grad_out)
        finally:
            for layer, policy in zip(inner, policies):
                layer.dtype_policy = policy
    except Exception:  # noqa: BLE001 - any failure means "cannot tell"
        return None
    value_finite = all(np.all(np.isfinite(to_numpy(o))) for o in outputs)
    grad_finite = all(np.all(np.isfinite(to_numpy(g))) for g in grads if g is not None)
    return value_finite, grad_finite


def _cotangents(outputs, grad_out):
    cot = []
    for n, out in enumerate(outputs):
        if (
            grad_out is not None
            and n < len(grad_out)
            and tuple(grad_out[n].shape) == tuple(out.shape)
        ):
            cot.append(keras.ops.convert_to_tensor(np.nan_to_num(grad_out[n]).astype("float32")))
        else:
            cot.append(keras.ops.ones_like(out))
    return cot


def _value_and_vjp(fn, primals, grad_out):
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            tape.watch(primals)
            outputs = fn(primals)
        grads = tape.gradient(
            outputs,
            primals,
            output_gradients=_cotangents(outputs, grad_out),
            unconnected_gradients=tf.UnconnectedGradients.ZERO,
        )
        return outputs, grads
    if backend == "jax":
        import jax

        outputs, pullback = jax.vjp(fn, primals)
        (grads,) = pullback(_cotangents(outputs, grad_out))
        return outputs, grads
    import torch

    primals = [p.detach().requires_grad_(True) for p in primals]
    outputs = fn(primals)
    grads = torch.autograd.grad(
        outputs, primals, grad_outputs=_cotangents(outputs, grad_out), allow_unused=True
    )
    return outputs, grads
