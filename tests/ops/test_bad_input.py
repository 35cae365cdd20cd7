"""Bad input raises a ValueError naming the argument and the shapes."""

import numpy as np
import pytest

from keras_stable import ops

x23 = np.ones((2, 3), "float32")


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: ops.safe_norm(x23, axis=2), r"`axis`=2 .*rank 2"),
        (lambda: ops.safe_norm(x23, axis=(0, 0)), r"`axis`.*repeats"),
        (lambda: ops.l2_normalize(x23, axis=-3), r"`axis`=-3 .*rank 2"),
        (lambda: ops.softmax(x23, axis=5), r"`axis`=5"),
        (lambda: ops.logsumexp(x23, axis="1"), r"`axis` must be an int"),
        (lambda: ops.log_softmax(x23, axis=1.0), r"`axis` must be an int"),
        (
            lambda: ops.softmax(x23, mask=np.ones((2, 4), bool)),
            r"`mask` of shape \(2, 4\).*\(2, 3\)",
        ),
        (lambda: ops.logsumexp(x23, mask=np.ones((2,), bool)), r"`mask` of shape \(2,\)"),
        (
            lambda: ops.softmax(x23, mask=np.ones((1, 2, 3), bool)),
            r"`mask` of shape \(1, 2, 3\) has a higher rank",
        ),
        (
            lambda: ops.cosine_similarity(x23, np.ones((4,), "float32")),
            r"`x1` of shape \(2, 3\) and `x2` of shape \(4,\)",
        ),
        (
            lambda: ops.safe_divide(x23, np.ones((2,), "float32")),
            r"`x` of shape \(2, 3\) and `y` of shape \(2,\)",
        ),
        (
            lambda: ops.softmax_cross_entropy(np.ones((2, 4), "float32"), x23),
            r"labels.shape=\(2, 4\).*logits.shape=\(2, 3\)",
        ),
        (lambda: ops.softmax_cross_entropy(np.ones((3,), "float32"), x23), r"labels.shape=\(3,\)"),
        (
            lambda: ops.softmax_cross_entropy(x23, x23, label_smoothing=-0.1),
            r"`label_smoothing` must be in \[0, 1\)",
        ),
        (lambda: ops.softmax_cross_entropy(x23, x23, label_smoothing=1.0), r"label_smoothing=1.0"),
        (
            lambda: ops.softmax_cross_entropy(x23, x23, label_smoothing="a"),
            r"`label_smoothing` must be a float",
        ),
        (
            lambda: ops.sparse_softmax_cross_entropy(np.array([0.0, 1.0]), x23),
            r"`labels` must be integer.*float",
        ),
        (
            lambda: ops.sparse_softmax_cross_entropy(np.array([0, 1, 2]), x23),
            r"`labels` of shape \(3,\).*expected labels of shape \(2,\)",
        ),
        (
            lambda: ops.sparse_softmax_cross_entropy(np.array([0, 1]), x23, axis=0),
            r"expected labels of shape \(3,\)",
        ),
        (
            lambda: ops.sparse_softmax_cross_entropy(np.array([0, 1]), x23, ignore_class=1.5),
            r"`ignore_class`",
        ),
        (
            lambda: ops.sigmoid_cross_entropy(np.ones((3, 2), "float32"), x23),
            r"labels.shape=\(3, 2\)",
        ),
        (
            lambda: ops.masked_task_distance(x23, np.ones((2, 1), "float32")),
            r"`y_true` and `y_pred` must have the same shape",
        ),
        (
            lambda: ops.masked_task_distance(x23, x23, mask=np.ones((4,), bool)),
            r"`mask` of shape \(4,\)",
        ),
        (lambda: ops.masked_task_distance(x23, x23, axis=2), r"`axis`=2"),
    ],
)
def test_value_error_names_argument_and_shapes(call, match):
    with pytest.raises(ValueError, match=match):
        call()
