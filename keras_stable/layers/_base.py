"""The shared machinery of the keras_stable layers (private).

`AxisLayer` validates `axis` (an int, or a tuple/list of ints reduced
together, as `keras.layers.Softmax` and `UnitNormalization` take), checks
Keras masks against the input's shape, decides which mask takes part in
the math and which one is passed on, and handles the dtype policy: the
math runs in `result_type(x.dtype, "float32")` and the output is cast to
`self.compute_dtype` (as keras core's normalization layers do).
Subclasses only say which `keras_stable.ops` function to call.

The layers hold no state: like keras core's `Softmax` and
`UnitNormalization` they are built at instantiation, unless a subclass
overrides `build` (Keras then calls it at the first call).
"""

import keras
from keras import ops

from keras_stable.common.checks import check_axis
from keras_stable.common.checks import check_layer_axis


def _shape(x):
    return tuple(x.shape)


def _first_axis(axis):
    return axis if isinstance(axis, int) else min(axis)


class AxisLayer(keras.layers.Layer):
    """Weightless layer over `axis`, with the keras_stable mask rule.

    Mask rule (docs/design.md). A Keras mask covers the leading dimensions
    of the input (Embedding and Masking give `(batch, time)` for an input
    `(batch, time, features)`):

    - a mask of the input's own rank (each dimension equal or 1) masks
      entries; it takes part in the math and is consumed;
    - a mask of lower rank whose dimensions include `axis` (e.g. a time-step
      mask with `axis=1`) masks whole slices along `axis`; it takes part in
      the math;
    - a mask of lower rank that stops before `axis` (a time-step mask with
      `axis` the feature axis) leaves the math unchanged.

    With several axes, "`axis`" above is the first of them.

    Which mask is passed on is decided by `output_mask`, per layer.

    Inputs are never autocast to the compute dtype before the math
    (`autocast=False`): a float32 input of 1e5 under a float16 policy would
    become `inf` before the layer could compute it in float32.
    """

    def __init__(self, axis=-1, **kwargs):
        # No weights: `autocast` only decides whether inputs are cast to the
        # compute dtype first, which is what this layer must not do.
        kwargs["autocast"] = False
        super().__init__(**kwargs)
        self.axis = check_layer_axis(axis)
        self.supports_masking = True
        # Stateless, so built at instantiation, as keras core's weightless
        # layers are (`Softmax`, `UnitNormalization`). A subclass that
        # overrides `build` is not marked built, so Keras calls its `build`
        # at the first call. `axis` is checked against the input's rank at
        # every call and in `compute_output_shape` either way.
        if type(self).build is AxisLayer.build:
            self.built = True

    def build(self, input_shape):
        # No weights: building only checks `axis` against the input's rank.
        self._canonical_axis(input_shape)
        self.built = True

    # ----------------------------------------------------------- validation
    def _canonical_axis(self, input_shape):
        """A non-negative int, or a sorted tuple of them (several axes)."""
        return check_axis(
            self.axis,
            len(input_shape),
            multiple=not isinstance(self.axis, int),
            where=f"for layer '{self.name}' and an input of shape {tuple(input_shape)}",
        )

    def _check_mask(self, input_shape, mask_shape):
        input_shape = tuple(input_shape)
        mask_shape = tuple(mask_shape)
        ok = len(mask_shape) <= len(input_shape)
        if ok:
            full_rank = len(mask_shape) == len(input_shape)
            for m, i in zip(mask_shape, input_shape):
                if m is None or i is None or m == i:
                    continue
                if full_rank and m == 1:
                    continue
                ok = False
        if not ok:
            # The wording keeps keras.layers.Softmax's key phrases
            # ("must not have more dimensions", "broadcastable").
            if len(mask_shape) > len(input_shape):
                expected = "a mask must not have more dimensions than the input"
            elif len(mask_shape) == len(input_shape):
                expected = (
                    "a mask of the input's rank must be broadcastable to its "
                    "shape (each dimension equal or 1)"
                )
            else:
                expected = (
                    "a mask of lower rank must equal the leading dimensions "
                    "of the input, like the `(batch, time)` mask of "
                    "Embedding(mask_zero=True) or Masking (it is not "
                    "broadcast NumPy-style, from the right)"
                )
            raise ValueError(
                f"Layer '{self.name}' got a `mask` of shape {mask_shape} for "
                f"an input of shape {input_shape}: {expected}."
            )

    def _mask_takes_part(self, input_shape, mask_shape):
        """Whether the mask covers `axis` (and so masks entries along it)."""
        return _first_axis(self._canonical_axis(input_shape)) < len(mask_shape)

    # ----------------------------------------------------------------- call
    def _prepare(self, inputs, mask):
        """Returns `(x, axis, entry_mask)` ready for the `keras_stable.ops`.

        `x` is in `result_type(inputs.dtype, "float32")`; `entry_mask` is a
        boolean mask broadcast to `x`'s shape, or `None` when the mask does
        not take part in the math.
        """
        x = ops.convert_to_tensor(inputs)
        compute = keras.backend.result_type(x.dtype, "float32")
        x = ops.cast(x, compute)
        axis = self._canonical_axis(_shape(x))
        if mask is None:
            return x, axis, None
        mask = ops.convert_to_tensor(mask)
        self._check_mask(_shape(x), _shape(mask))
        if not self._mask_takes_part(_shape(x), _shape(mask)):
            return x, axis, None
        if keras.backend.standardize_dtype(mask.dtype) != "bool":
            mask = ops.greater(mask, 0)
        # A Keras mask covers the leading dimensions: add trailing ones so
        # that it broadcasts along the features, not NumPy-style from the
        # right (which would silently pair `time` with `features`).
        for _ in range(len(x.shape) - len(mask.shape)):
            mask = ops.expand_dims(mask, -1)
        return x, axis, ops.broadcast_to(mask, ops.shape(x))

    def _finish(self, outputs):
        return ops.cast(outputs, self.compute_dtype)

    # ---------------------------------------------------------------- masks
    def compute_mask(self, inputs, mask=None):
        if mask is None:
            return None
        input_shape = _shape(inputs)
        self._check_mask(input_shape, _shape(mask))
        return self.output_mask(input_shape, mask)

    def output_mask(self, input_shape, mask):
        """The mask passed on for an input mask (checked); per layer."""
        raise NotImplementedError

    # ---------------------------------------------------------------- shape
    def compute_output_shape(self, input_shape):
        self._canonical_axis(input_shape)
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        # Several axes are stored as a list (as `UnitNormalization` does), so
        # that a JSON round trip changes nothing.
        axis = self.axis if isinstance(self.axis, int) else list(self.axis)
        config.update({"axis": axis})
        return config


class ShapePreservingLayer(AxisLayer):
    """An `AxisLayer` whose output has the input's shape (softmax, l2)."""

    def output_mask(self, input_shape, mask):
        # The input's own shape: the mask was applied to the entries and is
        # consumed, so that a loss does not read it as per-class weights.
        # Lower rank: a time-step (or sample) mask, still valid downstream.
        if len(_shape(mask)) == len(input_shape):
            return None
        return mask
