"""`LogSoftmax`: a masked log-softmax layer, stable in every dtype."""

from keras_stable import ops as stable_ops
from keras_stable.common.serialization import register
from keras_stable.layers._base import ShapePreservingLayer


@register
class LogSoftmax(ShapePreservingLayer):
    """Log-softmax over `axis` that honours Keras masks.

    `log_softmax(x)_i = (x_i - m) - log(sum_j exp(x_j - m))` over the
    unmasked, non-`-inf` entries `j` of `axis`, with `m` their largest
    value; masked entries give `-inf`.

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
            along `axis` (they give `-inf`) and is consumed: `compute_mask`
            returns `None`. A mask of lower rank covers the leading
            dimensions (a `(batch, time)` time-step mask): when `axis` is a
            feature axis the math is unchanged and the mask is passed on, so
            sequence losses still skip padded steps (and their
            log-probabilities stay finite); when the mask covers `axis` the
            masked steps give `-inf` and the mask is passed on. Any other
            mask shape raises a `ValueError`.

    Returns:
        Log-probabilities of the input's shape, in the layer's compute
        dtype; masked and `-inf` entries are `-inf`.

    Numerical stability:
        Computed as `(x - m) - log(sum(exp(x - m)))`: no `log` of an
        underflowed probability (`log(softmax(x))` gives `-inf` for a logit
        100 below the maximum; this gives -100) and no overflow. The math
        runs in `result_type(x.dtype, "float32")` and the output is cast to
        the layer's compute dtype; inputs are not autocast first, so a
        float32 logit of 1e5 under a `float16` policy is not turned into
        `inf`. Masked and `-inf` entries give `-inf` with a zero gradient,
        NaN under the mask included; the finite entries get the gradient of
        the log-softmax over the remaining entries. A row with nothing left
        gives all `-inf` and a zero gradient.

    Examples:
        Sequential:

        >>> import keras
        >>> import numpy as np
        >>> from keras_stable.layers import LogSoftmax
        >>> model = keras.Sequential([keras.Input((3,)), LogSoftmax()])
        >>> x = np.array([[0.0, 0.0, -np.inf], [100.0, 0.0, 0.0]], "float32")
        >>> np.round(keras.ops.convert_to_numpy(model(x)), 4)
        array([[  -0.6931,   -0.6931,      -inf],
               [   0.    , -100.    , -100.    ]], dtype=float32)

        Functional, after `Embedding(mask_zero=True)`: the `(batch, time)` mask
        leaves the per-step log-softmax unchanged and is passed on, so a
        sequence loss can skip the padded step:

        >>> tokens = keras.Input((3,), dtype="int32")
        >>> hidden = keras.layers.Embedding(5, 4, mask_zero=True)(tokens)
        >>> layer = LogSoftmax()
        >>> model = keras.Model(tokens, layer(hidden))
        >>> out = keras.ops.convert_to_numpy(model(np.array([[1, 2, 0]])))
        >>> out.shape, bool(np.isfinite(out).all())
        ((1, 3, 4), True)
        >>> step_mask = np.array([[True, True, False]])
        >>> layer.compute_mask(out, step_mask) is step_mask
        True
        >>> print(layer.compute_mask(out, np.ones((1, 3, 4), bool)))
        None
    """

    def call(self, inputs, mask=None):
        x, axis, entry_mask = self._prepare(inputs, mask)
        return self._finish(stable_ops.log_softmax(x, axis=axis, mask=entry_mask))
