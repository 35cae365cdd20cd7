"""CTC loss of a sequence model: padded frames are not input, no NaN batch."""

import warnings

from keras import ops

from keras_stable.common.checks import check_bool
from keras_stable.common.checks import exposed_logits
from keras_stable.common.dtypes import compute_dtype_of
from keras_stable.common.dtypes import dtype_of
from keras_stable.common.dtypes import static_shape
from keras_stable.common.reduction import keras_mask_of
from keras_stable.common.serialization import register
from keras_stable.losses._base import PerExample
from keras_stable.losses._base import StableLoss
from keras_stable.ops.ctc import ctc_loss_over_frames


def check_ctc_inputs(y_true, y_pred, frames):
    t_shape, p_shape = static_shape(y_true), static_shape(y_pred)
    if len(t_shape) != 2:
        raise ValueError(
            "`y_true` must have shape (batch, max_label_length) of integer "
            f"labels padded with 0, got y_true.shape={t_shape}."
        )
    if len(p_shape) != 3:
        raise ValueError(
            "`y_pred` must have shape (batch, max_time, num_classes) of "
            f"logits, got y_pred.shape={p_shape}."
        )
    if None not in (t_shape[0], p_shape[0]) and t_shape[0] != p_shape[0]:
        raise ValueError(
            "`y_true` and `y_pred` must have the same batch size, got "
            f"y_true.shape={t_shape} and y_pred.shape={p_shape}."
        )
    if frames is not None:
        m_shape = static_shape(frames)
        if len(m_shape) != 2 or any(
            m not in (None, p) and p is not None for m, p in zip(m_shape, p_shape[:2])
        ):
            raise ValueError(
                f"The Keras mask of `y_pred` must have shape (batch, max_time) "
                f"= {p_shape[:2]}, got {m_shape}."
            )


def read_ctc_inputs(y_true, y_pred, frames):
    """Checks `(y_true, y_pred)` and `frames` (the Keras mask of `y_pred`,
    or None) and reads them as CTC does: returns `(y_pred, target,
    target_length, frames, output_length)`, the int32 labels and their
    lengths (nonzero entries; 0 pads), boolean frames (every frame where
    there is no mask), and `output_length`, the frame counts where every
    frame is input (else None). `StableCTC` and `CTCInfeasibleLabels` read
    their inputs with it."""
    y_true = ops.convert_to_tensor(y_true)
    y_pred = ops.convert_to_tensor(y_pred)
    check_ctc_inputs(y_true, y_pred, frames)
    target = ops.cast(y_true, "int32")
    target_length = ops.sum(ops.cast(ops.not_equal(target, 0), "int32"), axis=1)
    output_length = None
    if frames is None:
        # Every frame is input: the first `max_time` of each sample.
        frames = ops.ones_like(y_pred[:, :, 0], dtype="bool")
        output_length = ops.sum(ops.cast(frames, "int32"), axis=1)
    elif dtype_of(frames) != "bool":
        frames = ops.greater(frames, 0)
    return y_pred, target, target_length, frames, output_length


