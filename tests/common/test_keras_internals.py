"""`keras_stable.common.keras_internals` against the installed Keras (and
torch): each reader of a private attribute returns what Keras itself puts
there, so that a Keras upgrade that moves one fails here first. The matrix
of a quantized `Embedding` is the one its own `call` looks rows up in and
the one `ReversibleEmbedding(reverse=True)` multiplies by, and a float64
NumPy dequantization of its stored codes."""

import ast
import inspect
import math
import pathlib
import warnings

import keras
import numpy as np
import pytest

from keras_stable.common import keras_internals
from keras_stable.common.keras_internals import attention_scale
from keras_stable.common.keras_internals import attention_seed_generator
from keras_stable.common.keras_internals import autograd_activation
from keras_stable.common.keras_internals import call_inputs
from keras_stable.common.keras_internals import causal_attention_mask
from keras_stable.common.keras_internals import dtype_policy_name
from keras_stable.common.keras_internals import embedding_matrix
from keras_stable.common.keras_internals import flash_attention_enabled
from keras_stable.common.keras_internals import gqa_projections
from keras_stable.common.keras_internals import keras_logits
from keras_stable.common.keras_internals import keras_mask
from keras_stable.common.keras_internals import keras_ops_modules
from keras_stable.common.keras_internals import producer
from keras_stable.common.keras_internals import replace_sublayer
from keras_stable.common.keras_internals import returns_attention_scores
from keras_stable.common.keras_internals import reverse_embedding_matrix
from keras_stable.common.keras_internals import set_keras_logits
from keras_stable.common.keras_internals import set_metric_direction
from keras_stable.common.keras_internals import sublayers
from keras_stable.common.keras_internals import wrapped_loss_kwargs
from tests.backend_utils import BACKEND
from tests.backend_utils import to_numpy

VOCAB, DIM = 9, 6
# "int4" is Keras's default int4: sub-channel, groups of 128 along the width
# (one group here), with zero points; "int4/4" groups of 4 (an uneven last
# group); "int4/-1" one scale per row, no zero point.
MODES = ("int8", "int4", "int4/4", "int4/-1")
BLOCK = {"int4": 128, "int4/4": 4}
LAYERS = {
    "Embedding": (keras.layers.Embedding, {}),
    "ReversibleEmbedding": (keras.layers.ReversibleEmbedding, {}),
    "untied": (keras.layers.ReversibleEmbedding, {"tie_weights": False}),
}


def quantize(layer, mode):
    config = None
    if "/" in mode:
        block_size = int(mode.split("/")[1])
        mode, config = "int4", keras.quantizers.Int4QuantizationConfig(block_size=block_size)
    with warnings.catch_warnings():
        # Keras's own tensor-to-NumPy conversion under NumPy 2.4.
        warnings.filterwarnings("ignore", "__array__ implementation", DeprecationWarning)
        layer.quantize(mode, config=config)


def _layer(kind, mode, lora=False):
    cls, kwargs = LAYERS[kind]
    keras.utils.set_random_seed(1)
    layer = cls(VOCAB, DIM, **kwargs)
    layer.build()
    float_matrix = to_numpy(layer.embeddings)
    quantize(layer, mode)
    if lora:
        layer.enable_lora(2)
        layer.lora_embeddings_b.assign(np.linspace(-1.0, 1.0, 2 * DIM).reshape(2, DIM))
    return layer, float_matrix


def _unpack_int4(packed, length, axis):
    """float64 NumPy: two's-complement nibbles, low nibble first."""
    packed = np.moveaxis(np.asarray(packed).astype("int64") & 0xFF, axis, 0)
    low, high = packed & 0xF, (packed >> 4) & 0xF
    both = np.stack([low, high], axis=1).reshape((-1,) + packed.shape[1:])[:length]
    both = np.where(both >= 8, both - 16, both)
    return np.moveaxis(both, 0, axis).astype("float64")


