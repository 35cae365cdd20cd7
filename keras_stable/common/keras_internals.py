"""Every reading of a private attribute of a Keras or torch object.

keras_stable keeps to Keras's public API, with a few exceptions where
Keras keeps what a drop-in needs on private attributes: the logits behind
an activation's output, the Keras mask on a tensor, the graph of a
functional model, a layer's tracker, the settings of the attention layers,
a loss's dtype policy and wrapped keyword arguments, a metric's direction,
an optimizer's own variables and variable index, torch's autograd graph,
the codes of a quantized `Embedding`. Each
reading lives here, behind a small named function whose docstring says
what it reads and why, so that a change of Keras's (or torch's) layout
breaks one place: `tests/common/test_keras_internals.py` checks every
function against the installed Keras, and fails first on an upgrade.
Written against Keras 3.15 and torch 2.13.

Nothing here imports another keras_stable module.
"""

import sys

import keras
from keras import ops
from keras import quantizers

# -- Tensors: the logits behind an activation, the Keras mask ------------


def keras_logits(tensor):
    """The logits a Keras softmax/sigmoid output carries, or None.

    `keras.activations.softmax` and `sigmoid` (and the layers calling them)
    keep their input on their output as `_keras_logits` where the tensor
    takes attributes (TF and torch tensors, concrete JAX arrays; not JAX
    tracers); Keras's probability losses read it to compute from the
    logits. Which activation produced the output is not recorded.
    """
    return getattr(tensor, "_keras_logits", None)


def set_keras_logits(tensor, logits):
    """Marks `tensor` as an activation of `logits`, as Keras's activations
    do (`_keras_logits`), so that a loss reading `keras_logits` computes
    from the logits. Returns whether the tensor took the mark (a JAX tracer
    takes no attribute)."""
    try:
        tensor._keras_logits = logits
    except AttributeError:
        return False
    return True


class _KerasMaskReader(keras.layers.Layer):
    """Returns the Keras mask a tensor carries (or None).

    Keras keeps the mask of a layer's output on the tensor, or, where the
    tensor takes no attributes (JAX tracers), in a registry keyed by the
    tensor; `Layer.__call__` looks in both and hands the result to `call`
    as `mask`. This weightless layer is the public way to read it.
    """

    def __init__(self):
        super().__init__(name="keras_mask_reader", autocast=False)
        self.supports_masking = True
        self.built = True

    def call(self, inputs, mask=None):
        return mask


_READER = None
# Per tensor type: whether it takes attributes. Keras keeps a mask in its
# registry only for tensors that refuse `setattr` (JAX tracers).
_TAKES_ATTRIBUTES = {}


def _takes_attributes(x):
    kind = type(x)
    if kind not in _TAKES_ATTRIBUTES:
        try:
            x._keras_stable_probe = None
            del x._keras_stable_probe
            _TAKES_ATTRIBUTES[kind] = True
        except AttributeError:
            _TAKES_ATTRIBUTES[kind] = False
    return _TAKES_ATTRIBUTES[kind]


def keras_mask(x):
    """The Keras mask carried by `x`, or None.

    A tensor that takes attributes (TF and torch tensors, JAX arrays)
    carries it as `_keras_mask`, read directly: an eager torch step would
    otherwise pay a layer call on every loss. For one that does not (a JAX
    tracer) Keras keeps it in a registry keyed by the tensor, read through
    a weightless layer (`Layer.__call__` hands it to `call` as `mask`).
    """
    global _READER
    if _READER is None:
        _READER = _KerasMaskReader()
    if getattr(x, "_keras_mask", None) is not None:
        return x._keras_mask
    if not hasattr(x, "shape") or isinstance(x, (list, tuple)) or _takes_attributes(x):
        return None
    return _READER(x)


# -- torch's autograd graph ------------------------------------------------


def autograd_activation(y_pred, logits):
    """`("softmax", dim)` or `("sigmoid", None)` where torch's autograd graph
    shows that `y_pred` is that activation of `logits`, else None.

    Reads `y_pred.grad_fn` (`SoftmaxBackward0` or `SigmoidBackward0`), its
    input node (`next_functions[0][0]`, which must be `logits.grad_fn`, or
    the `AccumulateGrad` node whose `variable` is `logits`) and, for a
    softmax, the saved `dim` (`_saved_dim`, stored unsigned: `-1` is
    `2**64 - 1`), returned signed. A tensor that tracks no gradient (and
    any tensor of another backend) shows nothing.
    """
    node = getattr(y_pred, "grad_fn", None)
    kind = type(node).__name__
    if kind not in ("SoftmaxBackward0", "SigmoidBackward0"):
        return None
    (source, _), *_ = node.next_functions
    if source is None or not (
        source is logits.grad_fn or getattr(source, "variable", None) is logits
    ):
        return None
    if kind == "SigmoidBackward0":
        return "sigmoid", None
    dim = node._saved_dim
    return "softmax", dim - 2**64 if dim >= 2**63 else dim


# -- Functional models and layers -----------------------------------------


