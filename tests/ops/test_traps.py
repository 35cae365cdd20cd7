"""Each trap of issue 2: the plain formulation fails, keras_stable.ops does not.

The "plain" side is what users write today (keras.ops built-ins, or the
hand-written formula from the bug reports). Where a built-in happens to be
safe on one backend (torch's norm backward special-cases 0; TF's CPU kernels
hide some NaNs eagerly, see docs/traps/norm-at-zero.md) the test asserts the failure only
where it occurs, and the hand-written formula everywhere.
"""

import keras
import numpy as np
import pytest

from keras_stable import ops
from tests.backend_utils import BACKEND
from tests.backend_utils import MODES
from tests.backend_utils import cast_tensor
from tests.backend_utils import vjp

K = keras.ops


@pytest.mark.parametrize("mode", MODES)
def test_norm_at_zero(mode):
    x = [cast_tensor(np.zeros(4))]
    _, (plain,) = vjp(lambda v: K.sqrt(K.sum(K.square(v))), x, mode=mode)
    assert np.isnan(plain).all()
    if BACKEND != "torch":  # torch.linalg.norm special-cases ||x|| = 0
        _, (builtin,) = vjp(lambda v: K.norm(v), x, mode=mode)
        assert np.isnan(builtin).all()
    value, (ours,) = vjp(ops.safe_norm, x, mode=mode)
    assert value == 0
    np.testing.assert_array_equal(ours, 0)


@pytest.mark.parametrize("mode", MODES)
def test_bug_report_masked_task_norm(mode):
    """mean(square(norm(ystar - y2, axis=0))), 4 of 5 columns zero."""
    d = np.zeros((8, 5), "float32")
    d[:, 2] = np.linspace(-1, 1, 8)

    def loss(norm):
        return lambda v: K.mean(K.square(norm(v)))

    if BACKEND == "jax" or (BACKEND == "tensorflow" and mode == "compiled"):
        _, (plain,) = vjp(loss(lambda v: K.norm(v, axis=0)), [cast_tensor(d)], mode=mode)
        assert np.isnan(plain).sum() == 32
    _, (ours,) = vjp(loss(lambda v: ops.safe_norm(v, axis=0)), [cast_tensor(d)], mode=mode)
    expected = np.zeros_like(d)
    expected[:, 2] = 2 * d[:, 2] / 5
    np.testing.assert_allclose(ours, expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("mode", MODES)
def test_epsilon_fix_is_biased_and_fails_in_float16(mode):
    def eps_norm(v):
        return K.sqrt(K.sum(K.square(v)) + 1e-12)

    value, _ = vjp(eps_norm, [cast_tensor(np.zeros(4))], mode=mode)
    assert value == pytest.approx(1e-6)  # biased: the norm of 0 is 0
    value, _ = vjp(eps_norm, [cast_tensor([1e-6, 0, 0, 0])], mode=mode)
    assert value == pytest.approx(np.sqrt(2) * 1e-6, rel=1e-3)  # +41%
    _, (g16,) = vjp(eps_norm, [cast_tensor(np.zeros(4), "float16")], mode=mode)
    if BACKEND != "torch" or mode == "eager":
        assert np.isnan(g16).all()  # 1e-12 rounds to 0 in float16
    for dtype in ("float32", "float16"):
        value, (g,) = vjp(ops.safe_norm, [cast_tensor([1e-6, 0, 0, 0], dtype)], mode=mode)
        assert value == np.float64(np.asarray(1e-6, dtype))  # exact: ||(a,0,0,0)|| = |a|
        np.testing.assert_allclose(g, [1, 0, 0, 0], rtol=1e-3)
        value, (g,) = vjp(ops.safe_norm, [cast_tensor(np.zeros(4), dtype)], mode=mode)
        assert value == 0 and not g.any()


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
@pytest.mark.parametrize("mode", MODES)
def test_float16_norm_overflow(mode):
    # The plain norm's inf is the trap itself: NumPy warns when it converts it.
    x = [cast_tensor([300, 300, 300, 300], "float16")]
    if BACKEND != "torch":  # torch accumulates the norm in float32
        value, _ = vjp(lambda v: K.norm(v), x, mode=mode)
        assert np.isinf(value)
        value, _ = vjp(lambda v: K.normalize(v), x, mode=mode)
        np.testing.assert_array_equal(value, 0)  # silently wrong
    value, (g,) = vjp(ops.safe_norm, x, mode=mode)
    assert value == 600
    np.testing.assert_allclose(g, 0.5, rtol=1e-3)
    value, _ = vjp(ops.l2_normalize, x, mode=mode)
    np.testing.assert_array_equal(value, 0.5)


@pytest.mark.parametrize("mode", MODES)
def test_fully_neg_inf_row(mode):
    x = [cast_tensor([[-np.inf] * 3, [1.0, 2.0, 3.0]])]
    value, (g,) = vjp(lambda v: K.softmax(v, axis=-1), x, mode=mode)
    assert np.isnan(value[0]).all() or np.isnan(g[0]).all()
    _, (g,) = vjp(lambda v: K.logsumexp(v, axis=-1), x, mode=mode)
    assert np.isnan(g[0]).all()
    value, (g,) = vjp(ops.softmax, x, mode=mode)
    np.testing.assert_array_equal(value[0], 0)
    np.testing.assert_array_equal(g[0], 0)
    value, (g,) = vjp(lambda v: ops.logsumexp(v, axis=-1), x, mode=mode)
    assert value[0] == -np.inf
    np.testing.assert_array_equal(g[0], 0)


def test_cross_entropy_with_neg_inf_logit_on_zero_label():
    labels = np.array([[1.0, 0.0, 0.0]], "float32")
    logits = cast_tensor([[2.0, -np.inf, 0.0]])
    plain = keras.losses.CategoricalCrossentropy(from_logits=True)(labels, logits)
    assert np.isnan(keras.ops.convert_to_numpy(plain))  # eager, every backend
    ours = ops.softmax_cross_entropy(labels, logits)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(ours), [0.126928], rtol=1e-5)


