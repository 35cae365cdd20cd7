"""Softmax cross-entropy for integer labels, with an ignored class."""

from keras import ops

from keras_stable import ops as stable_ops
from keras_stable.common.arguments import Arg
from keras_stable.common.checks import check_ignore_class
from keras_stable.common.checks import integer_labels
from keras_stable.common.serialization import register
from keras_stable.losses._base import AXIS
from keras_stable.losses._base import FROM_LOGITS
from keras_stable.losses._base import LogitsLoss


@register
class StableSparseSoftmaxCrossEntropy(LogitsLoss):
    """Softmax cross-entropy for integer class labels, NaN-free.

    Per example, `loss = logsumexp(y_pred, axis) - y_pred[y_true]`, then the
    Keras `reduction`. Examples labelled `ignore_class` give 0 and do not
    count: `"sum_over_batch_size"` and `"mean"` average over the
    non-ignored examples (as `keras.losses.SparseCategoricalCrossentropy`
    does), and a batch whose labels are all ignored gives 0, not NaN. With
    `from_logits=False`, `y_pred` holds probabilities and the loss is
    `-log(y_pred[y_true] / sum(y_pred))`.

    This is the thin class over
    `keras_stable.ops.sparse_softmax_cross_entropy`.

    Args:
        from_logits: whether `y_pred` holds logits (default) or
            probabilities.
        ignore_class: optional int label to ignore (e.g. -1 for padding).
        axis: int, the class axis of `y_pred`.
        reduction: a Keras reduction: `"sum_over_batch_size"` (default),
            `"sum"`, `"mean"`, `"mean_with_sample_weight"` or `"none"`.
        name: optional name of the loss.
        dtype: dtype of the result, float32 by default.

    Call arguments:
        y_true: class indices, the shape of `y_pred` without `axis` (a
            size-1 class axis is accepted). Integer dtypes are used as they
            are, never cast to the loss dtype. Float labels - `model.fit`
            may pass integer targets as floats - are read exactly where they
            are integral; a fractional or NaN label gives a NaN loss.
        y_pred: logits (or probabilities), any float dtype.
        sample_weight: optional weights, e.g. of shape `(batch,)`.

    Numerical stability:
        `keras.losses.Loss.__call__` converts labels to the loss dtype, so
        under a float16 loss dtype the label 2049 becomes 2048; here integer
        labels stay integers. The loss is `logsumexp` shifted by the
        largest logit, in float32: finite for every finite logit, and a
        `-inf` logit on another class contributes nothing (Keras's
        `SparseCategoricalCrossentropy` is NaN there on JAX and eager TF).
        A label on a class with logit `-inf` gives `+inf`. From
        probabilities, no epsilon clip: exact down to the smallest normal
        probability (1.18e-38), saturated below it (a label on `p = 0`
        gives 87.34, with a zero gradient); the logits of a float32 softmax
        output are used where the backend exposes them (TensorFlow, torch).
        A label outside `[0, classes)` that is not `ignore_class` gives NaN,
        never the silent loss of a wrapped index. Ignored examples get a
        zero gradient.

    Examples:
        >>> import numpy as np
        >>> import keras_stable
        >>> loss = keras_stable.losses.StableSparseSoftmaxCrossEntropy(ignore_class=-1)
        >>> y_pred = np.array([[2.0, -np.inf, 0.0], [1.0, 2.0, 3.0]], "float32")
        >>> print(f"{float(loss(np.array([0, -1]), y_pred)):.6f}")
        0.126928
        >>> print(float(loss(np.array([-1, -1]), y_pred)))
        0.0
    """

    args = (FROM_LOGITS, Arg("ignore_class", None, check_ignore_class), AXIS)

    def losses_and_valid(self, y_true, y_pred):
        y_pred = self.scores(y_pred)
        labels, integral = integer_labels(y_true, y_pred, self.axis)
        values = stable_ops.sparse_softmax_cross_entropy(
            labels,
            y_pred,
            axis=self.axis,
            ignore_class=self.ignore_class,
            from_logits=self.from_logits,
        )
        valid = None
        if self.ignore_class is not None:
            valid = ops.not_equal(labels, self.ignore_class)
        if integral is not None:
            # A non-integral label stays counted, so its NaN shows.
            nan = ops.full_like(values, float("nan"))
            values = ops.where(integral, values, nan)
            if valid is not None:
                valid = ops.logical_or(ops.logical_not(integral), valid)
        return values, valid