def producer(tensor):
    """`(operation, node_index)` of the operation (layer) whose call
    produced the KerasTensor `tensor` (Keras's `_keras_history`), or None
    (an `Input`'s tensor has its `InputLayer`; an eager tensor none)."""
    history = getattr(tensor, "_keras_history", None)
    if history is None:
        return None
    return history.operation, history.node_index


def call_inputs(operation, node_index):
    """The KerasTensors the `node_index`-th call of `operation` took
    (Keras's `_inbound_nodes[node_index].input_tensors`): one step up a
    functional model's graph."""
    return operation._inbound_nodes[node_index].input_tensors


def replace_sublayer(layer, attribute, new):
    """Sets `layer.<attribute>` to the sublayer `new` in place of the one it
    holds, which `layer` stops tracking (its weights leave the layer's).
    Keras locks the tracker of a built layer against new state and has no
    public way to swap a sublayer: its `_tracker` is unlocked for the
    swap and locked again as it was."""
    tracker = layer._tracker
    locked = tracker.locked
    tracker.unlock()
    tracker.untrack(getattr(layer, attribute))
    setattr(layer, attribute, new)
    if locked:
        tracker.lock()


def sublayers(layer):
    """Every layer inside `layer` (its sublayers, theirs, and so on), not
    `layer` itself: those a custom layer creates in `__init__` included,
    which no public attribute lists (`Model.layers` holds the direct
    ones of a model only)."""
    return list(layer._flatten_layers(include_self=False, recursive=True))


# -- The attention layers (`MultiHeadAttention`, `GroupQueryAttention`) -----
#
# Their subclasses replace the private `_compute_attention(query, key,
# value, attention_mask, training, ...)` that `call` hands the projected
# tensors to (its signature is checked in the tests too). MHA's dropout
# rate and attention axes are read through its public properties.


def attention_scale(layer):
    """The factor of the logits, `1 / sqrt(head size)` (MHA's
    `_inverse_sqrt_key_dim`, GQA's `_inverse_sqrt_head_dim`)."""
    if isinstance(layer, keras.layers.MultiHeadAttention):
        return layer._inverse_sqrt_key_dim
    return layer._inverse_sqrt_head_dim


def returns_attention_scores(layer):
    """Whether the current `call` of a GQA layer returns the scores: its
    `call` stores the argument as `_return_attention_scores` and does not
    pass it on to `_compute_attention`."""
    return layer._return_attention_scores


def flash_attention_enabled(layer):
    """Whether the layer asks for flash attention (`_flash_attention`: True
    where the constructor's `flash_attention` is, else Keras's global
    `keras.config.is_flash_attention_enabled()`, None by default)."""
    return layer._flash_attention


def causal_attention_mask(layer, query, value):
    """The layer's own causal mask for `query` against `value`, as its
    `call` builds it (`_compute_causal_mask`: `sliding_window` included)."""
    return layer._compute_causal_mask(query, value)


def attention_seed_generator(layer):
    """The seed generator of the layer's dropout on the probabilities
    (`_dropout_layer.seed_generator`; it exists only when the rate is > 0)."""
    return layer._dropout_layer.seed_generator


def gqa_projections(layer):
    """The projection layers of a built `GroupQueryAttention`:
    `_query_dense`, `_key_dense`, `_value_dense` and (with `use_gate`)
    `_gate_dense`."""
    names = ("_query_dense", "_key_dense", "_value_dense", "_gate_dense")
    return [getattr(layer, name) for name in names if hasattr(layer, name)]


# -- Losses and metrics ---------------------------------------------------


def dtype_policy_name(loss):
    """The name of a `keras.losses.Loss`'s dtype policy (`_dtype_policy`;
    its public `dtype` is the compute dtype only, which would drop a mixed
    policy from the config)."""
    return loss._dtype_policy.name


def keras_ops_modules():
    """The modules whose `ctc_loss` (and other ops) Keras code looks up at
    call time: the public `keras.ops`, and `keras.src.ops`, which Keras's
    own losses call (`keras.losses.CTC` runs `keras.src.ops.ctc_loss`;
    loaded with Keras, read from `sys.modules`: no import of `keras.src`)."""
    internal = sys.modules.get("keras.src.ops")
    return (keras.ops,) if internal is None else (keras.ops, internal)


def wrapped_loss_kwargs(loss):
    """The keyword arguments a `LossFunctionWrapper` loss (Keras's built-in
    loss classes) passes to its function (`_fn_kwargs`, e.g.
    `ignore_class`); `{}` for any other loss."""
    return getattr(loss, "_fn_kwargs", {})


def set_metric_direction(metric, direction):
    """Tells Keras's callbacks (`EarlyStopping`, `ModelCheckpoint` with
    `mode="auto"`) that a higher (`"up"`) or lower (`"down"`) value of the
    metric is better: the `_direction` Keras's own metrics set."""
    metric._direction = direction


# -- Optimizers -------------------------------------------------------------
#
# `keras_stable.optimizers.Guarded` is a Keras optimizer that owns another:
# it needs the variables each tracks and the index Keras gives a model
# variable in its slot lists, which `BaseOptimizer` keeps private.