def _numpy_dequantized(layer, mode, reverse=False):
    """float64 NumPy from the stored variables (`(vocab, dim)`, or the
    `(dim, vocab)` reverse kernel)."""
    prefix = "reverse_embeddings" if reverse else "embeddings"
    codes = to_numpy(getattr(layer, "reverse_embeddings" if reverse else "_embeddings"))
    scale = to_numpy(getattr(layer, prefix + "_scale"))
    axis = 0 if reverse else 1  # the width's axis
    if mode != "int8":
        codes = _unpack_int4(codes, DIM, axis)
    if mode in BLOCK:
        groups = np.arange(DIM) // BLOCK[mode]
        zero = to_numpy(getattr(layer, prefix + "_zero"))
        scale, zero = np.take(scale, groups, axis=axis), np.take(zero, groups, axis=axis)
        return (codes - zero) * scale
    return codes / (scale[None, :] if reverse else scale[:, None])


# Keras's int4 reverse pass on torch transposes a 1-d scale with `.T`.
@pytest.mark.filterwarnings("ignore:The use of `x.T` on tensors:UserWarning")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", list(LAYERS))
def test_quantized_embedding_matrix_is_the_one_keras_computes_with(kind, mode):
    layer, float_matrix = _layer(kind, mode)
    matrix = to_numpy(embedding_matrix(layer))
    assert matrix.shape == (VOCAB, DIM)
    np.testing.assert_allclose(matrix, _numpy_dequantized(layer, mode), rtol=1e-6, atol=1e-7)
    # Keras's own lookup.
    np.testing.assert_allclose(matrix, to_numpy(layer(np.arange(VOCAB))), rtol=1e-6, atol=1e-7)
    # Near the float matrix (Keras's int4 groups of 4 are off by up to 40%
    # of its largest entry on torch), not the raw codes (integers up to 127).
    assert np.abs(matrix - float_matrix).max() <= 0.5 * np.abs(float_matrix).max()
    if kind == "Embedding":
        return
    # Keras's reverse projection of the unit vectors is the (dim, vocab)
    # kernel itself (their activation quantization is exact).
    reverse = to_numpy(layer(np.eye(DIM, dtype="float32"), reverse=True))
    if kind == "untied":
        kernel = to_numpy(reverse_embedding_matrix(layer))
        assert kernel.shape == (DIM, VOCAB)
        expected = _numpy_dequantized(layer, mode, reverse=True)
        np.testing.assert_allclose(kernel, expected, rtol=1e-6, atol=1e-7)
    else:
        kernel = matrix.T
    np.testing.assert_allclose(kernel, reverse, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("mode", ["int8", "int4"])
def test_lora_on_a_quantized_embedding_is_added_as_its_lookup_adds_it(mode):
    layer, _ = _layer("Embedding", mode, lora=True)
    matrix = to_numpy(embedding_matrix(layer))
    update = to_numpy(layer.lora_embeddings_a) @ to_numpy(layer.lora_embeddings_b)
    expected = _numpy_dequantized(layer, mode) + (layer.lora_alpha / layer.lora_rank) * update
    np.testing.assert_allclose(matrix, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(matrix, to_numpy(layer(np.arange(VOCAB))), rtol=1e-5, atol=1e-6)


def test_float_embeddings_are_the_variables_themselves():
    layer = keras.layers.ReversibleEmbedding(VOCAB, DIM, tie_weights=False)
    layer.build()
    assert embedding_matrix(layer) is layer.embeddings
    assert reverse_embedding_matrix(layer) is layer.reverse_embeddings


def test_every_reader_is_tested_here():
    """A function added to `keras_internals` gets its test in this file."""
    source = inspect.getsource(inspect.getmodule(test_every_reader_is_tested_here))
    public = [
        name
        for name, value in vars(keras_internals).items()
        if inspect.isfunction(value)
        and value.__module__ == keras_internals.__name__
        and not name.startswith("_")
    ]
    untested = [name for name in public if name + "(" not in source]
    assert public and not untested, untested


# -- Tensors ----------------------------------------------------------------


def test_keras_logits_are_what_keras_activations_leave_on_their_output():
    x = keras.ops.convert_to_tensor(np.array([[1.0, 2.0, 3.0]], "float32"))
    assert keras_logits(keras.activations.softmax(x)) is x
    assert keras_logits(keras.activations.sigmoid(x)) is x
    assert keras_logits(keras.activations.relu(x)) is None
    assert keras_logits(x) is None


def test_set_keras_logits_is_read_by_keras_and_by_keras_logits():
    x = keras.ops.convert_to_tensor(np.array([[30.0, 0.0, -30.0]], "float32"))
    probs = keras.ops.softmax(x)
    assert set_keras_logits(probs, x)
    assert keras_logits(probs) is x
    # Keras's own probability loss reads the mark on TensorFlow: the exact
    # cross-entropy 60 of the logits, not the clipped -log(1e-7) = 16.1 of
    # the rounded probability.
    labels = np.array([[0.0, 0.0, 1.0]], "float32")
    loss = float(to_numpy(keras.losses.categorical_crossentropy(labels, probs))[0])
    expected = 60.0 if BACKEND == "tensorflow" else -math.log(1e-7)
    assert loss == pytest.approx(expected, rel=1e-5)


def test_set_keras_logits_on_a_tensor_that_takes_no_attribute():
    assert not set_keras_logits((1.0, 2.0), None)


def test_keras_mask_reads_the_mask_keras_attaches():
    x = np.array([[[1.0], [0.0], [2.0]]], "float32")
    masked = keras.layers.Masking()(x)
    np.testing.assert_array_equal(to_numpy(keras_mask(masked)), [[True, False, True]])
    assert keras_mask(keras.ops.convert_to_tensor(x)) is None
    assert keras_mask([x]) is None


@pytest.mark.skipif(BACKEND != "jax", reason="JAX tracers take no attributes")
def test_keras_mask_of_a_jax_tracer_is_read_from_keras_registry():
    import jax

    x = np.array([[[1.0], [0.0], [2.0]]], "float32")

    def masked(x):
        out = keras.layers.Masking()(x)
        return keras.ops.cast(keras_mask(out), "float32")

    np.testing.assert_array_equal(np.asarray(jax.jit(masked)(x)), [[1.0, 0.0, 1.0]])


@pytest.mark.skipif(BACKEND != "torch", reason="torch's autograd graph")
def test_autograd_activation_reads_torch_graph():
    import torch

    leaf = torch.randn(2, 3, requires_grad=True)
    inner = leaf * 2.0
    assert autograd_activation(torch.softmax(leaf, -1), leaf) == ("softmax", -1)
    assert autograd_activation(torch.softmax(inner, dim=0), inner) == ("softmax", 0)
    assert autograd_activation(torch.softmax(inner, dim=1), inner) == ("softmax", 1)
    assert autograd_activation(keras.activations.softmax(inner), inner) == ("softmax", -1)
    assert autograd_activation(torch.sigmoid(inner), inner) == ("sigmoid", None)
    assert autograd_activation(torch.sigmoid(inner), leaf) is None
    assert autograd_activation(torch.softmax(inner, -1).clamp(0.1, 1.0), inner) is None
    assert autograd_activation(torch.softmax(leaf.detach(), -1), leaf) is None


def test_autograd_activation_shows_nothing_elsewhere():
    x = keras.ops.convert_to_tensor(np.ones((2, 3), "float32"))
    assert autograd_activation(keras.activations.softmax(x), x) is None


# -- Functional models and layers -------------------------------------------


def test_producer_and_call_inputs_walk_a_functional_graph():
    inputs = keras.Input((4,))
    first = keras.layers.Dense(3, name="first")
    second = keras.layers.Dense(2, name="second")
    hidden = first(inputs)
    again = first(keras.layers.Dense(4)(inputs))  # a second call of `first`
    outputs = second(hidden)
    operation, node_index = producer(outputs)
    assert operation is second and node_index == 0
    assert list(call_inputs(operation, node_index)) == [hidden]
    operation, node_index = producer(hidden)
    assert operation is first and node_index == 0
    assert list(call_inputs(operation, node_index)) == [inputs]
    operation, node_index = producer(again)
    assert operation is first and node_index == 1
    (upstream,) = call_inputs(operation, node_index)
    assert producer(upstream)[0] is not first
    assert isinstance(producer(inputs)[0], keras.layers.InputLayer)
    assert producer(keras.ops.ones((1, 4))) is None


class _Holder(keras.layers.Layer):
    def __init__(self, inner, **kwargs):
        super().__init__(**kwargs)
        self.inner = inner

    def call(self, x):
        return self.inner(x)


def test_replace_sublayer_swaps_a_sublayer_of_a_built_layer():
    old, new = keras.layers.Dense(2, name="old"), keras.layers.Dense(2, name="new")
    holder = _Holder(old)
    holder(np.ones((1, 3), "float32"))
    new.build((None, 3))
    assert holder.built and holder._tracker.locked
    replace_sublayer(holder, "inner", new)
    assert holder.inner is new
    assert holder._tracker.locked
    assert {id(w) for w in holder.weights} == {id(w) for w in new.weights}


def test_sublayers_lists_the_layers_a_custom_layer_creates_in_init():
    inner = keras.layers.Dense(2, name="inner")
    holder = _Holder(keras.Sequential([inner], name="block"))
    assert [layer.name for layer in sublayers(holder)] == ["block", "inner"]
    assert sublayers(inner) == []


# -- The attention layers ---------------------------------------------------


def _mha(**kwargs):
    layer = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4, **kwargs)
    layer.build((1, 3, 8), (1, 5, 8))
    return layer


def _gqa(**kwargs):
    layer = keras.layers.GroupQueryAttention(
        head_dim=4, num_query_heads=4, num_key_value_heads=2, **kwargs
    )
    layer.build((1, 3, 8), (1, 5, 8))
    return layer


@pytest.mark.parametrize(
    "cls, parameters",
    [
        (
            keras.layers.MultiHeadAttention,
            [
                "self",
                "query",
                "key",
                "value",
                "attention_mask",
                "training",
                "return_attention_scores",
                "use_causal_mask",
            ],
        ),
        (
            keras.layers.GroupQueryAttention,
            ["self", "query", "key", "value", "attention_mask", "training", "use_causal_mask"],
        ),
    ],
)
def test_compute_attention_has_the_signature_the_stable_layers_replace(cls, parameters):
    """`StableMultiHeadAttention` and `StableGroupedQueryAttention` override
    Keras's private `_compute_attention`."""
    assert list(inspect.signature(cls._compute_attention).parameters) == parameters


def test_attention_scale_is_one_over_the_root_of_the_head_size():
    assert attention_scale(_mha()) == pytest.approx(1.0 / math.sqrt(4.0))
    layer = keras.layers.GroupQueryAttention(head_dim=9, num_query_heads=2, num_key_value_heads=1)
    assert attention_scale(layer) == pytest.approx(1.0 / 3.0)


def test_mha_public_properties_read_after_build():
    layer = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4, dropout=0.25)
    assert layer.attention_axes is None
    layer.build((1, 2, 3, 8), (1, 2, 3, 8))
    assert layer.dropout == 0.25
    assert tuple(layer.attention_axes) == (1, 2)


