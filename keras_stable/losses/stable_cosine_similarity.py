"""Negative cosine similarity (Keras's sign), finite at the zero vector."""

from keras import ops

from keras_stable import ops as stable_ops
from keras_stable.common.checks import align_ranks
from keras_stable.common.checks import check_axis
from keras_stable.common.dtypes import static_shape
from keras_stable.common.dtypes import to_float32
from keras_stable.common.serialization import register
from keras_stable.losses._base import AXIS
from keras_stable.losses._base import StableLoss


@register
class StableCosineSimilarity(StableLoss):
    """`-cos(y_true, y_pred)` along `axis`, with a finite gradient at zero.

    The counterpart of `keras.losses.CosineSimilarity`, with its sign:
    the loss is the *negative* cosine similarity, in [-1, 1], so
    minimising it aligns the vectors (-1: same direction, 0: orthogonal,
    or either vector zero, 1: opposite); then the Keras `reduction`.

    This is the thin class over `-keras_stable.ops.cosine_similarity` (the
    op is `+cos`).

    Args:
        axis: int, the axis holding the vectors (default -1).
        reduction: a Keras reduction: `"sum_over_batch_size"` (default),
            `"sum"`, `"mean"`, `"mean_with_sample_weight"` or `"none"`.
        name: optional name of the loss.
        dtype: dtype of the result, float32 by default.

    Call arguments:
        y_true: target vectors.
        y_pred: predicted vectors, broadcastable with `y_true`.
        sample_weight: optional weights, e.g. of shape `(batch,)`.

    Numerical stability:
        Keras normalises with `x / sqrt(max(sum(x**2), 1e-12))`: the value
        at a zero vector is 0, but the gradient is NaN under XLA, on JAX
        and on torch, and `8e6` on TensorFlow eager (`1 / sqrt(1e-12)`
        times the other vector). Here the loss is
        `-keras_stable.ops.cosine_similarity` (double where, no epsilon): a
        zero vector gives 0 and a gradient of exactly 0 with respect to it,
        every other input Keras's value (clipped to [-1, 1] against
        round-off). Vectors whose norm or its square leaves the float32
        range are rescaled by powers of two inside the op, so `[0, 1e-30,
        0]` and `[1e30, 1e30, 0]` have their exact value and gradient too.
        Computed in float32, so float16 vectors with entries around 300
        (whose squares overflow float16) are exact too.

    Examples:
        >>> import numpy as np
        >>> import keras_stable
        >>> loss = keras_stable.losses.StableCosineSimilarity(reduction="none")
        >>> y_true = np.array([[0.0, 1.0], [1.0, 1.0], [1.0, 1.0]], "float32")
        >>> y_pred = np.array([[0.0, 0.0], [1.0, 1.0], [-1.0, -1.0]], "float32")
        >>> np.round(np.asarray(loss(y_true, y_pred)), 6)
        array([ 0., -1.,  1.], dtype=float32)
    """

    args = (AXIS,)

    def losses_and_valid(self, y_true, y_pred):
        y_pred = to_float32(y_pred)
        y_true = ops.cast(ops.convert_to_tensor(y_true), y_pred.dtype)
        y_true, y_pred = align_ranks(y_true, y_pred, check=False)
        rank = max(len(static_shape(y_true)), len(static_shape(y_pred)))
        check_axis(self.axis, rank)  # a ValueError before any reduction
        cos = stable_ops.cosine_similarity(y_true, y_pred, axis=self.axis)
        return 0.0 - cos, None  # +0.0 (not -0.0) at a zero vector