def optimizer_own_variables(optimizer):
    """The variables the optimizer created itself (`iterations`, the
    learning rate, its slots), without those of optimizers it wraps
    (`_variables`; the public `variables` is overridden by a wrapper)."""
    return optimizer._variables


def optimizer_trainable_variables(optimizer):
    """The model variables the optimizer was built for
    (`_trainable_variables`), in build order."""
    return optimizer._trainable_variables


def optimizer_variable_index(optimizer, variable):
    """The index of a model variable among those the optimizer was built
    for (`_get_variable_index`: by Keras's variable key, so it works on the
    variables a `stateless_apply` rebinds)."""
    return optimizer._get_variable_index(variable)


def check_optimizer_knows(optimizer, variables):
    """Raises Keras's `ValueError` when a variable is not one the optimizer
    was built for (`_check_variables_are_known`, what `apply` runs)."""
    optimizer._check_variables_are_known(variables)


# -- Quantized embeddings -------------------------------------------------
#
# A quantized `keras.layers.Embedding` (`model.quantize("int8")` or
# `"int4"`) keeps integer codes in a private variable and their scales
# beside it; its `embeddings` property returns the codes (unpacked for
# int4), not the matrix its `call` looks rows up in.


def _quantization_mode(layer):
    return getattr(layer, "quantization_mode", None)


def _check_mode(layer, mode):
    if mode not in ("int8", "int4"):
        raise ValueError(
            f"Layer {layer.name!r} is quantized with mode {mode!r}: only the "
            "'int8' and 'int4' embeddings of Keras can be read as a matrix."
        )


def _descale(codes, scale, axis):
    """Per-channel codes → values: `codes / scale`, `scale` along `axis`
    of the matrix (Keras's `AbsMaxQuantizer` stores the reciprocal step)."""
    scale = ops.cast(scale, "float32")
    scale = ops.expand_dims(scale, 1 - axis)
    return ops.divide(ops.cast(codes, "float32"), scale)


def _dequantize_groups(codes, scale, zero, g_idx, group_axis):
    """Sub-channel int4 codes → values: `(codes - zero) * scale` of each
    entry's group (Keras's `dequantize_with_sz_map`)."""
    groups = ops.cast(g_idx, "int32")
    scale = ops.take(ops.cast(scale, "float32"), groups, axis=group_axis)
    zero = ops.take(ops.cast(zero, "float32"), groups, axis=group_axis)
    return ops.multiply(ops.subtract(ops.cast(codes, "float32"), zero), scale)


def embedding_matrix(layer):
    """The `(input_dim, output_dim)` matrix an `Embedding` looks rows up in.

    Not quantized: the layer's `embeddings` (the variable itself, or with
    LoRA enabled the merged matrix). Quantized (`"int8"`, or `"int4"` per
    channel or in groups): the codes dequantized as the layer's own `call`
    does, in float32, plus the LoRA update where enabled. This is the
    matrix `ReversibleEmbedding(reverse=True)` multiplies by (Keras's
    quantized reverse path also quantizes its inputs, and leaves LoRA out).

    Args:
        layer: a built `keras.layers.Embedding` (or subclass).

    Returns:
        A `(input_dim, output_dim)` tensor (or variable).
    """
    mode = _quantization_mode(layer)
    if not mode:
        return layer.embeddings
    _check_mode(layer, mode)
    codes = layer._embeddings
    if mode == "int4":
        codes = quantizers.unpack_int4(codes, layer.output_dim, axis=-1)
    zero = getattr(layer, "embeddings_zero", None)
    if mode == "int4" and zero is not None:
        matrix = _dequantize_groups(codes, layer.embeddings_scale, zero, layer.g_idx, -1)
    else:
        matrix = _descale(codes, layer.embeddings_scale, axis=0)
    if getattr(layer, "lora_enabled", False):
        update = ops.matmul(
            ops.cast(layer.lora_embeddings_a, "float32"),
            ops.cast(layer.lora_embeddings_b, "float32"),
        )
        matrix = matrix + (layer.lora_alpha / layer.lora_rank) * update
    return matrix


def reverse_embedding_matrix(layer):
    """The `(output_dim, input_dim)` reverse kernel of a
    `ReversibleEmbedding(tie_weights=False)`, dequantized in float32 as
    its reverse `call` does when the layer is quantized (the variable
    itself otherwise).

    Args:
        layer: a built `keras.layers.ReversibleEmbedding` with
            `tie_weights=False`.

    Returns:
        A `(output_dim, input_dim)` tensor (or variable).
    """
    mode = _quantization_mode(layer)
    if not mode:
        return layer.reverse_embeddings
    _check_mode(layer, mode)
    codes = layer.reverse_embeddings
    if mode == "int4":
        codes = quantizers.unpack_int4(codes, layer.output_dim, axis=0)
    zero = getattr(layer, "reverse_embeddings_zero", None)
    if mode == "int4" and zero is not None:
        return _dequantize_groups(codes, layer.reverse_embeddings_scale, zero, layer.g_idx, 0)
    return _descale(codes, layer.reverse_embeddings_scale, axis=1)