def test_returns_attention_scores_follows_the_current_gqa_call():
    layer = _gqa()
    q, v = np.ones((1, 3, 8), "float32"), np.ones((1, 5, 8), "float32")
    layer(q, v, return_attention_scores=True)
    assert returns_attention_scores(layer) is True
    layer(q, v)
    assert returns_attention_scores(layer) is False


@pytest.mark.parametrize("make", [_mha, _gqa])
def test_flash_attention_enabled_is_the_setting(make):
    assert flash_attention_enabled(make(flash_attention=True)) is True
    default = keras.config.is_flash_attention_enabled()
    assert flash_attention_enabled(make(flash_attention=False)) is default
    assert flash_attention_enabled(make()) is default


@pytest.mark.parametrize("make", [_mha, _gqa])
def test_causal_attention_mask_is_the_lower_triangle(make):
    q, v = np.ones((1, 3, 8), "float32"), np.ones((1, 5, 8), "float32")
    mask = to_numpy(causal_attention_mask(make(), q, v))
    np.testing.assert_array_equal(mask.reshape(3, 5), np.tril(np.ones((3, 5), bool)))


@pytest.mark.parametrize("make", [_mha, _gqa])
def test_attention_seed_generator_drives_the_dropout(make):
    generator = attention_seed_generator(make(dropout=0.5))
    assert isinstance(generator, keras.random.SeedGenerator)


