"""The attention computation shared by the two attention layers (private).

`StableMultiHeadAttention` and `StableGroupedQueryAttention` keep Keras's
projections, masks and weights and replace only the step between the
projected `query`, `key`, `value` and the output projection: `attend`
below. It brings Keras's layout (`(B, <free dims>, <attention dims>, N, H)`,
with `attention_axes`) to the `(B, T, N, H)` layout of
`keras_stable.ops.dot_product_attention`, merges the masks, and calls the
op — or, when the probabilities are needed (`return_attention_scores`, or
dropout on them in training), the two steps of the op's materialised
formulation (`ops.attention.attention_probabilities`, then dropout, then
`weighted_values`) in float32: one implementation of the math. That second
path also serves what the op does not take: a value head size other than
the key's (`value_dim != key_dim`) and lengths unknown until run time.

Either way a query row with no key to attend to gives output 0 and
exactly zero gradients, where Keras gives the mean of the values (or 0
once `dropout > 0`).
"""

import math

import keras
from keras import ops

from keras_stable import ops as stable_ops
from keras_stable.common.keras_internals import attention_seed_generator
from keras_stable.common.keras_internals import causal_attention_mask
from keras_stable.common.keras_internals import flash_attention_enabled
from keras_stable.ops.attention import attention_probabilities
from keras_stable.ops.attention import weighted_values

FLASH_SCORES_ERROR = (
    "Returning attention scores is not supported when flash attention is "
    "enabled. Please disable flash attention to access attention scores."
)


def _static_dims(x):
    return tuple(x.shape)


def _layout(rank, attention_axes):
    """Axes of Keras's projected tensors: free (batch) axes, attention axes.

    A projected tensor has rank `rank`: `(B, <free>, <attention>, N, H)`
    in any interleaving of free and attention axes; the last two are the
    heads and the channels.
    """
    attention = tuple(attention_axes)
    free = tuple(i for i in range(rank - 2) if i not in attention)
    return free, attention


def _flatten(x, free, attention):
    """`(B, <free>, <attention>, N, H)` in Keras order → `(B', L, N, H)`."""
    rank = len(x.shape)
    perm = free + attention + (rank - 2, rank - 1)
    x = ops.transpose(x, perm) if perm != tuple(range(rank)) else x
    shape = ops.shape(x)
    free_shape = tuple(shape[: len(free)])
    attention_shape = tuple(shape[len(free) : len(free) + len(attention)])
    if len(free) == 1 and len(attention) == 1:
        return x, free_shape, attention_shape
    length = math.prod(attention_shape)
    return ops.reshape(x, (-1, length, shape[-2], shape[-1])), free_shape, attention_shape


def _unflatten(x, free, attention, free_shape, attention_shape):
    """The inverse of `_flatten` for the output `(B', T, N, H)`."""
    rank = len(free) + len(attention) + 2
    if not (len(free) == 1 and len(attention) == 1):
        shape = ops.shape(x)
        x = ops.reshape(x, free_shape + attention_shape + (shape[-2], shape[-1]))
    perm = free + attention + (rank - 2, rank - 1)
    if perm == tuple(range(rank)):
        return x
    inverse = [0] * rank
    for position, axis in enumerate(perm):
        inverse[axis] = position
    return ops.transpose(x, inverse)


def check_attention_mask(mask, received_shape, scores_shape):
    """`ValueError` unless the Keras-layout `mask` broadcasts to the scores.

    `scores_shape` is Keras's `(B, <free>, N, <query attention>, <key
    attention>)`; `mask` already has its rank (as Keras expands it) and
    `received_shape` is its shape as the layer received it.
    """
    mask_shape = _static_dims(mask)
    for m, s in zip(mask_shape, scores_shape):
        if isinstance(m, int) and isinstance(s, int) and m != 1 and m != s:
            raise ValueError(
                "`attention_mask` must broadcast to the attention scores of shape "
                "(batch, ..., num_heads, query positions, key positions) = "
                f"{tuple(scores_shape)}; got a mask of shape {received_shape}, "
                f"{mask_shape} once the heads axis is inserted as Keras does."
            )


def expand_mask(mask, rank, num_attention_axes):
    """Keras's expansion: insert axes before the heads axis up to `rank`."""
    mask = ops.convert_to_tensor(mask)
    if len(mask.shape) > rank:
        raise ValueError(
            f"`attention_mask` must have at most {rank} dimensions (the rank of the "
            f"attention scores); got a mask of shape {_static_dims(mask)}."
        )
    if keras.backend.standardize_dtype(mask.dtype) != "bool":
        mask = ops.cast(mask, "bool")
    axis = -2 * num_attention_axes - 1
    for _ in range(rank - len(mask.shape)):
        mask = ops.expand_dims(mask, axis=axis)
    return mask


