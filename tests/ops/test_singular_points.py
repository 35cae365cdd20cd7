"""Where the derivative does not exist, the gradient is exactly 0 (docs/design.md).

Checked eagerly and compiled, in float32 and float16, with exact equality.
"""

import keras
import numpy as np
import pytest

from keras_stable import ops
from tests.backend_utils import MODES
from tests.backend_utils import vjp

NEG_INF = -np.inf


def _grads(fn, args, wrt=(0,), dtype="float32", mode="eager", cotangent=None):
    tensors = []
    for i, a in enumerate(args):
        a = np.asarray(a)
        t = keras.ops.convert_to_tensor(a.astype("float32") if a.dtype.kind == "f" else a)
        tensors.append(keras.ops.cast(t, dtype) if a.dtype.kind == "f" else t)
    return vjp(fn, tensors, wrt=wrt, mode=mode, cotangent=cotangent)


@pytest.fixture(params=[(m, d) for m in MODES for d in ("float32", "float16")], ids=str)
def setting(request):
    return request.param


def test_safe_sqrt_zero_and_negative(setting):
    mode, dtype = setting
    out, (g,) = _grads(ops.safe_sqrt, [[0.0, -1e-3, -5.0, 4.0]], dtype=dtype, mode=mode)
    np.testing.assert_array_equal(out, [0, 0, 0, 2])
    np.testing.assert_array_equal(g, [0, 0, 0, 0.25])


def test_safe_norm_zero_vector(setting):
    mode, dtype = setting
    out, (g,) = _grads(
        lambda x: ops.safe_norm(x, axis=-1), [np.zeros((2, 4))], dtype=dtype, mode=mode
    )
    np.testing.assert_array_equal(out, [0, 0])
    np.testing.assert_array_equal(g, np.zeros((2, 4)))


def test_bug_report_norm_over_masked_columns(setting):
    """T1c: mean(square(norm(ystar - y2, axis=0))) with 4 of 5 columns zero."""
    mode, dtype = setting
    d = np.zeros((8, 5))
    d[:, 2] = np.linspace(-1, 1, 8)

    def loss(x):
        return keras.ops.mean(keras.ops.square(ops.safe_norm(x, axis=0)))

    _, (g,) = _grads(loss, [d], dtype=dtype, mode=mode)
    expected = np.zeros_like(d)
    expected[:, 2] = 2 * d[:, 2] / 5  # d/dx of ||x||^2 / 5
    np.testing.assert_allclose(g, expected, rtol=1e-3, atol=1e-3)
    np.testing.assert_array_equal(g[:, [0, 1, 3, 4]], 0)


def test_l2_normalize_and_cosine_at_zero(setting):
    mode, dtype = setting
    out, (g,) = _grads(ops.l2_normalize, [np.zeros((1, 3))], dtype=dtype, mode=mode)
    np.testing.assert_array_equal(out, np.zeros((1, 3)))
    np.testing.assert_array_equal(g, np.zeros((1, 3)))
    out, (g1, g2) = _grads(
        ops.cosine_similarity,
        [np.zeros((1, 3)), [[1.0, 2.0, 3.0]]],
        wrt=(0, 1),
        dtype=dtype,
        mode=mode,
    )
    np.testing.assert_array_equal(out, [0])
    np.testing.assert_array_equal(g1, np.zeros((1, 3)))
    np.testing.assert_array_equal(g2, np.zeros((1, 3)))


def test_safe_divide_by_zero(setting):
    mode, dtype = setting
    out, (gx, gy) = _grads(
        ops.safe_divide, [[1.0, 0.0, 2.0], [0.0, 0.0, 4.0]], wrt=(0, 1), dtype=dtype, mode=mode
    )
    np.testing.assert_array_equal(out, [0, 0, 0.5])
    np.testing.assert_array_equal(gx, [0, 0, 0.25])
    np.testing.assert_array_equal(gy, [0, 0, -0.125])


@pytest.mark.parametrize(
    "op", [ops.logsumexp, ops.softmax, ops.log_softmax], ids=lambda f: f.__name__
)
def test_softmax_family_rows_with_nothing_left(op, setting):
    mode, dtype = setting
    x = np.array([[NEG_INF, NEG_INF, NEG_INF], [1.0, 2.0, 3.0], [np.nan, 5.0, 1.0]])
    mask = np.array([[True, True, True], [False, False, False], [False, False, False]])
    out, (g,) = _grads(lambda a, m: op(a, axis=-1, mask=m), [x, mask], dtype=dtype, mode=mode)
    np.testing.assert_array_equal(g, np.zeros_like(x))
    if op is ops.softmax:
        np.testing.assert_array_equal(out, np.zeros_like(x))
    else:
        assert np.all(out == -np.inf)


