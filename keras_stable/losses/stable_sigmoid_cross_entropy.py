"""Binary (sigmoid) cross-entropy, finite for every finite logit."""

import functools

from keras import ops

from keras_stable import ops as stable_ops
from keras_stable.common.checks import check_unit_interval_labels
from keras_stable.common.dtypes import static_shape
from keras_stable.common.serialization import register
from keras_stable.losses._base import AXIS
from keras_stable.losses._base import FROM_LOGITS
from keras_stable.losses._base import LABEL_SMOOTHING
from keras_stable.losses._base import LogitsLoss
from keras_stable.losses._elementwise import mean_over_observed_axis


def _same_rank(y_true, y_pred):
    """Expands a trailing size-1 axis that only one side has (Keras does)."""
    t, p = static_shape(y_true), static_shape(y_pred)
    if len(p) == len(t) + 1 and p[-1] == 1:
        y_true = ops.expand_dims(y_true, -1)
    elif len(t) == len(p) + 1 and t[-1] == 1:
        y_pred = ops.expand_dims(y_pred, -1)
    if static_shape(y_true) != static_shape(y_pred):
        raise ValueError(
            "`y_true` and `y_pred` must have the same shape, got "
            f"y_true.shape={t} and y_pred.shape={p}."
        )
    return y_true, y_pred


def _binary_losses_and_valid(loss, elementwise, y_true, y_pred):
    """`(values, valid)` of a binary cross-entropy whose NaN labels are missing.

    `elementwise(labels, y_pred)` is the loss's functional twin. A NaN label
    is replaced (by 0) before the twin sees it and its elementwise loss
    selected away after - the double where: the twin's value and gradient
    there are finite, and the select gives the entry exactly 0 and a zero
    gradient (`0 * NaN` or a single `where` would leak NaN into both). The
    mean over `loss.axis` counts the observed entries only; an example with
    none is left out of the reduction (`valid`). Labels given as NumPy data
    must lie in [0, 1] (a `ValueError` otherwise; tensors are not read).
    """
    given = y_true
    y_true = ops.cast(ops.convert_to_tensor(y_true), "float32")
    y_pred = ops.convert_to_tensor(y_pred)
    y_true, scores = _same_rank(y_true, loss.float32_input(y_pred))
    scores = loss.handed_over(y_pred, scores)
    check_unit_interval_labels(given, "y_true")  # after the shape check
    observed = ops.logical_not(ops.isnan(y_true))
    y_true = ops.where(observed, y_true, ops.zeros_like(y_true))
    if loss.label_smoothing:
        y_true = y_true * (1.0 - loss.label_smoothing) + 0.5 * loss.label_smoothing
    values = elementwise(y_true, scores)
    values = ops.where(observed, values, ops.zeros_like(values))
    return mean_over_observed_axis(values, observed, loss.axis)


@register
class StableSigmoidCrossEntropy(LogitsLoss):
    """Binary cross-entropy from logits (or probabilities), NaN-free.

    Elementwise `-y log(sigmoid(x)) - (1 - y) log(1 - sigmoid(x))`, averaged
    over `axis` (the last by default) for inputs of rank 2 or more (as
    `keras.losses.BinaryCrossentropy`; a rank-1 input holds one label per
    example), then the Keras `reduction`. With `label_smoothing = s`, labels
    become `y (1 - s) + s / 2`. With `from_logits=False`, `y_pred` holds
    probabilities and the loss is computed from `log(p)` and `log(1 - p)`.

    NaN in `y_true` marks a missing label, as in `MaskedMeanSquaredError`:
    it counts for nothing, exactly - not in the value, not in the mean over
    `axis` (whose denominator counts the observed labels only), not in the
    gradient. An example whose labels are all missing is left out of the
    reduction (it is not averaged in as a 0). Without NaN labels the value
    is unchanged: Keras's number, with the same reductions,
    `sample_weight` and Keras mask.

    This is the thin class over `keras_stable.ops.sigmoid_cross_entropy`,
    which stays elementwise and NaN-propagating (a NaN label gives NaN
    there): the missing-label rule needs the mean's denominator, which is
    the class's.

    Args:
        from_logits: whether `y_pred` holds logits (default) or
            probabilities.
        label_smoothing: float in [0, 1).
        axis: int, the axis the elementwise losses are averaged over
            (inputs of rank 2 or more).
        reduction: a Keras reduction: `"sum_over_batch_size"` (default),
            `"sum"`, `"mean"`, `"mean_with_sample_weight"` or `"none"`.
        name: optional name of the loss.
        dtype: dtype of the result, float32 by default.

    Call arguments:
        y_true: targets in [0, 1], NaN where missing.
        y_pred: logits (or probabilities), same shape.
        sample_weight: optional weights, e.g. of shape `(batch,)`.

    Numerical stability:
        A NaN label is replaced by the double-where pattern before the
        cross-entropy is computed, then its entry selected away: exactly 0,
        with a zero gradient, whatever the finite logit. Keras's
        `BinaryCrossentropy` returns NaN for such a batch even when the
        example's `sample_weight` is 0 (`0 * NaN = NaN`; torch refuses the
        probability targets outside [0, 1]). An example whose labels are
        all missing gives 0 with a zero gradient (no `0 / 0`); a batch with
        no label gives 0.

        From logits, `max(x, 0) - x y + log1p(exp(-|x|))` in float32: a logit
        of 1e4 gives 1e4 (the naive form gives `inf` and NaN gradients) and
        the gradient is `sigmoid(x) - y`. From probabilities, no epsilon
        clip: exact down to the smallest normal float32 (1.18e-38), so
        `p = 0` with `y = 0` contributes exactly 0 (gradient `1 / (1 - p)`),
        and `p = 0` with `y = 1` saturates at 87.34 with a zero gradient -
        where Keras reports `-log(1e-7) = 16.12`; the logits of a float32
        sigmoid output are used where the backend exposes them (TensorFlow,
        torch). An infinite logit gives `inf` or NaN, as in the functional
        twin.

    Examples:
        >>> import numpy as np
        >>> import keras_stable
        >>> loss = keras_stable.losses.StableSigmoidCrossEntropy()
        >>> y_true = np.array([[0.0, 1.0]], "float32")
        >>> y_pred = np.array([[100.0, 1e4]], "float32")
        >>> print(float(loss(y_true, y_pred)))
        50.0
        >>> y_true = np.array([[1.0, np.nan], [np.nan, np.nan]], "float32")
        >>> print(f"{float(loss(y_true, np.zeros((2, 2), 'float32'))):.4f}")  # log(2): one label
        0.6931
    """

    activation = "sigmoid"
    args = (FROM_LOGITS, LABEL_SMOOTHING, AXIS)

    def losses_and_valid(self, y_true, y_pred):
        elementwise = functools.partial(
            stable_ops.sigmoid_cross_entropy, from_logits=self.from_logits
        )
        return _binary_losses_and_valid(self, elementwise, y_true, y_pred)
