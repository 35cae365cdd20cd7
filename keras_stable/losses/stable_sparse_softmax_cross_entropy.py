"""Softmax cross-entropy for integer labels, with an ignored class."""

from keras import ops

from keras_stable import ops as stable_ops
from keras_stable._serialization import register
from keras_stable.losses._base import StableLoss
from keras_stable.losses._base import check_bool
from keras_stable.losses._base import dtype_of
from keras_stable.losses._base import static_shape
from keras_stable.losses.stable_softmax_cross_entropy import _check_axis
from keras_stable.losses.stable_softmax_cross_entropy import class_log_scores

# float32 holds every integer up to 2**24 exactly; an int32 index must fit.
_INT32_LIMIT = 2.0**31


def check_ignore_class(ignore_class):
    if ignore_class is not None and (
        isinstance(ignore_class, bool) or not isinstance(ignore_class, int)
    ):
        raise ValueError(
            f"`ignore_class` must be an int or None, got {ignore_class!r}."
        )
    return ignore_class


def integer_labels(y_true, y_pred, axis):
    """Returns `(labels, integral)`: int32 labels and where they are exact.

    Integer labels are used as they are. Float labels (Keras's data adapters
    may hand integer targets over as floats) are read exactly where they
    hold an integral value; `integral` is False where they do not (a
    fractional or NaN label), and the loss is NaN there - never the loss of a
    silently truncated class. A size-1 class axis on the labels (`(batch, 1)`
    for `(batch, classes)` logits) is squeezed.
    """
    y_true = ops.convert_to_tensor(y_true)
    rank = len(static_shape(y_pred))
    if not -rank <= axis < rank:
        raise ValueError(
            f"Invalid `axis`={axis} for `y_pred` of shape "
            f"{static_shape(y_pred)}."
        )
    class_axis = axis % rank
    if (
        len(static_shape(y_true)) == rank
        and static_shape(y_true)[class_axis] == 1
    ):
        y_true = ops.squeeze(y_true, axis=class_axis)
    dtype = dtype_of(y_true)
    if dtype.startswith(("int", "uint")):
        return y_true, None
    if dtype == "bool" or not dtype.startswith("float"):
        raise ValueError(
            f"`y_true` must hold integer class indices, got dtype {dtype} "
            f"with shape {static_shape(y_true)}."
        )
    y_true = ops.cast(y_true, "float32") if dtype != "float64" else y_true
    integral = ops.logical_and(
        ops.equal(y_true, ops.floor(y_true)),
        ops.less(ops.abs(y_true), _INT32_LIMIT),
    )
    labels = ops.cast(
        ops.where(integral, y_true, ops.zeros_like(y_true)), "int32"
    )
    return labels, integral


@register
class StableSparseSoftmaxCrossEntropy(StableLoss):
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
        A label on a class with logit `-inf` (probability 0) gives `+inf`.
        A label outside `[0, classes)` that is not `ignore_class` gives NaN,
        never the silent loss of a wrapped index. Ignored examples get a
        zero gradient.

    Example:

    >>> import numpy as np
    >>> import keras_stable
    >>> loss = keras_stable.losses.StableSparseSoftmaxCrossEntropy(ignore_class=-1)
    >>> y_pred = np.array([[2.0, -np.inf, 0.0], [1.0, 2.0, 3.0]], "float32")
    >>> print(f"{float(loss(np.array([0, -1]), y_pred)):.6f}")
    0.126928
    >>> print(float(loss(np.array([-1, -1]), y_pred)))
    0.0
    """

    def __init__(
        self,
        from_logits=True,
        ignore_class=None,
        axis=-1,
        reduction="sum_over_batch_size",
        name="stable_sparse_softmax_cross_entropy",
        dtype=None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.from_logits = check_bool(from_logits, "from_logits")
        self.ignore_class = check_ignore_class(ignore_class)
        self.axis = _check_axis(axis)

    def compute_per_example(self, y_true, y_pred, sample_weight):
        logits = class_log_scores(y_pred, self.from_logits)
        labels, integral = integer_labels(y_true, logits, self.axis)
        values = stable_ops.sparse_softmax_cross_entropy(
            labels, logits, axis=self.axis, ignore_class=self.ignore_class
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
        return values, sample_weight, valid

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "from_logits": self.from_logits,
                "ignore_class": self.ignore_class,
                "axis": self.axis,
            }
        )
        return config
