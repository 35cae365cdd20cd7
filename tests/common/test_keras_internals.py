"""`keras_stable.common.keras_internals` against the installed Keras: the
matrix of a quantized `Embedding` is the one its own `call` looks rows up
in and the one `ReversibleEmbedding(reverse=True)` multiplies by, and a
float64 NumPy dequantization of its stored codes."""

import warnings

import keras
import numpy as np
import pytest

from keras_stable.common.keras_internals import embedding_matrix
from keras_stable.common.keras_internals import reverse_embedding_matrix
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