@pytest.mark.parametrize("mode", MODES)
def test_hand_written_softmax_overflow(mode):
    x = [cast_tensor([[100.0, 99.0, 0.0]])]

    def naive(v):
        e = K.exp(v)
        return e / K.sum(e, axis=1, keepdims=True)

    value, _ = vjp(naive, x, mode=mode)
    assert np.isnan(value).any()
    value, (g,) = vjp(ops.softmax, x, mode=mode)
    np.testing.assert_allclose(value, [[0.7310586, 0.2689414, 3.7e-44]], rtol=1e-5, atol=1e-30)
    assert np.isfinite(g).all()


@pytest.mark.parametrize("mode", MODES)
def test_masking_by_multiplication_or_single_where_with_nan_label(mode):
    y_true = np.array([1.0, np.nan, 3.0], "float32")
    mask = np.array([True, False, True])

    def multiply(p):
        return K.sum(K.square(K.convert_to_tensor(y_true) - p) * K.cast(mask, "float32")) / 2

    def single_where(p):
        sq = K.square(K.convert_to_tensor(y_true) - p)
        return K.sum(K.where(mask, sq, K.zeros_like(sq))) / 2

    p = [cast_tensor([0.0, 0.0, 4.0])]
    value, (g,) = vjp(multiply, p, mode=mode)
    assert np.isnan(value) and np.isnan(g).any()
    value, (g,) = vjp(single_where, p, mode=mode)
    assert value == 1.0 and np.isnan(g[1])
    value, (g,) = vjp(
        lambda q: ops.masked_task_distance(y_true, q, mask=mask, squared=True) / 2, p, mode=mode
    )
    assert value == 1.0
    np.testing.assert_array_equal(g, [-1.0, 0.0, 1.0])
