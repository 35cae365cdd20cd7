"""`StableSoftmax`: a masked softmax layer that never returns NaN."""

from keras_stable import ops as stable_ops
from keras_stable.common.serialization import register
from keras_stable.layers._base import ShapePreservingLayer


@register
class StableSoftmax(ShapePreservingLayer):
    """Softmax over `axis` that honours Keras masks and never returns NaN.

    `softmax(x)_i = exp(x_i - m) / sum_j exp(x_j - m)` over the unmasked,
    non-`-inf` entries `j` of `axis`, with `m` their largest value; masked
    entries get probability 0.

    Args:
        axis: int, or a tuple/list of ints normalised over together (as
            `keras.layers.Softmax`). Defaults to -1. With several axes, a
            lower-rank mask covers `axis` when it covers the first of them.
        **kwargs: base layer keyword arguments, such as `name` and `dtype`.
            `autocast` is always `False` (see Numerical stability).

    Call arguments:
        inputs: the logits, a float tensor of any rank >= 1.
        mask: optional boolean mask (a numeric one keeps its entries
            above 0), from a previous layer (`Masking`,
            `Embedding(mask_zero=True)`) or passed explicitly. A mask of the
            input's own shape (dimensions of 1 broadcast) masks entries
            along `axis` and is consumed: `compute_mask` returns `None`, so
            a downstream loss does not take a class mask for sample weights.
            A mask of lower rank covers the leading dimensions (a
            `(batch, time)` time-step mask): when `axis` is a feature axis
            the math is unchanged and the mask is passed on, so sequence
            losses still skip padded steps; when the mask covers `axis`
            (softmax over time) the masked steps get probability 0 and the
            mask is passed on. Any other mask shape raises a `ValueError`.

    Returns:
        Probabilities of the input's shape, in the layer's compute dtype.

    Numerical stability:
        The largest valid logit is subtracted before `exp`, so logits of
        1000 (float32) or 12 (float16) do not overflow. The math runs in
        `result_type(x.dtype, "float32")` (float32 for half precision) and
        the output is cast to the layer's compute dtype; inputs are not
        autocast first, so a float32 logit of 1e5 under a `float16` policy
        is not turned into `inf`. Masked and `-inf` entries get exactly 0
        and a zero gradient, even when a masked entry holds NaN. A row with
        nothing left (all masked or all `-inf`) gives all zeros and a zero
        gradient, where `keras.ops.softmax` gives NaN; unlike
        `keras.layers.Softmax`, no `-1e9` is substituted, so the value is
        exact, and a `(batch, time)` mask is aligned with the leading
        dimensions instead of being broadcast against the feature axis,
        and a class mask is not handed on to the loss as sample weights.

    Examples:
        Sequential, on logits that overflow a hand-written softmax:

        >>> import keras
        >>> import numpy as np
        >>> from keras_stable.layers import StableSoftmax
        >>> model = keras.Sequential([keras.Input((3,)), StableSoftmax()])
        >>> x = np.array([[1000.0, 999.0, 0.0], [-np.inf, -np.inf, -np.inf]])
        >>> np.round(keras.ops.convert_to_numpy(model(x)), 6)
        array([[0.731059, 0.268941, 0.      ],
               [0.      , 0.      , 0.      ]], dtype=float32)

        Functional, with an explicit class mask (consumed) and a fully masked
        row (zeros, not NaN):

        >>> logits = keras.Input((3,))
        >>> classes = keras.Input((3,), dtype="bool")
        >>> probs = StableSoftmax()(logits, mask=classes)
        >>> model = keras.Model([logits, classes], probs)
        >>> x = np.array([[1.0, 1.0, 5.0], [1.0, 2.0, 3.0]], "float32")
        >>> m = np.array([[True, True, False], [False, False, False]])
        >>> np.round(keras.ops.convert_to_numpy(model([x, m])), 6)
        array([[0.5, 0.5, 0. ],
               [0. , 0. , 0. ]], dtype=float32)
    """

    def call(self, inputs, mask=None):
        x, axis, entry_mask = self._prepare(inputs, mask)
        return self._finish(stable_ops.softmax(x, axis=axis, mask=entry_mask))