def test_masked_entries_get_zero_gradient_even_when_nan(setting):
    mode, dtype = setting
    x = np.array([[1.0, np.nan, 2.0, 1e4]])
    mask = np.array([[True, False, True, False]])
    for op in (ops.logsumexp, ops.softmax, ops.log_softmax):
        out, (g,) = _grads(lambda a, m: op(a, axis=-1, mask=m), [x, mask], dtype=dtype, mode=mode)
        assert np.all(np.isfinite(g))
        np.testing.assert_array_equal(g[0, [1, 3]], 0)


def test_cross_entropy_neg_inf_class_and_ignored_rows(setting):
    mode, dtype = setting
    logits = np.array([[2.0, NEG_INF, 0.0], [1.0, 2.0, 3.0]])
    labels = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    out, (g,) = _grads(
        ops.softmax_cross_entropy, [labels, logits], wrt=(1,), dtype=dtype, mode=mode
    )
    assert np.all(np.isfinite(out))
    assert g[0, 1] == 0
    out, (g,) = _grads(
        lambda y, x: ops.sparse_softmax_cross_entropy(y, x, ignore_class=-1),
        [np.array([-1, -1]), logits],
        wrt=(1,),
        dtype=dtype,
        mode=mode,
    )
    np.testing.assert_array_equal(out, [0, 0])
    np.testing.assert_array_equal(g, np.zeros_like(logits))


def test_task_distance_masked_nan_labels(setting):
    """Masked and missing (NaN) labels: gradient exactly 0, never NaN."""
    mode, dtype = setting
    y_true = np.array([[1.0, np.nan, 3.0], [np.nan, np.nan, np.nan]])
    y_pred = np.array([[1.0, 7.0, 1.0], [1.0, 2.0, 3.0]])
    mask = np.array([True, True, False])
    out, (g,) = _grads(
        lambda t, p, m: ops.masked_task_distance(t, p, mask=m),
        [y_true, y_pred, mask],
        wrt=(1,),
        dtype=dtype,
        mode=mode,
    )
    np.testing.assert_array_equal(out, [0, 0])  # perfect fit on the only valid entry
    np.testing.assert_array_equal(g, np.zeros_like(y_pred))


def test_sparse_label_out_of_range_is_not_silently_finite():
    logits = keras.ops.convert_to_tensor(np.array([[1.0, 2.0, 3.0]] * 3, "float32"))
    out = keras.ops.convert_to_numpy(ops.sparse_softmax_cross_entropy(np.array([3, -1, 1]), logits))
    assert np.isnan(out[0]) and np.isnan(out[1]) and np.isfinite(out[2])


def test_sigmoid_cross_entropy_gradient_at_logit_zero(setting):
    """relu and |x| share one select: the gradient at 0 is sigmoid(0) - y."""
    mode, dtype = setting
    out, (g,) = _grads(
        ops.sigmoid_cross_entropy,
        [[0.5, 1.0, 0.0], [0.0, 0.0, 0.0]],
        wrt=(1,),
        dtype=dtype,
        mode=mode,
    )
    np.testing.assert_allclose(out, [np.log(2)] * 3, rtol=1e-3)
    np.testing.assert_array_equal(g, [0.0, -0.5, 0.5])


@pytest.mark.parametrize(
    "op",
    [
        lambda x: ops.logsumexp(x, axis=-1),
        ops.softmax,
        ops.log_softmax,
        lambda x: ops.softmax_cross_entropy(np.eye(3)[:2].astype("float32"), x),
        lambda x: ops.sparse_softmax_cross_entropy(np.array([0, 1]), x),
    ],
    ids=["logsumexp", "softmax", "log_softmax", "softmax_ce", "sparse_ce"],
)
def test_nan_in_a_valid_entry_propagates(op):
    """NaN is loud: a NaN logit in a valid entry never reads as an empty row."""
    x = keras.ops.convert_to_tensor(np.array([[1.0, np.nan, 2.0], [1.0, 2.0, 3.0]], "float32"))
    out = keras.ops.convert_to_numpy(op(x)).astype("float64")
    assert np.all(np.isnan(out[0])), out
    assert np.all(np.isfinite(out[1])), out


def test_norm_with_infinite_or_nan_entry(setting):
    """inf gives inf with a zero gradient, NaN gives NaN, on both the scaled
    (float32) and the unscaled (float16) path."""
    mode, dtype = setting
    x = np.array([[-np.inf, 0.0, 1.0, 2.0], [np.nan, 1.0, 2.0, 3.0], [0.0, 3.0, 4.0, 0.0]])
    out, (g,) = _grads(lambda v: ops.safe_norm(v, axis=-1), [x], dtype=dtype, mode=mode)
    assert out[0] == np.inf and np.isnan(out[1]) and out[2] == 5
    np.testing.assert_array_equal(g[0], 0)
    np.testing.assert_allclose(g[2], [0, 0.6, 0.8, 0], rtol=1e-3)
