"""The op cases shared by the value, gradient and property tests.

Each case is a keras_stable op bound to its float64 NumPy reference, the
arguments (as NumPy) and which of them are differentiated.
"""

import dataclasses

import numpy as np

from keras_stable import ops
from tests import reference as ref

NEG_INF = -np.inf
rng = np.random.default_rng(0)


@dataclasses.dataclass
class Case:
    name: str
    op: callable  # keras_stable op taking the tensors in `args`
    ref: callable  # float64 NumPy reference with the same signature
    args: tuple  # NumPy arrays; float ones take the dtype under test
    wrt: tuple = (0,)  # indices of args to differentiate
    float_args: tuple = None  # indices cast to the tested dtype (default wrt)

    def __post_init__(self):
        if self.float_args is None:
            self.float_args = self.wrt

    def __repr__(self):
        return self.name


def _labels_onehot(idx, k):
    return np.eye(k)[idx]


def edge_cases():
    """The edge-case grid of issue 2, as op cases."""
    z = np.zeros((2, 4))
    big = np.array([[1e4, -1e4, 3.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    logits_neg_inf = np.array([[2.0, NEG_INF, 0.0], [NEG_INF, NEG_INF, NEG_INF]])
    logits_f16_big = np.array([[12.0, 11.0, 0.0], [100.0, -100.0, 50.0]])
    row_mask = np.array([[True, False, True], [False, False, False]])
    onehot = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    nan_labels = np.array([[1.0, np.nan, 3.0], [np.nan, np.nan, np.nan]])
    preds = np.array([[0.5, 2.0, 3.0], [1.0, 2.0, 3.0]])
    task_mask = np.array([[True, False, True], [False, False, False]])
    return [
        Case(
            "safe_sqrt_zero_and_negative",
            ops.safe_sqrt,
            ref.safe_sqrt,
            (np.array([4.0, 0.0, -1e-9, -1.0, 1e-30]),),
        ),
        Case(
            "safe_norm_zero_rows",
            lambda x: ops.safe_norm(x, axis=-1),
            lambda x: ref.safe_norm(x, axis=-1),
            (z,),
        ),
        Case(
            "safe_norm_big",
            lambda x: ops.safe_norm(x, axis=-1),
            lambda x: ref.safe_norm(x, axis=-1),
            (big,),
        ),
        Case(
            "safe_norm_f16_overflow",
            lambda x: ops.safe_norm(x),
            lambda x: ref.safe_norm(x),
            (np.full(4, 300.0),),
        ),
        Case(
            "safe_norm_axis0_masked_columns",
            lambda x: ops.safe_norm(x, axis=0),
            lambda x: ref.safe_norm(x, axis=0),
            (np.array([[0.0, 1.0, 0.0], [0.0, -2.0, 0.0]]),),
        ),
        Case(
            "l2_normalize_zero_and_big",
            ops.l2_normalize,
            ref.l2_normalize,
            (np.concatenate([z, big]),),
        ),
        Case("l2_normalize_f16_300", ops.l2_normalize, ref.l2_normalize, (np.full((1, 4), 300.0),)),
        Case(
            "cosine_zero_vectors",
            ops.cosine_similarity,
            ref.cosine_similarity,
            (
                np.array([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]),
                np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]),
            ),
            wrt=(0, 1),
        ),
        Case(
            "safe_divide_zero_denominator",
            ops.safe_divide,
            ref.safe_divide,
            (np.array([1.0, 0.0, -3.0, 1e2]), np.array([0.0, 0.0, 2.0, 0.25])),
            wrt=(0, 1),
        ),
        # logsumexp reduces all axes by default (as keras.ops.logsumexp):
        # the rows are pinned with axis=-1.
        Case(
            "logsumexp_neg_inf_rows",
            lambda x: ops.logsumexp(x, axis=-1),
            lambda x: ref.logsumexp(x, axis=-1),
            (logits_neg_inf,),
        ),
        Case(
            "logsumexp_masked_rows",
            lambda x, m: ops.logsumexp(x, axis=-1, mask=m),
            lambda x, m: ref.logsumexp(x, axis=-1, mask=m),
            (logits_f16_big, row_mask),
        ),
        Case(
            "logsumexp_f16_big",
            lambda x: ops.logsumexp(x, axis=-1),
            lambda x: ref.logsumexp(x, axis=-1),
            (logits_f16_big,),
        ),
        Case("softmax_neg_inf_rows", ops.softmax, ref.softmax, (logits_neg_inf,)),
        Case(
            "softmax_big",
            ops.softmax,
            ref.softmax,
            (np.array([[1000.0, 999.0, 0.0], [12.0, 11.0, 0.0]]),),
        ),
        Case(
            "softmax_masked_rows",
            lambda x, m: ops.softmax(x, mask=m),
            lambda x, m: ref.softmax(x, mask=m),
            (logits_f16_big, row_mask),
        ),
        Case(
            "softmax_nan_under_mask",
            lambda x, m: ops.softmax(x, mask=m),
            lambda x, m: ref.softmax(x, mask=m),
            (np.array([[1.0, np.nan, 2.0], [np.nan, np.nan, np.nan]]), row_mask),
        ),
        Case("log_softmax_neg_inf_rows", ops.log_softmax, ref.log_softmax, (logits_neg_inf,)),
        Case(
            "log_softmax_masked_rows",
            lambda x, m: ops.log_softmax(x, mask=m),
            lambda x, m: ref.log_softmax(x, mask=m),
            (logits_f16_big, row_mask),
        ),
        Case(
            "softmax_ce_neg_inf_zero_label",
            ops.softmax_cross_entropy,
            ref.softmax_cross_entropy,
            (onehot[:1], logits_neg_inf[:1]),
            wrt=(1,),
            float_args=(0, 1),
        ),
        Case(
            "softmax_ce_fully_masked_row",
            lambda y, x, m: ops.softmax_cross_entropy(y, x, mask=m),
            lambda y, x, m: ref.softmax_cross_entropy(y, x, mask=m),
            (onehot, logits_f16_big, row_mask),
            wrt=(1,),
            float_args=(0, 1),
        ),
        Case(
            "softmax_ce_smoothing_masked",
            lambda y, x, m: ops.softmax_cross_entropy(y, x, mask=m, label_smoothing=0.2),
            lambda y, x, m: ref.softmax_cross_entropy(y, x, mask=m, label_smoothing=0.2),
            (
                np.array([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]),
                logits_f16_big,
                np.array([[True, False, True], [True, True, True]]),
            ),
            wrt=(1,),
            float_args=(0, 1),
        ),
        Case(
            "softmax_ce_f16_big",
            ops.softmax_cross_entropy,
            ref.softmax_cross_entropy,
            (onehot, logits_f16_big),
            wrt=(1,),
            float_args=(0, 1),
        ),
        Case(
            "sparse_ce_neg_inf_and_ignored",
            lambda y, x: ops.sparse_softmax_cross_entropy(y, x, ignore_class=-1),
            lambda y, x: ref.sparse_softmax_cross_entropy(y, x, ignore_class=-1),
            (np.array([0, -1]), logits_neg_inf),
            wrt=(1,),
        ),
        Case(
            "sparse_ce_all_ignored",
            lambda y, x: ops.sparse_softmax_cross_entropy(y, x, ignore_class=-1),
            lambda y, x: ref.sparse_softmax_cross_entropy(y, x, ignore_class=-1),
            (np.array([-1, -1]), logits_f16_big),
            wrt=(1,),
        ),
        Case(
            "sparse_ce_masked_rows",
            lambda y, x, m: ops.sparse_softmax_cross_entropy(y, x, mask=m),
            lambda y, x, m: ref.sparse_softmax_cross_entropy(y, x, mask=m),
            (np.array([2, 1]), logits_f16_big, row_mask),
            wrt=(1,),
        ),
        Case(
            "sigmoid_ce_big_logits",
            ops.sigmoid_cross_entropy,
            ref.sigmoid_cross_entropy,
            (
                np.array([0.0, 1.0, 0.0, 1.0, 0.5, 1.0]),
                np.array([100.0, -100.0, 1e4, -1e4, 0.0, 20.0]),
            ),
            wrt=(1,),
            float_args=(0, 1),
        ),
        Case(
            "task_distance_nan_labels_masked",
            lambda t, p, m: ops.masked_task_distance(t, p, mask=m),
            lambda t, p, m: ref.masked_task_distance(t, p, mask=m),
            (nan_labels, preds, task_mask),
            wrt=(1,),
            float_args=(0, 1),
        ),
        Case(
            "task_distance_axis0_squared",
            lambda t, p: ops.masked_task_distance(t, p, axis=0, squared=True),
            lambda t, p: ref.masked_task_distance(t, p, axis=0, squared=True),
            (nan_labels, preds),
            wrt=(1,),
            float_args=(0, 1),
        ),
        Case(
            "task_distance_perfect_fit",
            lambda t, p: ops.masked_task_distance(t, p, axis=0),
            lambda t, p: ref.masked_task_distance(t, p, axis=0),
            (preds, preds.copy()),
            wrt=(1,),
            float_args=(0, 1),
        ),
        Case(
            "task_distance_float_weights",
            lambda t, p, w: ops.masked_task_distance(t, p, mask=w),
            lambda t, p, w: ref.masked_task_distance(t, p, mask=w),
            (nan_labels, preds, np.array([[0.5, 1.0, 2.0], [1.0, 0.0, 1.0]])),
            wrt=(1,),
            float_args=(0, 1, 2),
        ),
    ]


def smooth_cases():
    """Random points where every op is differentiable (finite differences)."""
    x = rng.normal(size=(3, 5))
    y = rng.normal(size=(3, 5))
    probs = rng.dirichlet(np.ones(5), size=3)
    mask = rng.random((3, 5)) > 0.3
    mask[:, 0] = True
    return [
        Case("safe_sqrt", ops.safe_sqrt, ref.safe_sqrt, (np.abs(x) + 0.5,)),
        Case(
            "safe_norm",
            lambda a: ops.safe_norm(a, axis=1),
            lambda a: ref.safe_norm(a, axis=1),
            (x,),
        ),
        Case("safe_norm_all", ops.safe_norm, ref.safe_norm, (x,)),
        Case("l2_normalize", ops.l2_normalize, ref.l2_normalize, (x,)),
        Case("cosine_similarity", ops.cosine_similarity, ref.cosine_similarity, (x, y), wrt=(0, 1)),
        Case("safe_divide", ops.safe_divide, ref.safe_divide, (x, np.abs(y) + 0.5), wrt=(0, 1)),
        Case(
            "logsumexp_masked",
            lambda a, m: ops.logsumexp(a, axis=-1, mask=m),
            lambda a, m: ref.logsumexp(a, axis=-1, mask=m),
            (x, mask),
        ),
        Case(
            "softmax_axis0",
            lambda a: ops.softmax(a, axis=0),
            lambda a: ref.softmax(a, axis=0),
            (x,),
        ),
        Case(
            "log_softmax_masked",
            lambda a, m: ops.log_softmax(a, mask=m),
            lambda a, m: ref.log_softmax(a, mask=m),
            (x, mask),
        ),
        Case(
            "softmax_ce",
            lambda p, a: ops.softmax_cross_entropy(p, a, label_smoothing=0.1),
            lambda p, a: ref.softmax_cross_entropy(p, a, label_smoothing=0.1),
            (probs, x),
            wrt=(0, 1),
        ),
        Case(
            "sparse_ce",
            lambda a: ops.sparse_softmax_cross_entropy(np.array([0, 4, 2]), a),
            lambda a: ref.sparse_softmax_cross_entropy(np.array([0, 4, 2]), a),
            (x,),
        ),
        Case(
            "sigmoid_ce",
            ops.sigmoid_cross_entropy,
            ref.sigmoid_cross_entropy,
            (rng.random((3, 5)), x),
            wrt=(0, 1),
        ),
        Case(
            "task_distance",
            lambda t, p: ops.masked_task_distance(t, p, axis=0),
            lambda t, p: ref.masked_task_distance(t, p, axis=0),
            (y, x),
            wrt=(0, 1),
        ),
    ]
