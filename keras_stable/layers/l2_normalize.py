"""`L2Normalize`: `x / ||x||` as a layer; zero maps to zero, gradient finite."""

from keras import ops

from keras_stable import ops as stable_ops
from keras_stable.common.serialization import register
from keras_stable.layers._base import ShapePreservingLayer


@register
class L2Normalize(ShapePreservingLayer):
    """Scales each vector along `axis` to unit Euclidean norm.

    `y = x / ||x||` along `axis`; the zero vector maps to the zero vector,
    with a gradient of exactly 0.

    Args:
        axis: int, or a tuple/list of ints (as `UnitNormalization`): the
            axis or axes holding each vector, normalised together.
            Defaults to -1. With several axes, a lower-rank mask covers
            `axis` when it covers the first of them.
        **kwargs: base layer keyword arguments, such as `name` and `dtype`.
            `autocast` is always `False` (see Numerical stability).

    Call arguments:
        inputs: a float tensor of any rank >= 1.
        mask: optional boolean mask (a numeric one keeps its entries
            above 0), from a previous layer or passed explicitly. A mask
            of the input's own shape excludes the masked entries from
            the norm (their output is 0; NaN under the mask included)
            and is consumed (`compute_mask` returns `None`). A mask of
            lower rank covers the leading dimensions: a time-step mask
            with `axis` the feature axis leaves the math unchanged and
            is passed on; a mask covering `axis` (normalising over time)
            zeroes the masked steps, leaves them out of the norm, and is
            passed on. Any other mask shape raises a `ValueError`.

    Returns:
        A tensor of the input's shape, in the layer's compute dtype.

    Numerical stability:
        `x / max(||x||, eps)` (`tf.math.l2_normalize`,
        `keras.ops.normalize`, `UnitNormalization`) has a gradient of
        `1/eps` (up to 1e12) at the zero vector, NaN under XLA and on JAX,
        and gives zeros or NaN for float16 `[300] * 4`. This layer uses
        `keras_stable.ops.l2_normalize`: the norm is `safe_norm` (scaled,
        in float32 for half precision), no epsilon is added, and the
        division goes through the double-where pattern. The math runs in
        `result_type(x.dtype, "float32")` and the output is cast to the
        layer's compute dtype, so float16 `[300] * 4` gives 0.5 each;
        inputs are not autocast first. An infinite entry gives NaN at that
        entry and 0 elsewhere in its vector, with a zero gradient (as
        `keras_stable.ops.l2_normalize`); NaN gives NaN.

    Examples:
        Sequential, with a zero vector in the batch:

        >>> import keras
        >>> import numpy as np
        >>> from keras_stable.layers import L2Normalize
        >>> model = keras.Sequential([keras.Input((2,)), L2Normalize()])
        >>> np.asarray(keras.ops.convert_to_numpy(model(np.array([[3.0, 4.0], [0.0, 0.0]]))))
        array([[0.6, 0.8],
               [0. , 0. ]], dtype=float32)

        Functional, under the `mixed_float16` policy:

        >>> inputs = keras.Input((4,))
        >>> unit = L2Normalize(dtype="mixed_float16")(inputs)
        >>> model = keras.Model(inputs, unit)
        >>> np.asarray(keras.ops.convert_to_numpy(model(np.full((1, 4), 300.0))))
        array([[0.5, 0.5, 0.5, 0.5]], dtype=float16)
    """

    def call(self, inputs, mask=None):
        x, axis, entry_mask = self._prepare(inputs, mask)
        if entry_mask is not None:
            # Masked entries count as 0 (and stay 0 after the division).
            x = ops.where(entry_mask, x, ops.zeros_like(x))
        return self._finish(stable_ops.l2_normalize(x, axis=axis))
