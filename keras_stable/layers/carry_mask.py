"""`CarryMask`: gives a tensor the Keras mask of another, past the layers
that drop it (Keras 3.16's RNN, `Bidirectional` and `TimeDistributed`)."""

import keras

from keras_stable.common.serialization import register


def _shape(x):
    return tuple(x.shape)


def _pair(inputs):
    if not isinstance(inputs, list | tuple) or len(inputs) != 2:
        raise ValueError(
            "`inputs` of CarryMask must be a list `[outputs, masked]`: the tensor "
            f"to give the mask to and the tensor that carries it; got {inputs!r}."
        )
    return inputs


def _check_covers(mask, outputs):
    """A Keras mask covers the leading dimensions of the tensor it is on."""
    mask_shape, out_shape = _shape(mask), _shape(outputs)
    covers = len(mask_shape) <= len(out_shape) and all(
        m is None or o is None or m == o for m, o in zip(mask_shape, out_shape, strict=False)
    )
    if not covers:
        raise ValueError(
            f"The Keras mask of `inputs[1]` has shape {mask_shape}, which does not "
            f"cover the leading dimensions of `inputs[0]` {out_shape}: a time-step "
            "mask needs the time steps (an RNN with `return_sequences=True`)."
        )


@register
class CarryMask(keras.layers.Layer):
    """Passes its first input through, with the Keras mask of the second.

    Keras 3.16 sets `supports_masking=False` on its RNN layers,
    `Bidirectional` and `TimeDistributed` (keras-team/keras#23235): after
    `Embedding(mask_zero=True) -> LSTM(return_sequences=True)` the output
    has no mask, so every loss and metric that reads the mask of `y_pred`
    counts the padded steps (Keras warns at the LSTM that it drops the
    mask). `CarryMask()([lstm_output, embedded])` puts the padding mask
    back: the layers after it, the loss and the metrics see it again, as
    on Keras 3.15. The RNN itself still reads the mask (it skips padded
    steps either way).

    Args:
        **kwargs: base layer keyword arguments, such as `name`.
            `autocast` is always `False`: the values pass through as they
            are.

    Call arguments:
        inputs: a list `[outputs, masked]`: the tensor to pass through and
            a tensor whose Keras mask it takes (the RNN's input, e.g. the
            `Embedding` output). The mask must cover the leading
            dimensions of `outputs` (`(batch, time)` for
            `(batch, time, features)`), otherwise a `ValueError` names
            both shapes.
        mask: filled in by Keras (`[mask of outputs, mask of masked]`).

    Returns:
        `outputs` unchanged, with the mask of `masked` (or its own mask
        when `masked` has none).

    Numerical stability:
        No arithmetic: the values are passed through unchanged, in their
        own dtype. The point is where the mask goes: without it, padded
        steps count in the loss (their targets are usually class 0), and
        the mean is taken over every step, padding included.

    Examples:
        >>> import keras
        >>> import numpy as np
        >>> from keras_stable.layers import CarryMask
        >>> tokens = keras.Input((None,), dtype="int32")
        >>> embedded = keras.layers.Embedding(10, 4, mask_zero=True)(tokens)
        >>> hidden = keras.layers.GRU(4, return_sequences=True)(embedded)
        >>> hidden = CarryMask()([hidden, embedded])
        >>> model = keras.Model(tokens, keras.layers.Dense(3)(hidden))
        >>> out = model(np.array([[4, 2, 0, 0]]))
        >>> keras.ops.convert_to_numpy(out._keras_mask).tolist()
        [[True, True, False, False]]
    """

    def __init__(self, **kwargs):
        kwargs["autocast"] = False
        super().__init__(**kwargs)
        self.supports_masking = True
        self.built = True

    def call(self, inputs, mask=None):
        outputs, _ = _pair(inputs)
        carried = None if mask is None else mask[1]
        if carried is not None:
            _check_covers(carried, outputs)
        return outputs

    def compute_mask(self, inputs, mask=None):
        _pair(inputs)
        if mask is None:
            return None
        own, carried = mask
        return own if carried is None else carried

    def compute_output_shape(self, input_shape):
        return input_shape[0]

    def compute_output_spec(self, inputs, mask=None):
        outputs, _ = _pair(inputs)
        carried = None if mask is None else mask[1]
        if carried is not None:
            _check_covers(carried, outputs)
        return keras.KerasTensor(outputs.shape, dtype=outputs.dtype, sparse=outputs.sparse)
