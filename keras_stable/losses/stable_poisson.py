"""Poisson negative log-likelihood from log-rates (or rates), no epsilon."""

from keras_stable import ops as stable_ops
from keras_stable.common.arguments import flag
from keras_stable.common.checks import align_ranks
from keras_stable.common.dtypes import to_float32
from keras_stable.common.serialization import register
from keras_stable.losses._base import StableLoss
from keras_stable.losses._elementwise import mean_over_last_axis


@register
class StablePoisson(StableLoss):
    """Poisson loss of a count regression, exact under a log link.

    Elementwise `exp(y_pred) - y_true * y_pred` for log-rates
    (`log_input=True`, the default: `y_pred` is the linear output of a log
    link, no `exp` activation), or `y_pred - y_true * log(y_pred)` for rates
    (`log_input=False`, what `keras.losses.Poisson` takes, without its
    `1e-7`); plus `lgamma(y_true + 1)` when `full=True`. Averaged over the
    last axis (inputs of rank 2 or more) as Keras does, then the Keras
    `reduction`.

    This is the thin class over `keras_stable.ops.poisson_nll`.

    Args:
        log_input: whether `y_pred` holds log-rates (default) or rates.
        full: add `lgamma(y_true + 1)`, making the loss the complete
            negative log-likelihood (a constant in `y_pred`).
        reduction: a Keras reduction: `"sum_over_batch_size"` (default),
            `"sum"`, `"mean"`, `"mean_with_sample_weight"` or `"none"`.
        name: optional name of the loss.
        dtype: dtype of the result, float32 by default (also under a
            `mixed_float16` / `mixed_bfloat16` policy).

    Call arguments:
        y_true: observed counts (>= 0). A rank-1 `y_true` holds one count per
            example (`(batch,)` against `(batch, 1)` predictions is
            accepted, as in Keras).
        y_pred: log-rates (or rates with `log_input=False`), the shape of
            `y_true`.
        sample_weight: optional weights broadcast onto the per-example
            losses from their leading axes, e.g. `(batch,)`.

    Numerical stability:
        No epsilon. `keras.losses.Poisson` computes
        `y_pred - y_true * log(y_pred + 1e-7)`: on a log link with
        `y_pred = exp(-20)` and `y_true = 1` the term is `-log(1.02e-7) =
        16.1` instead of 20, and the gradient is wrong by a factor of 50.
        From log-rates the value and the gradient `exp(y_pred) - y_true` are
        exact for every `y_pred` whose `exp` is finite (float16 is computed
        in float32). From rates, `y_pred = 0` with `y_true = 0` contributes
        exactly 0 (no `0 * log(0) = NaN`) with the gradient 1, and with
        `y_true > 0` gives `+inf`, the true value, with the finite gradient
        1, where Keras reports a finite loss and a gradient of
        `1 - y_true / 1e-7` (-5e6 in the mean of two).

    Examples:
        >>> import numpy as np
        >>> import keras_stable
        >>> loss = keras_stable.losses.StablePoisson()
        >>> y_true = np.array([[1.0, 0.0]], "float32")
        >>> log_rate = np.array([[-20.0, -2.0]], "float32")
        >>> print(f"{float(loss(y_true, log_rate)):.5f}")  # Keras on exp(log_rate): 8.11662
        10.06767
    """

    args = (flag("log_input", True), flag("full", False))

    def losses_and_valid(self, y_true, y_pred):
        y_true, y_pred = align_ranks(to_float32(y_true), to_float32(y_pred))
        values = stable_ops.poisson_nll(y_true, y_pred, full=self.full, log_input=self.log_input)
        return mean_over_last_axis(values)