def _op_applies(q, k, v):
    """Whether `dot_product_attention` takes these `(B, L, N, H)` tensors:
    the same head size for keys and values, and static lengths."""
    q_shape, k_shape, v_shape = _static_dims(q), _static_dims(k), _static_dims(v)
    static = None not in (q_shape[1:] + k_shape[1:] + v_shape[1:])
    return static and k_shape == v_shape


def _probabilities(q, k, mask, scale):
    """`softmax(scale * q . k)` over the keys, `(B', N, T, S)`, in float32
    (the op's `attention_probabilities`).

    A row with no allowed key gives 0 and a zero gradient; float16 inputs
    are widened before the product, so a `q . k` beyond 65504 stays finite.
    """
    dtype = keras.backend.result_type(q.dtype, "float32")
    return attention_probabilities(ops.cast(q, dtype), ops.cast(k, dtype), scale, mask=mask)


def masks_and_dropout(layer, query, value, attention_mask, use_causal_mask, rate, training, scores):
    """What both layers' `_compute_attention` does before attending, as
    Keras's does: refuse scores with flash attention, honour its own
    `use_causal_mask` flag (and-ed with `attention_mask`), and the dropout
    of the probabilities with the layer's seed generator (None when not
    training). Returns `(attention_mask, dropout)`."""
    if flash_attention_enabled(layer) and scores:
        raise ValueError(FLASH_SCORES_ERROR)
    if use_causal_mask:
        causal = causal_attention_mask(layer, query, value)
        attention_mask = (
            causal
            if attention_mask is None
            else ops.logical_and(ops.cast(attention_mask, "bool"), causal)
        )
    dropout = None
    if rate > 0.0 and training:
        generator = attention_seed_generator(layer)

        def dropout(p):
            return keras.random.dropout(p, rate, seed=generator)

    return attention_mask, dropout


def attend(
    query,
    key,
    value,
    attention_mask,
    *,
    attention_axes,
    scale,
    want_probabilities,
    dropout,
    compute_dtype,
):
    """Attention of Keras's projected `query`, `key`, `value`.

    Args:
        query: `(B, <free>, <attention>, N, H)` projected queries.
        key, value: `(B, <free>, <key attention>, N, H)` (the same `N` as the
            queries: GQA's keys are repeated by Keras before this).
        attention_mask: `None`, or a boolean mask that broadcasts (after
            Keras's expansion) to `(B, <free>, N, <attention>, <key
            attention>)`; True attends.
        attention_axes: the attention axes of the projected tensors.
        scale: the factor of the logits.
        want_probabilities: compute (and return) the probabilities.
        dropout: `None`, or a function applied to the float32
            probabilities (dropout in training); implies the probabilities
            path.
        compute_dtype: the dtype of the returned output and probabilities.

    Returns:
        `(output, probabilities)`: the output in `query`'s layout and
        `compute_dtype`; the probabilities `(B, <free>, N, <attention>,
        <key attention>)` in `compute_dtype`, or `None` when not computed.
    """
    rank = len(query.shape)
    free, attention = _layout(rank, attention_axes)
    q, free_shape, q_attention_shape = _flatten(query, free, attention)
    k, _, k_attention_shape = _flatten(key, free, attention)
    v, _, _ = _flatten(value, free, attention)
    num_heads = ops.shape(q)[-2]
    scores_shape = free_shape + (num_heads,) + q_attention_shape + k_attention_shape
    mask = None
    if attention_mask is not None:
        received = _static_dims(attention_mask)
        mask = expand_mask(attention_mask, len(scores_shape), len(attention))
        check_attention_mask(mask, received, scores_shape)
        if len(scores_shape) != 4:
            # Flatten the mask as the tensors were flattened.
            mask = ops.broadcast_to(mask, scores_shape)
            length_q, length_k = ops.shape(q)[1], ops.shape(k)[1]
            mask = ops.reshape(mask, (-1, num_heads, length_q, length_k))
    if not want_probabilities and dropout is None and _op_applies(q, k, v):
        output = stable_ops.dot_product_attention(q, k, v, mask=mask, scale=scale)
        output = ops.cast(output, compute_dtype)
        return _unflatten(output, free, attention, free_shape, q_attention_shape), None
    probabilities = _probabilities(q, k, mask, scale)
    weights = probabilities if dropout is None else dropout(probabilities)
    # The weighted sum in float32 (float16 values are widened exactly).
    v32 = ops.cast(v, keras.backend.result_type(v.dtype, "float32"))
    output = weighted_values(ops.cast(weights, v32.dtype), v32)
    output = ops.cast(output, compute_dtype)
    output = _unflatten(output, free, attention, free_shape, q_attention_shape)
    probabilities = ops.reshape(ops.cast(probabilities, compute_dtype), scores_shape)
    return output, probabilities
