"""Pearson correlation, streamed exactly, 0 (not NaN) for constant inputs."""

import keras
from keras import ops

from keras_stable.common.checks import align_ranks
from keras_stable.common.checks import check_axis
from keras_stable.common.dtypes import static_shape
from keras_stable.common.keras_internals import set_metric_direction
from keras_stable.common.reduction import keras_mask_of
from keras_stable.common.reduction import weighted_sum_and_count
from keras_stable.common.serialization import register
from keras_stable.metrics import _moments


@register
class StablePearsonCorrelation(keras.metrics.Metric):
    """Pearson's correlation coefficient, exact across batches, never NaN.

    The counterpart of `keras.metrics.PearsonCorrelation` (same arguments
    and defaults): the correlation between `y_true` and `y_pred` along
    `axis`, averaged over the other axes.

    - When `axis` leaves the batch axis out (the default `axis=-1` on
      `(batch, features)` inputs: one correlation per example, across its
      features), the result is the weighted mean of the per-example
      correlations over every example seen - Keras's number.
    - When `axis` includes the batch axis (`axis=0` for one correlation
      per output column, or `axis=-1` on `(batch,)` inputs), the
      correlation is that of *all* samples seen since the last reset:
      the state is streaming weighted moments, so the result over several
      batches equals the result over their concatenation. (Keras averages
      the per-batch correlations instead.)

    A constant input (zero variance) has correlation 0, scikit-learn's
    `force_finite` convention (`sklearn.feature_selection.r_regression`);
    Keras gives NaN - e.g. for the constant predictions of a model early in
    training.

    Args:
        name: optional name of the metric.
        dtype: dtype of the state and result, float32 by default.
        axis: int, tuple of ints or None (all axes): the axis along which
            each correlation is computed (default -1).

    Call arguments:
        y_true: targets.
        y_pred: predictions, the shape of `y_true` (a trailing size-1 axis
            on one side is matched, as Keras does).
        sample_weight: optional weights, aligned on the leading axes: with
            `axis` excluding the batch axis they weight the per-example
            correlations (Keras's mean); with it, each sample's weight in
            the moments. The Keras mask of `y_pred` counts as a 0/1 weight;
            a weight of 0 makes an entry count for nothing, NaN included.

    Numerical stability:
        Each batch is reduced exactly (two passes around its midrange, so
        a constant batch has variance exactly 0 and a large common offset
        loses no digits) and merged into the state with Chan et al.'s
        pairwise update, which keeps the moments of a stream as exact as
        those of one batch. `r = m_tp / (sqrt(m_tt) sqrt(m_pp))` is
        clipped to [-1, 1]. Computed in float32 (half-precision inputs
        are cast exactly). Before any update the result is 0.

    Examples:
        >>> import numpy as np
        >>> import keras_stable
        >>> m = keras_stable.metrics.StablePearsonCorrelation(axis=0)
        >>> m.update_state(np.array([1.0, 2.0], "float32"), np.array([1.0, 1.0], "float32"))
        >>> float(m.result())  # constant predictions: Keras gives NaN
        0.0
        >>> m.update_state(np.array([3.0, 4.0], "float32"), np.array([2.0, 4.0], "float32"))
        >>> round(float(m.result()), 6)  # over [1, 2, 3, 4] and [1, 1, 2, 4]
        0.912871
    """

    def __init__(self, name="stable_pearson_correlation", dtype=None, axis=-1):
        super().__init__(name=name, dtype=dtype)
        self.axis = check_axis(axis, multiple=True)
        set_metric_direction(self, "up")
        # The mean of per-example correlations (axis without the batch).
        self.total = self.add_variable(
            shape=(), initializer="zeros", dtype=self.dtype, name="total"
        )
        self.count = self.add_variable(
            shape=(), initializer="zeros", dtype=self.dtype, name="count"
        )
        # The streaming moments (axis with the batch), built at the first
        # update, when the shape of one correlation is known.
        self._moments = None
        self._shape = None

    def _axes(self, rank):
        return check_axis(self.axis, rank, multiple=True, where="for StablePearsonCorrelation")

    def update_state(self, y_true, y_pred, sample_weight=None):
        mask = keras_mask_of(y_pred)
        y_pred = ops.convert_to_tensor(y_pred)
        y_true, y_pred = align_ranks(ops.convert_to_tensor(y_true), y_pred)
        rank = len(static_shape(y_pred))
        axes = self._axes(rank)
        if 0 not in axes:
            # One correlation per example: stream their weighted mean.
            t, p, _ = _moments.prepare(y_true, y_pred)
            ones = ops.ones_like(t)
            m = _moments.batch_moments(t, p, ones, axes)
            values = _moments.correlation(m["m_tt"], m["m_pp"], m["m_tp"])
            total, count = weighted_sum_and_count(values, sample_weight, mask, None, self.dtype)
            self.total.assign(self.total + total)
            self.count.assign(self.count + count)
            return
        t, p, w = _moments.prepare(y_true, y_pred, sample_weight, mask)
        shape = tuple(d for i, d in enumerate(static_shape(t)) if i not in axes)
        if self._moments is None:
            if None in shape:
                raise ValueError(
                    "StablePearsonCorrelation needs static dimensions outside "
                    f"`axis`={self.axis!r}, got inputs of shape "
                    f"{static_shape(t)}."
                )
            self._shape = shape
            self._moments = _moments.Moments(self, shape)
        elif shape != self._shape:
            raise ValueError(
                f"The metric was built for correlations of shape "
                f"{self._shape}, got inputs of shape {static_shape(t)} "
                f"(axis={self.axis!r})."
            )
        self._moments.update(_moments.batch_moments(t, p, w, axes))

    def result(self):
        if self._moments is None:
            return ops.divide_no_nan(self.total, self.count)
        _, _, m_tt, m_pp, m_tp, _ = self._moments.totals()
        return ops.mean(_moments.correlation(m_tt, m_pp, m_tp))

    def reset_state(self):
        for v in self.variables:
            v.assign(ops.zeros(v.shape, dtype=v.dtype))

    def get_config(self):
        config = super().get_config()
        config["axis"] = self.axis
        return config
