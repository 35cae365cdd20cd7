"""Gaussian negative log-likelihood with a predicted mean and log-variance."""

from keras import ops

from keras_stable import ops as stable_ops
from keras_stable.common.arguments import flag
from keras_stable.common.dtypes import static_shape
from keras_stable.common.dtypes import to_float32
from keras_stable.common.serialization import register
from keras_stable.losses._base import StableLoss
from keras_stable.losses._elementwise import mean_over_last_axis


def _compatible(a, b):
    return len(a) == len(b) and all(x == y or None in (x, y) for x, y in zip(a, b))


@register
class StableGaussianNLL(StableLoss):
    """Heteroscedastic Gaussian negative log-likelihood, finite for any variance.

    The model predicts, for each target, a mean `y_pred[..., 0]` and a
    log-variance `y_pred[..., 1]` (natural log). Elementwise
    `0.5 * (log_var + (y_true - mean)**2 * exp(-log_var))`, plus
    `0.5 * log(2 pi)` when `full=True`; averaged over the last axis of the
    targets when they have rank 2 or more (a `(batch,)` target gives one
    value per example), then the Keras `reduction`. Keras has no
    counterpart (torch's `GaussianNLLLoss` takes a variance, not its log).

    This is the thin class over `keras_stable.ops.gaussian_nll`.

    Args:
        full: add the constant `0.5 * log(2 pi)`.
        reduction: a Keras reduction: `"sum_over_batch_size"` (default),
            `"sum"`, `"mean"`, `"mean_with_sample_weight"` or `"none"`.
        name: optional name of the loss.
        dtype: dtype of the result, float32 by default (also under a
            `mixed_float16` / `mixed_bfloat16` policy).

    Call arguments:
        y_true: targets of shape `y_pred.shape[:-1]` (or with a trailing
            axis of size 1: `(batch, 1)` targets for a `(batch, 2)` head).
        y_pred: `(..., 2)`: mean and log-variance stacked on the last axis
            (a `Dense(2)` head); `ValueError` if the last axis is not 2.
        sample_weight: optional weights broadcast onto the per-example
            losses from their leading axes, e.g. `(batch,)`.

    Numerical stability:
        The squared error is scaled as `(diff * f * f)**2` with
        `f = exp(-log_var / 4)`, so neither `diff**2` nor `exp(-log_var)`
        overflows on its own, and the value is exact
        and finite for every finite log-variance where the true value is
        representable: the naive form gives NaN at `log_var = -100` with an
        exact fit (`0 * inf`) and `inf` at `log_var = 100` with an error of
        `1e20` (`diff**2` overflows). The gradients are finite wherever they
        are representable; the one with respect to the mean,
        `diff * exp(-log_var)`, can overflow before the value does when the
        predicted variance is below ~1e-38 (see
        `keras_stable.ops.gaussian_nll`). Computed in float32, also for
        float16 predictions.

    Examples:
        >>> import numpy as np
        >>> import keras_stable
        >>> loss = keras_stable.losses.StableGaussianNLL(reduction="none")
        >>> y_true = np.array([0.0, 2.0], "float32")
        >>> y_pred = np.array([[0.0, -100.0], [0.0, 0.0]], "float32")  # (mean, log_var)
        >>> np.asarray(loss(y_true, y_pred))
        array([-50.,   2.], dtype=float32)
    """

    args = (flag("full", False),)

    def losses_and_valid(self, y_true, y_pred):
        y_pred = to_float32(y_pred)
        shape = static_shape(y_pred)
        if not shape or shape[-1] not in (2, None):
            raise ValueError(
                "`y_pred` must stack the mean and the log-variance on a last "
                f"axis of size 2, got y_pred.shape={shape}."
            )
        y_true = to_float32(y_true)
        t = static_shape(y_true)
        if len(t) == len(shape) and t[-1] == 1:
            y_true = ops.squeeze(y_true, axis=-1)
        if not _compatible(static_shape(y_true), shape[:-1]):
            raise ValueError(
                f"`y_true` must have the shape of `y_pred` without its last "
                f"axis (mean, log-variance): expected {shape[:-1]} (or "
                f"{shape[:-1] + (1,)}) for y_pred.shape={shape}, got "
                f"y_true.shape={t}."
            )
        mean, log_variance = y_pred[..., 0], y_pred[..., 1]
        values = stable_ops.gaussian_nll(y_true, mean, log_variance, full=self.full)
        return mean_over_last_axis(values)