@register
class StableCTC(StableLoss):
    """Connectionist temporal classification loss, a drop-in for `keras.losses.CTC`.

    `-log p(y_true | y_pred)` per sample, summed over every alignment of
    the label to the frames, then the Keras `reduction`. As in
    `keras.losses.CTC`, class 0 is the blank and pads `y_true`: a sample's
    label length is its number of nonzero entries. Unlike it, the Keras
    mask of `y_pred` (a `Masking` layer, `Embedding(mask_zero=True)`, or
    an RNN passing the mask on) says which frames are input; Keras reads
    every sample as `max_time` frames long.

    This is the thin class over `keras_stable.ops.ctc_loss`.

    Args:
        zero_infinity: a sample whose label cannot be aligned to its frames
            gives 0 (True, default) or `+inf` (False), with a zero gradient
            either way. It counts as a 0 in the reduction:
            `"sum_over_batch_size"` still divides by the whole batch. To
            know how many there are, add
            `metrics=[keras_stable.metrics.CTCInfeasibleLabels()]` to
            `compile`: `fit`'s logs count them each epoch.
        reduction: a Keras reduction: `"sum_over_batch_size"` (default),
            `"sum"`, `"mean"`, `"mean_with_sample_weight"` or `"none"`.
        name: optional name of the loss.
        dtype: dtype of the result, float32 by default (also under a
            `mixed_float16` / `mixed_bfloat16` policy).

    Call arguments:
        y_true: `(batch, max_label_length)` integer labels in
            `[1, num_classes)`, padded with 0.
        y_pred: `(batch, max_time, num_classes)` logits (no softmax).
        sample_weight: optional `(batch,)` weights.

    Numerical stability:
        The forward algorithm in log space (`keras_stable.ops.ctc_loss`):
        exact for logits of any finite magnitude, never negative, computed
        in float32 for half-precision logits. A label longer than its
        frames, or with repeats needing a blank between them (`[1, 1]` in
        2 frames), has probability 0: Keras gives about 709 on TF and 1e5
        on JAX with a gradient pushing the weights, and `inf` with a NaN
        gradient on torch; here 0 with an exactly zero gradient. An empty
        label over no frames is 0.

    Examples:
        >>> import numpy as np
        >>> import keras_stable
        >>> logits = np.zeros((2, 2, 3), "float32")
        >>> labels = np.array([[1, 2], [1, 1]], "int32")  # [1, 1] needs 3 frames
        >>> loss = keras_stable.losses.StableCTC(reduction="none")
        >>> tuple(round(float(v), 5) for v in loss(labels, logits))
        (2.19722, 0.0)
    """

    def __init__(
        self,
        zero_infinity=True,
        reduction="sum_over_batch_size",
        name="stable_ctc",
        dtype=None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.zero_infinity = check_bool(zero_infinity, "zero_infinity")

    # Whether this instance has warned that `y_pred` came from a softmax.
    _warned_probabilities = False

    def _warn_if_probabilities(self, y_pred):
        """Warns once per instance when `y_pred` is a softmax output.

        Both Keras CTC tutorials end their model with a softmax (for
        `keras.backend.ctc_batch_cost`, which reads probabilities); this
        loss, like `keras.losses.CTC`, reads logits, and the log-softmax of
        probabilities is not their logarithm: the loss and its gradient
        are wrong, with no error. Keras marks an activation's output
        (`common.checks.exposed_logits`); inside `jax.jit` the tensors
        carry no mark and nothing is said.
        """
        if self._warned_probabilities or exposed_logits(y_pred) is None:
            return
        self._warned_probabilities = True
        warnings.warn(
            f"`{type(self).__name__}` reads `y_pred` as logits (as "
            "`keras.losses.CTC` does), but its input was produced by a "
            "softmax or sigmoid activation: the loss and its gradient are "
            "those of probabilities read as logits, not the CTC loss of the "
            "model. Remove the activation (the loss applies the log-softmax "
            "itself), or pass `keras.ops.log` of the probabilities.",
            stacklevel=5,
        )

    def _losses(self, y_true, y_pred, frames):
        self._warn_if_probabilities(y_pred)
        y_pred, target, target_length, frames, output_length = read_ctc_inputs(
            y_true, y_pred, frames
        )
        logits = ops.cast(y_pred, compute_dtype_of(dtype_of(y_pred)))
        return ctc_loss_over_frames(
            target, logits, target_length, frames, 0, self.zero_infinity, output_length
        )

    def per_example(self, y_true, y_pred, sample_weight=None, mask=None):
        # The mask of y_pred is per frame: it chose the frames, and every
        # sample counts in the reduction.
        return PerExample(self._losses(y_true, y_pred, mask), sample_weight)

    def losses_and_valid(self, y_true, y_pred):
        return self._losses(y_true, y_pred, keras_mask_of(y_pred)), None

    def get_config(self):
        config = super().get_config()
        config["zero_infinity"] = self.zero_infinity
        return config
