"""`StableGroupedQueryAttention`: `keras.layers.GroupQueryAttention` without
NaN or mean-of-values rows."""

import keras

from keras_stable.common.keras_internals import attention_scale
from keras_stable.common.keras_internals import gqa_projections
from keras_stable.common.keras_internals import returns_attention_scores
from keras_stable.common.serialization import register
from keras_stable.layers._attention import attend
from keras_stable.layers._attention import masks_and_dropout


@register
class StableGroupedQueryAttention(keras.layers.GroupQueryAttention):
    """Grouped-query attention whose masked rows give 0, never NaN or a mean.

    A drop-in for `keras.layers.GroupQueryAttention`: the same constructor,
    `call` signature, configuration, Keras-mask handling (`query_mask`,
    `value_mask`, `key_mask` from `Embedding(mask_zero=True)` or `Masking`,
    `attention_mask`, `use_causal_mask`, `sliding_window`) and weights
    (names, shapes and order), so `layer.set_weights(gqa.get_weights())`
    reproduces Keras's outputs and gradients wherever every query row has a
    key to attend to. Query head `n` attends with key/value head
    `n // (num_query_heads // num_key_value_heads)`; `num_key_value_heads=1`
    is multi-query attention. Only the attention step between the
    projections differs: `softmax(q k^T / sqrt(head_dim), mask) v`, per
    head, computed by `keras_stable.ops.dot_product_attention` (or, for the
    returned scores and for dropout on them, by that op's materialised
    formulation in float32, one step at a time).

    Constructor arguments (those of `keras.layers.GroupQueryAttention`):
        head_dim: size of each attention head.
        num_query_heads: number of query heads.
        num_key_value_heads: number of key/value heads; divides
            `num_query_heads`.
        dropout: dropout rate on the attention probabilities in training.
        use_bias, sliding_window, flash_attention, kernel_initializer,
            bias_initializer, kernel_regularizer, bias_regularizer,
            activity_regularizer, kernel_constraint, bias_constraint,
            use_gate, seed: as `keras.layers.GroupQueryAttention`.
        **kwargs: base layer keyword arguments (`name`, `dtype`...).

    Call arguments:
        query: `(B, T, dim)`.
        value: `(B, S, dim)`.
        key: optional `(B, S, dim)`; defaults to `value`.
        attention_mask: optional boolean mask `(B, T, S)` (broadcasting over
            missing batch and head axes, as Keras); True attends.
        return_attention_scores: also return the attention probabilities
            `(B, num_query_heads, T, S)` (0 on a row with nothing to attend
            to).
        training: whether dropout applies.
        use_causal_mask: query `i` attends to keys `j <= i`.

    Returns:
        The attention output `(B, T, dim)` in the compute dtype (and the
        attention probabilities when `return_attention_scores=True`).

    Numerical stability:
        A query row with no key to attend to — a padded query position, every
        key masked, a causal mask over left padding — gives output 0
        (before the output projection) and exactly zero gradient to the
        projected query, keys and values, where Keras's default path gives
        the mean of the values (0 when `dropout > 0` or
        `return_attention_scores=True`). Under
        `mixed_float16`/`mixed_bfloat16` the logits, the softmax and the
        weighted sum run in float32; the output and scores are returned in
        the compute dtype. Dropout is applied to the float32 probabilities,
        with the layer's seed generator as in Keras. Unlike Keras's GQA, a
        masked input does not make the projections warn that they drop its
        mask.

    Examples:
        >>> import keras
        >>> import numpy as np
        >>> from keras_stable.layers import StableGroupedQueryAttention
        >>> tokens = np.array([[0, 0, 1, 2]])  # left padding
        >>> x = keras.layers.Embedding(3, 8, mask_zero=True)(tokens)
        >>> layer = StableGroupedQueryAttention(
        ...     head_dim=4, num_query_heads=4, num_key_value_heads=2
        ... )
        >>> out, scores = layer(x, x, use_causal_mask=True, return_attention_scores=True)
        >>> tuple(out.shape), tuple(scores.shape)
        ((1, 4, 8), (1, 4, 4, 4))
        >>> keras.ops.convert_to_numpy(scores)[0, 0, :2]  # the padded rows
        array([[0., 0., 0., 0.],
               [0., 0., 0., 0.]], dtype=float32)

        References:
            Ainslie et al., 2023, "GQA: Training Generalized Multi-Query
            Transformer Models from Multi-Head Checkpoints".
    """

    def build(self, query_shape, value_shape, key_shape=None):
        super().build(query_shape, value_shape, key_shape)
        # Keras's GQA hands the masked query and value to its projections
        # without clearing their Keras masks, and each projection then warns
        # that it drops the mask (MultiHeadAttention clears them first). The
        # masks have been read already (`query_mask`, `value_mask`), so the
        # projections may carry them along in silence.
        for projection in gqa_projections(self):
            projection.supports_masking = True

    def _compute_attention(
        self,
        query,
        key,
        value,
        attention_mask=None,
        training=None,
        use_causal_mask=False,
    ):
        attention_mask, dropout = masks_and_dropout(
            self,
            query,
            value,
            attention_mask,
            use_causal_mask,
            self.dropout,
            training,
            returns_attention_scores(self),
        )
        return attend(
            query,
            key,
            value,
            attention_mask,
            attention_axes=(1,),
            scale=attention_scale(self),
            want_probabilities=returns_attention_scores(self),
            dropout=dropout,
            compute_dtype=self.compute_dtype,
        )