@pytest.mark.parametrize("use_gate", [False, True])
def test_gqa_projections_are_its_dense_layers(use_gate):
    layer = _gqa(use_gate=use_gate)
    projections = gqa_projections(layer)
    assert len(projections) == 3 + use_gate
    assert all(isinstance(p, keras.layers.EinsumDense) for p in projections)
    assert all(p in layer._layers for p in projections)


# -- Losses and metrics -----------------------------------------------------


def test_dtype_policy_name_keeps_a_mixed_policy():
    assert dtype_policy_name(keras.losses.MeanSquaredError()) == "float32"
    loss = keras.losses.MeanSquaredError(dtype="mixed_float16")
    assert dtype_policy_name(loss) == "mixed_float16"
    assert loss.dtype == "float16"  # the public attribute drops the policy


def test_wrapped_loss_kwargs_are_those_keras_passes_to_its_function():
    loss = keras.losses.SparseCategoricalCrossentropy(ignore_class=3)
    assert wrapped_loss_kwargs(loss)["ignore_class"] == 3
    assert wrapped_loss_kwargs(keras.losses.Loss()) == {}
    assert wrapped_loss_kwargs("mse") == {}


@pytest.mark.parametrize("direction, better", [("up", 2.0), ("down", 0.5)])
def test_set_metric_direction_is_read_by_keras_callbacks(direction, better):
    metric = keras.metrics.MeanSquaredError(name="score")
    set_metric_direction(metric, direction)
    stop = keras.callbacks.EarlyStopping(monitor="score")
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile(loss="mse", metrics=[metric])
    model.fit(np.ones((2, 1)), np.ones((2, 1)), epochs=1, verbose=0, callbacks=[stop])
    assert bool(to_numpy(stop.monitor_op(better, 1.0)))


