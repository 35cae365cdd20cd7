"""`SafeNorm`: the Euclidean norm as a layer, with a finite gradient at 0."""

from keras import ops

from keras_stable import ops as stable_ops
from keras_stable.common.serialization import register
from keras_stable.layers._base import AxisLayer


@register
class SafeNorm(AxisLayer):
    """Euclidean norm over `axis`, exact, with a zero gradient at zero.

    `||x|| = sqrt(sum_i x_i**2)` over `axis`; the gradient is `x / ||x||`,
    and exactly 0 at the zero vector.

    Args:
        axis: int, or a tuple/list of ints reduced together (the
            Euclidean norm of all their entries). Defaults to -1. With
            several axes, a lower-rank mask covers `axis` when it covers
            the first of them.
        keepdims: bool, keep the reduced axes with size 1. Defaults to
            `False`.
        **kwargs: base layer keyword arguments, such as `name` and `dtype`.
            `autocast` is always `False` (see Numerical stability).

    Call arguments:
        inputs: a float tensor of any rank >= 1.
        mask: optional boolean mask (a numeric one keeps its entries
            above 0), from a previous layer or passed explicitly. A mask
            that covers `axis` (the input's own shape, or a `(batch,
            time)` mask with `axis=1`) excludes the masked entries from
            the norm (as if they were 0; NaN under the mask included)
            and is consumed, since the masked axis is reduced. A mask of
            lower rank that stops before `axis` (a time-step mask with
            `axis` the last, feature axis) leaves the math unchanged and
            is passed on: the output keeps the masked leading
            dimensions, so sequence losses still skip padded steps. Any
            other mask shape raises a `ValueError`.

    Returns:
        The norm, `axis` reduced (kept with size 1 if `keepdims`), in the
        layer's compute dtype.

    Numerical stability:
        `tf.norm` and `keras.ops.norm` give a NaN gradient at the zero
        vector (0/0), visibly under XLA and on JAX; the usual
        `sqrt(sum(x**2) + 1e-12)` biases the value and fails again in
        float16. This layer uses `keras_stable.ops.safe_norm`: the square
        root goes through the double-where pattern (value and gradient
        exactly 0 at zero, no epsilon elsewhere) and the vector is summed
        again, scaled by an exact power of two, where its sum of squares
        overflowed or underflowed. The math runs in
        `result_type(x.dtype, "float32")` and the output is cast to the
        layer's compute dtype, so float16 `[300] * 4` gives 600, not `inf`;
        inputs are not autocast first. An infinite entry gives `inf` with a
        zero gradient; NaN gives NaN.

    Examples:
        Sequential, with a zero vector in the batch:

        >>> import keras
        >>> import numpy as np
        >>> from keras_stable.layers import SafeNorm
        >>> model = keras.Sequential([keras.Input((2,)), SafeNorm()])
        >>> np.asarray(keras.ops.convert_to_numpy(model(np.array([[3.0, 4.0], [0.0, 0.0]]))))
        array([5., 0.], dtype=float32)

        Functional, under the `float16` policy, where a plain norm overflows:

        >>> inputs = keras.Input((4,))
        >>> norms = SafeNorm(keepdims=True, dtype="float16")(inputs)
        >>> model = keras.Model(inputs, norms)
        >>> y = model(np.full((1, 4), 300.0, "float32"))
        >>> np.asarray(keras.ops.convert_to_numpy(y))
        array([[600.]], dtype=float16)
    """

    def __init__(self, axis=-1, keepdims=False, **kwargs):
        super().__init__(axis=axis, **kwargs)
        if not isinstance(keepdims, bool):
            raise ValueError(
                f"`keepdims` must be a bool, got {keepdims!r} of type {type(keepdims).__name__}."
            )
        self.keepdims = keepdims

    def call(self, inputs, mask=None):
        x, axis, entry_mask = self._prepare(inputs, mask)
        if entry_mask is not None:
            # Masked entries count as 0. `where` is linear in the selected
            # branch, so a NaN under the mask reaches neither the value nor
            # the gradient.
            x = ops.where(entry_mask, x, ops.zeros_like(x))
        return self._finish(stable_ops.safe_norm(x, axis=axis, keepdims=self.keepdims))

    def output_mask(self, input_shape, mask):
        # The mask covers the reduced axis: nothing of it is left to describe.
        if self._mask_takes_part(input_shape, tuple(mask.shape)):
            return None
        # The mask stops before `axis`, so its dimensions lead the output.
        return mask

    def compute_output_shape(self, input_shape):
        axis = self._canonical_axis(input_shape)
        axes = (axis,) if isinstance(axis, int) else axis
        if self.keepdims:
            return tuple(1 if i in axes else d for i, d in enumerate(input_shape))
        return tuple(d for i, d in enumerate(input_shape) if i not in axes)

    def get_config(self):
        config = super().get_config()
        config.update({"keepdims": self.keepdims})
        return config
