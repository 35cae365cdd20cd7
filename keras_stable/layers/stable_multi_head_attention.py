"""`StableMultiHeadAttention`: `keras.layers.MultiHeadAttention` without NaN
or mean-of-values rows."""

import keras

from keras_stable.common.keras_internals import attention_scale
from keras_stable.common.serialization import register
from keras_stable.layers._attention import attend
from keras_stable.layers._attention import masks_and_dropout


@register
class StableMultiHeadAttention(keras.layers.MultiHeadAttention):
    """Multi-head attention whose masked rows give 0, never NaN or a mean.

    A drop-in for `keras.layers.MultiHeadAttention`: the same constructor,
    `call` signature, configuration, Keras-mask handling (`query_mask` and
    `value_mask`/`key_mask` from `Embedding(mask_zero=True)` or `Masking`,
    `attention_mask`, `use_causal_mask`, `sliding_window`) and weights
    (names, shapes and order), so `layer.set_weights(mha.get_weights())`
    reproduces Keras's outputs and gradients wherever every query row has a
    key to attend to. Only the attention step between the projections
    differs: `softmax(q k^T * scale, mask) v`, per head, computed by
    `keras_stable.ops.dot_product_attention` (or, for the returned scores
    and for dropout on them, by that op's materialised formulation in
    float32, one step at a time).

    Constructor arguments (those of `keras.layers.MultiHeadAttention`):
        num_heads: number of attention heads.
        key_dim: size of each head for the query and the key.
        value_dim: size of each head for the value (default `key_dim`).
        dropout: dropout rate on the attention probabilities in training.
        use_bias, output_shape, attention_axes, sliding_window,
            flash_attention, kernel_initializer, bias_initializer,
            kernel_regularizer, bias_regularizer, activity_regularizer,
            kernel_constraint, bias_constraint, use_gate, seed: as
            `keras.layers.MultiHeadAttention`.
        **kwargs: base layer keyword arguments (`name`, `dtype`...).

    Call arguments:
        query: `(B, T, dim)` (or `(B, <dims>, dim)` with `attention_axes`).
        value: `(B, S, dim)`.
        key: optional `(B, S, dim)`; defaults to `value`.
        attention_mask: optional boolean mask `(B, T, S)` (broadcasting over
            missing batch and head axes, as Keras); True attends.
        return_attention_scores: also return the attention probabilities
            `(B, num_heads, T, S)` (0 on a row with nothing to attend to).
        training: whether dropout applies.
        use_causal_mask: query `i` attends to keys `j <= i`.

    Returns:
        The attention output `(B, T, E)` in the compute dtype (and the
        attention probabilities when `return_attention_scores=True`).

    Numerical stability:
        A query row with no key to attend to — a padded query position
        (its `query_mask` is False), every key masked, a causal mask over
        left padding — gives output 0 (before the output projection, so
        the projection's bias) and exactly zero gradient to the projected
        query, keys and values, where Keras's default path gives the mean
        of the values (and 0 when `dropout > 0` or
        `return_attention_scores=True`): toggling dropout no longer changes
        the output. Under `mixed_float16`/`mixed_bfloat16` the logits, the
        softmax and the weighted sum run in float32, so a `q . k` beyond
        65504 neither overflows nor turns into NaN; the output and scores
        are returned in the compute dtype. Dropout is applied to the float32
        probabilities, with the layer's seed generator as in Keras.

    Examples:
        A padded query position and a padded key, under a causal mask:

        >>> import keras
        >>> import numpy as np
        >>> from keras_stable.layers import StableMultiHeadAttention
        >>> tokens = np.array([[0, 3, 1, 2]])  # left padding: position 0
        >>> x = keras.layers.Embedding(4, 8, mask_zero=True)(tokens)
        >>> layer = StableMultiHeadAttention(num_heads=2, key_dim=4)
        >>> out, scores = layer(x, x, use_causal_mask=True, return_attention_scores=True)
        >>> tuple(out.shape), tuple(scores.shape)
        ((1, 4, 8), (1, 2, 4, 4))
        >>> keras.ops.convert_to_numpy(scores)[0, 0, 0]  # the padded row
        array([0., 0., 0., 0.], dtype=float32)
        >>> bool(np.isfinite(keras.ops.convert_to_numpy(out)).all())
        True

        References:
            Vaswani et al., 2017, "Attention Is All You Need"; the fully masked
            row convention of FlashAttention and PyTorch's
            `scaled_dot_product_attention` (output 0, zero gradient).
    """

    def _compute_attention(
        self,
        query,
        key,
        value,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
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
            return_attention_scores,
        )
        return attend(
            query,
            key,
            value,
            attention_mask,
            attention_axes=self.attention_axes,
            scale=attention_scale(self),
            want_probabilities=return_attention_scores,
            dropout=dropout,
            compute_dtype=self.compute_dtype,
        )