# -- Optimizers ----------------------------------------------------------------


def test_keras_ops_modules_hold_the_ctc_loss_that_keras_losses_call():
    public, internal = keras_ops_modules()
    assert public is keras.ops
    calls = []
    original = internal.ctc_loss

    def watched(*args, **kwargs):
        calls.append(len(args))
        return original(*args, **kwargs)

    internal.ctc_loss = watched
    try:
        keras.losses.CTC()(np.array([[1, 2]], "int32"), np.zeros((1, 4, 3), "float32"))
    finally:
        internal.ctc_loss = original
    assert calls


def test_optimizer_state_readers():
    a = keras.Variable(np.ones((2,), "float32"), name="a")
    b = keras.Variable(np.ones((3,), "float32"), name="b")
    optimizer = keras.optimizers.Adam()
    optimizer.build([a, b])
    assert keras_internals.optimizer_trainable_variables(optimizer) == [a, b]
    assert keras_internals.optimizer_variable_index(optimizer, b) == 1
    own = keras_internals.optimizer_own_variables(optimizer)
    assert any(v is optimizer.iterations for v in own)
    assert len(own) == len(optimizer.variables)  # two slots per variable and the counters
    keras_internals.check_optimizer_knows(optimizer, [a, b])
    stranger = keras.Variable(np.ones((1,), "float32"), name="c")
    with pytest.raises(ValueError):
        keras_internals.check_optimizer_knows(optimizer, [stranger])


# -- The one home ------------------------------------------------------------

PACKAGE = pathlib.Path(keras_internals.__file__).parents[1]
# Known readers elsewhere, each with its reason. The torch attention kernel
# asks torch whether a functorch transform is active (`torch._C`), inside
# the torch sub-package that alone imports torch.
ELSEWHERE = {"ops/_kernels/torch/attention.py"}


def _own_private_names(trees):
    """The underscore names keras_stable defines itself: modules, functions,
    classes, and attributes it assigns (`self._x = ...`)."""
    names = {path.stem for path in PACKAGE.rglob("*.py")} | {
        path.name for path in PACKAGE.rglob("*") if path.is_dir()
    }
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
                names.add(node.attr)
            elif isinstance(node, ast.alias):
                names.add((node.asname or node.name).split(".")[-1])
    return names


def test_private_attributes_of_keras_and_torch_are_read_here_only():
    """An attribute with a leading underscore that keras_stable does not
    define is Keras's or torch's: read it in `keras_internals`, nowhere
    else (a string given to `getattr`/`hasattr` counts too)."""
    trees = {
        path.relative_to(PACKAGE).as_posix(): ast.parse(path.read_text())
        for path in PACKAGE.rglob("*.py")
    }
    internals = pathlib.Path(keras_internals.__file__).relative_to(PACKAGE).as_posix()
    del trees[internals]
    own = _own_private_names(trees)
    found = []
    for name, tree in trees.items():
        if name in ELSEWHERE:
            continue
        for node in ast.walk(tree):
            attr = None
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                attr = node.attr
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr", "setattr")
                and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                attr = node.args[1].value
            if attr and attr.startswith("_") and not attr.startswith("__") and attr not in own:
                found.append(f"{name}:{node.lineno} {attr}")
    assert not found, found
