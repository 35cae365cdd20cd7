"""Huber loss over the observed labels (NaN marks a missing one)."""

import functools

from keras_stable import ops as stable_ops
from keras_stable.common.arguments import Arg
from keras_stable.common.checks import check_positive
from keras_stable.common.serialization import register
from keras_stable.losses._base import StableLoss
from keras_stable.losses._elementwise import mean_over_observed


@register
class MaskedHuber(StableLoss):
    """Huber loss where NaN in `y_true` marks a missing label.

    With `e = y_pred - y_true`, elementwise `0.5 * e**2` where
    `|e| <= delta` and `delta * |e| - 0.5 * delta**2` elsewhere; per
    example, the mean over the observed entries of the last axis, then the
    Keras `reduction`. A missing label counts for nothing, exactly: not in
    the value, not in the mean's denominator, not in the gradient. An
    example with no observed label is left out of the reduction. Without NaN
    labels this is `keras.losses.Huber(delta)`, with the same reductions,
    `sample_weight` and Keras mask.

    This is the thin class over `keras_stable.ops.masked_huber`.

    Args:
        delta: a finite float > 0, where the loss turns from quadratic to
            linear (`ValueError` otherwise).
        reduction: a Keras reduction: `"sum_over_batch_size"` (default),
            `"sum"`, `"mean"`, `"mean_with_sample_weight"` or `"none"`.
        name: optional name of the loss.
        dtype: dtype of the result, float32 by default (also under a
            `mixed_float16` / `mixed_bfloat16` policy).

    Call arguments:
        y_true: targets, NaN where missing. A rank-1 `y_true` holds one
            label per example (`(batch,)` labels against `(batch, 1)`
            predictions are accepted, as in Keras).
        y_pred: predictions, the shape of `y_true`.
        sample_weight: optional weights broadcast onto the per-example
            losses from their leading axes, e.g. `(batch,)`.

    Numerical stability:
        The NaN label is replaced by the double-where pattern before the
        subtraction, so its gradient is exactly 0; Keras's `Huber` returns
        NaN for such a batch even when the entry's `sample_weight` is 0. An
        example whose labels are all missing gives 0 with a zero gradient.
        The gradient is `e` clipped to `[-delta, delta]`. Computed in
        float32.

    Examples:
        >>> import numpy as np
        >>> import keras_stable
        >>> loss = keras_stable.losses.MaskedHuber(delta=1.0, reduction="none")
        >>> y_true = np.array([[0.5, np.nan], [np.nan, np.nan], [3.0, 0.0]], "float32")
        >>> y_pred = np.zeros((3, 2), "float32")
        >>> np.asarray(loss(y_true, y_pred))
        array([0.125, 0.   , 1.25 ], dtype=float32)
    """

    args = (Arg("delta", 1.0, functools.partial(check_positive, name="delta")),)

    def losses_and_valid(self, y_true, y_pred):
        huber = functools.partial(stable_ops.masked_huber, delta=self.delta)
        return mean_over_observed(huber, y_true, y_pred)
