"""Negative log-likelihood of a mixture density network."""

from keras import ops

from keras_stable import ops as stable_ops
from keras_stable.common.arguments import Arg
from keras_stable.common.checks import check_positive_int
from keras_stable.common.dtypes import static_shape
from keras_stable.common.dtypes import to_float32
from keras_stable.common.serialization import register
from keras_stable.losses._base import StableLoss


def _check_num_components(value):
    return check_positive_int(value, "num_components")


@register
class MixtureDensityNLL(StableLoss):
    """Mixture-of-Gaussians negative log-likelihood, for mixture density networks.

    `y_pred` holds, along its last axis, the `M = num_components` mixture
    logits, then the `M * D` component means, then the `M * D` log standard
    deviations (each block component-major: `(M, D)` flattened), so a
    `Dense(M * (1 + 2 * D))` head feeds it directly; `D` is the last
    dimension of `y_true`. The per-example loss is
    `-log(sum_m softmax(logits)_m * prod_d N(y_d; mean_md, exp(log_scale_md)))`
    (`keras_stable.ops.mixture_nll`), then the Keras `reduction`.

    Args:
        num_components: the number of mixture components `M` (a positive
            int, default 1).
        reduction: a Keras reduction: `"sum_over_batch_size"` (default),
            `"sum"`, `"mean"`, `"mean_with_sample_weight"` or `"none"`.
        name: optional name of the loss.
        dtype: dtype of the result, float32 by default (also under a
            `mixed_float16` / `mixed_bfloat16` policy).

    Call arguments:
        y_true: targets `(..., D)`.
        y_pred: `(..., M * (1 + 2 * D))`; `ValueError` naming both shapes
            when its last axis is not that, or its leading axes are not
            those of `y_true`.
        sample_weight: optional weights broadcast onto the per-example
            losses from their leading axes, e.g. `(batch,)`.

    Numerical stability:
        Computed in log space, in float32 also for half-precision
        predictions (`keras_stable.ops.mixture_nll`): a target 40 standard
        deviations from every component gives 800.919 and the gradient -40
        with respect to the mean, where the naive
        `-log(sum(pi * N(y)))` gives `inf` and NaN gradients because every
        density underflows to 0. A component whose logit is `-inf` gets a
        zero gradient.

    Examples:
        >>> import numpy as np
        >>> import keras_stable
        >>> loss = keras_stable.losses.MixtureDensityNLL(2, reduction="none")
        >>> y_true = np.array([[40.0]], "float32")
        >>> y_pred = np.array([[0.0, -1e4, 0.0, 0.0, 0.0, 0.0]], "float32")
        >>> np.round(np.asarray(loss(y_true, y_pred)), 3)
        array([800.919], dtype=float32)
    """

    args = (Arg("num_components", 1, _check_num_components),)

    def losses_and_valid(self, y_true, y_pred):
        y_true = to_float32(y_true)
        y_pred = to_float32(y_pred)
        t, p = static_shape(y_true), static_shape(y_pred)
        m = self.num_components
        d = t[-1] if t else None
        if (
            not t
            or d is None
            or len(p) != len(t)
            or p[-1] != m * (1 + 2 * d)
            or any(a != b and None not in (a, b) for a, b in zip(t[:-1], p[:-1]))
        ):
            raise ValueError(
                f"`y_pred` must be `y_true.shape[:-1] + (num_components * (1 + 2 * D),)` "
                f"with D = y_true.shape[-1] and num_components={m}: the logits, the "
                f"means and the log-scales; expected {t[:-1] + (m * (1 + 2 * (d or 0)),)}, "
                f"got y_true.shape={t} and y_pred.shape={p}."
            )
        lead = tuple(-1 if s is None else s for s in ops.shape(y_pred)[:-1])
        logits = y_pred[..., :m]
        mean = ops.reshape(y_pred[..., m : m + m * d], lead + (m, d))
        log_scale = ops.reshape(y_pred[..., m + m * d :], lead + (m, d))
        return stable_ops.mixture_nll(y_true, logits, mean, log_scale), None
