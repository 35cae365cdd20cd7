"""The weights of Keras layers that Keras's public API does not expose as
the matrix they stand for.

A quantized `keras.layers.Embedding` (`model.quantize("int8")` or
`"int4"`) keeps integer codes in a private variable and their scales beside
it; its `embeddings` property returns the codes (unpacked for int4), not
the matrix its `call` looks rows up in. Every reading of such a private
attribute lives here, behind a small named function, so that a change of
Keras's layout breaks one place (checked against the installed Keras in
`tests/common/test_keras_internals.py`). Written against Keras 3.15.
"""

from keras import ops
from keras import quantizers


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
