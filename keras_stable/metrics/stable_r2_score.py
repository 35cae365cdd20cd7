"""Coefficient of determination, streamed exactly, finite for constant targets."""

import numbers

import keras
from keras import ops

from keras_stable.common.checks import align_ranks
from keras_stable.common.dtypes import static_shape
from keras_stable.common.keras_internals import set_metric_direction
from keras_stable.common.reduction import keras_mask_of
from keras_stable.common.serialization import register
from keras_stable.metrics import _moments
from keras_stable.ops import safe_divide

CLASS_AGGREGATIONS = (None, "uniform_average", "variance_weighted_average")


@register
class StableR2Score(keras.metrics.Metric):
    """R² (coefficient of determination), exact across batches, never NaN.

    The counterpart of `keras.metrics.R2Score` (same arguments and
    defaults). For each output column `j`, over every sample seen since
    the last reset:

        R2_j = 1 - SS_res_j / SS_tot_j,
        SS_res_j = sum(w (y_true - y_pred)**2),
        SS_tot_j = sum(w (y_true - mean(y_true))**2),

    then aggregated over the columns. Where `SS_tot_j = 0` (a constant
    target) the score follows scikit-learn's `force_finite` convention:
    1.0 for a perfect prediction, 0.0 otherwise. Keras returns NaN for a
    constant target with a perfect prediction.

    Args:
        class_aggregation: how the columns' scores are combined (Keras's
            and scikit-learn's `multioutput`): `"uniform_average"`
            (default), `"variance_weighted_average"` (weighted by
            `SS_tot_j`; uniform when every target is constant, as in
            scikit-learn) or `None` (the vector of per-column scores).
        num_regressors: int >= 0, the number `p` of independent regressors
            of the adjusted R², `1 - (1 - R2) (n - 1) / (n - p - 1)` with
            `n` the number of samples; 0 (default) is the plain R². Where
            `n - p - 1 <= 0` the plain R² is returned (Keras warns there;
            a compiled metric cannot).
        name: optional name of the metric.
        dtype: dtype of the state and result, float32 by default.

    Call arguments:
        y_true: targets of shape `(batch, outputs)` (or `(batch,)`: one
            output).
        y_pred: predictions of the same shape (a trailing size-1 axis on one
            side is matched).
        sample_weight: optional weights of shape `(batch,)` or
            `(batch, outputs)`. The Keras mask of `y_pred` counts as a 0/1
            weight; an entry with weight 0 counts for nothing, NaN included.

    Numerical stability:
        `SS_tot` is not computed as `sum(y**2) - sum(y)**2 / n` (Keras),
        which loses every digit when the mean is large next to the spread
        and makes a constant target's `SS_tot` `+-1e-9` instead of 0. Each
        batch is reduced exactly (two passes around its midrange) and
        merged with Chan et al.'s update, so `SS_tot` is exact across any
        number of batches, and exactly 0 for a constant target. `n` for
        the adjusted R² counts the entries with a nonzero weight (Keras
        counts every element of `y_true`, `batch * outputs`). Computed in
        float32. Before any update the result is 0.

    Examples:
        >>> import numpy as np
        >>> import keras_stable
        >>> m = keras_stable.metrics.StableR2Score()
        >>> y = np.array([[2.0], [2.0], [2.0]], "float32")
        >>> m.update_state(y, y)
        >>> float(m.result())  # constant target, perfect prediction: Keras NaN
        1.0
        >>> m.reset_state()
        >>> m.update_state(np.array([[1.0], [4.0], [3.0]], "float32"), np.array([[2.0], [4.0], [4.0]], "float32"))
        >>> round(float(m.result()), 6)
        0.571429
    """

    def __init__(
        self,
        class_aggregation="uniform_average",
        num_regressors=0,
        name="stable_r2_score",
        dtype=None,
    ):
        super().__init__(name=name, dtype=dtype)
        if class_aggregation not in CLASS_AGGREGATIONS:
            raise ValueError(
                f"Invalid `class_aggregation`={class_aggregation!r}: expected "
                f"one of {list(CLASS_AGGREGATIONS)}."
            )
        if (
            isinstance(num_regressors, bool)
            or not isinstance(num_regressors, numbers.Integral)
            or num_regressors < 0
        ):
            raise ValueError(
                f"`num_regressors` must be an int >= 0, got num_regressors={num_regressors!r}."
            )
        self.class_aggregation = class_aggregation
        self.num_regressors = int(num_regressors)
        set_metric_direction(self, "up")
        # Per-output state, built at the first update (the number of
        # outputs is the last dimension of the inputs).
        self._moments = None
        self._outputs = None

    def update_state(self, y_true, y_pred, sample_weight=None):
        mask = keras_mask_of(y_pred)
        y_pred = ops.convert_to_tensor(y_pred)
        y_true = ops.convert_to_tensor(y_true)
        y_true, y_pred = align_ranks(y_true, y_pred)
        if len(static_shape(y_pred)) == 1:
            y_true = ops.expand_dims(y_true, -1)
            y_pred = ops.expand_dims(y_pred, -1)
        shape = static_shape(y_pred)
        if len(shape) != 2 or shape[-1] is None:
            raise ValueError(
                "StableR2Score expects inputs of shape (batch, outputs) with "
                f"a static number of outputs, got y_true.shape="
                f"{static_shape(y_true)} and y_pred.shape={shape}."
            )
        if self._moments is None:
            self._outputs = shape[-1]
            self._moments = _moments.Moments(self, (shape[-1],), residuals=True)
        elif shape[-1] != self._outputs:
            raise ValueError(
                f"The metric was built for {self._outputs} outputs, got y_pred.shape={shape}."
            )
        t, p, w = _moments.prepare(y_true, y_pred, sample_weight, mask)
        self._moments.update(_moments.batch_moments(t, p, w, (0,), residuals=True))

    def result(self):
        if self._moments is None:
            return ops.zeros((), self.dtype)
        _, count, ss_tot, _, _, ss_res = self._moments.totals()
        constant = ops.equal(ss_tot, 0)
        safe_tot = ops.where(constant, ops.ones_like(ss_tot), ss_tot)
        raw = 1.0 - ss_res / safe_tot
        # scikit-learn's force_finite: a constant target scores 1.0 when
        # predicted perfectly, 0.0 otherwise.
        perfect = ops.cast(ops.equal(ss_res, 0), raw.dtype)
        scores = ops.where(constant, perfect, raw)
        if self.num_regressors:
            p = float(self.num_regressors)
            dof = count - p - 1.0
            adjusted = 1.0 - (1.0 - scores) * safe_divide(count - 1.0, dof)
            scores = ops.where(ops.greater(dof, 0), adjusted, scores)
        if self.class_aggregation is None:
            return scores
        if self.class_aggregation == "uniform_average":
            return ops.mean(scores)
        weights = ops.sum(ss_tot)
        weighted = safe_divide(ops.sum(ss_tot * scores), weights)
        return ops.where(ops.greater(weights, 0), weighted, ops.mean(scores))

    def reset_state(self):
        for v in self.variables:
            v.assign(ops.zeros(v.shape, dtype=v.dtype))

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "class_aggregation": self.class_aggregation,
                "num_regressors": self.num_regressors,
            }
        )
        return config
