"""`StableSparsemax`: a masked sparsemax layer whose output sums to 1."""

from keras_stable import ops as stable_ops
from keras_stable.common.serialization import register
from keras_stable.layers._base import ShapePreservingLayer


@register
class StableSparsemax(ShapePreservingLayer):
    """Sparsemax over `axis` (Martins and Astudillo, 2016), honouring masks.

    The Euclidean projection of the unmasked, non-`-inf` entries of `axis`
    onto the probability simplex: `max(x_i - tau, 0)` with `tau` such that
    the output sums to 1; many entries are exactly 0, masked ones always.

    Args:
        axis: int, or a tuple/list of ints projected over together.
            Defaults to -1. With several axes, a lower-rank mask covers
            `axis` when it covers the first of them.
        **kwargs: base layer keyword arguments, such as `name` and `dtype`.
            `autocast` is always `False` (see Numerical stability).

    Call arguments:
        inputs: the logits, a float tensor of any rank >= 1.
        mask: optional boolean mask, by the rule of `StableSoftmax`: a mask
            of the input's shape masks entries (they get 0 and are left out
            of the projection) and is consumed; a lower-rank mask covering
            `axis` masks whole slices and is passed on; one that stops
            before `axis` leaves the math unchanged and is passed on.

    Returns:
        Probabilities of the input's shape, in the layer's compute dtype.

    Numerical stability:
        The math is `keras_stable.ops.sparsemax`: shifted by the largest
        valid entry, computed in `result_type(x.dtype, "float32")` (inputs
        are not autocast first), the support found by sorting (XLA-safe)
        and the gradient the exact Jacobian product. `[0, 0.5, 1]` gives
        `[0, 0.25, 0.75]`, where `keras.ops.sparsemax` (Keras 3.15.1)
        gives `[0, 0, 0.25]`. Masked and `-inf` entries give 0 with a zero
        gradient, NaN under the mask included; a row with nothing left
        gives all zeros and a zero gradient.

    Examples:
        >>> import keras
        >>> import numpy as np
        >>> from keras_stable.layers import StableSparsemax
        >>> model = keras.Sequential([keras.Input((3,)), StableSparsemax()])
        >>> x = np.array([[0.0, 0.5, 1.0], [-np.inf, -np.inf, -np.inf]])
        >>> np.round(keras.ops.convert_to_numpy(model(x)), 6)
        array([[0.  , 0.25, 0.75],
               [0.  , 0.  , 0.  ]], dtype=float32)
    """

    def call(self, inputs, mask=None):
        x, axis, entry_mask = self._prepare(inputs, mask)
        return self._finish(stable_ops.sparsemax(x, axis=axis, mask=entry_mask))
