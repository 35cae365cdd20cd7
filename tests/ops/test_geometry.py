"""pairwise_distance and safe_std: float64 references, exact zeros, traps."""

import keras
import numpy as np
import pytest

from keras_stable import ops
from tests import reference as ref
from tests.backend_utils import BACKEND
from tests.backend_utils import DTYPES
from tests.backend_utils import MODES
from tests.backend_utils import assert_close
from tests.backend_utils import assert_finite
from tests.backend_utils import cast_tensor
from tests.backend_utils import round_to
from tests.backend_utils import to_numpy
from tests.backend_utils import value
from tests.backend_utils import vjp
from tests.backend_utils import vjp_all_modes

K = keras.ops


def _rows(seed=0, n=7, d=5, duplicates=True):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype("float32")
    if duplicates:
        x[3] = x[1]  # coincident rows off the diagonal
    return x


def _distance_grad(x, y, cotangent):
    """float64 gradient of sum(c * ||x_i - y_j||) (0 at coincident rows)."""
    x, y = np.asarray(x, "float64"), np.asarray(y, "float64")
    diff = x[:, None, :] - y[None, :, :]
    dist = np.sqrt(np.sum(diff**2, axis=-1))
    unit = np.where(dist[..., None] > 0, diff / np.where(dist > 0, dist, 1.0)[..., None], 0.0)
    weighted = np.asarray(cotangent, "float64")[..., None] * unit
    return weighted.sum(axis=1), -weighted.sum(axis=0)


# --- the traps ------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_cdist_of_x_with_itself_has_nan_gradients_and_ours_is_exact(mode):
    """keras.ops.cdist(x, x): sqrt at 0 on the diagonal, NaN gradient."""
    x = _rows(duplicates=False)
    _, (plain,) = vjp(lambda v: K.cdist(v, v), [x], mode=mode)
    assert np.isnan(plain).any()
    value, (ours,) = vjp(ops.pairwise_distance, [x], mode=mode)
    np.testing.assert_array_equal(np.diag(value), 0.0)
    assert_close(value, ref.pairwise_distance(x))
    gx, gy = _distance_grad(x, x, np.ones((7, 7)))
    assert_close(ours, gx + gy, tol=(1e-5, 1e-5))


@pytest.mark.parametrize("mode", MODES)
def test_std_of_a_constant_slice_has_nan_gradient_and_ours_is_zero(mode):
    x = np.array([[2.0, 2.0, 2.0], [1.0, 2.0, 4.0]], "float32")
    _, (plain,) = vjp(lambda v: K.std(v, axis=1), [x], mode=mode)
    if BACKEND != "torch":  # torch's std backward special-cases 0
        assert np.isnan(plain[0]).all()
    value, (ours,) = vjp(lambda v: ops.safe_std(v, axis=1), [x], mode=mode)
    assert value[0] == 0.0
    np.testing.assert_array_equal(ours[0], 0.0)
    row = x[1].astype("float64")
    assert_close(ours[1], (row - row.mean()) / (3 * row.std()))
    assert_close(value, np.std(x.astype("float64"), axis=1))


# --- pairwise_distance ---------------------------------------------------------------


@pytest.mark.parametrize("squared", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_pairwise_distance_matches_float64(dtype, squared):
    x = _rows()
    y = np.random.default_rng(1).normal(size=(4, 5)).astype("float32")
    out, _ = vjp_all_modes(
        lambda a: ops.pairwise_distance(a, squared=squared), [cast_tensor(x, dtype)], dtype=dtype
    )
    assert_close(out, ref.pairwise_distance(round_to(x, dtype), squared=squared), dtype)
    out, _ = vjp_all_modes(
        lambda a, b: ops.pairwise_distance(a, b, squared=squared),
        [cast_tensor(x, dtype), cast_tensor(y, dtype)],
        wrt=(0, 1),
        dtype=dtype,
    )
    expected = ref.pairwise_distance(round_to(x, dtype), round_to(y, dtype), squared=squared)
    assert_close(out, expected, dtype)
    result = ops.pairwise_distance(cast_tensor(x, dtype), cast_tensor(y, dtype), squared=squared)
    assert keras.backend.standardize_dtype(result.dtype) == dtype


@pytest.mark.parametrize("dtype", DTYPES)
def test_coincident_rows_are_exactly_zero_with_a_zero_gradient(dtype):
    x = _rows()
    x[5] = x[1]
    coincident = np.zeros((7, 7), "float32")
    for i, j in [(1, 3), (3, 1), (1, 5), (5, 3), (2, 2), (4, 4)]:
        coincident[i, j] = 1.0  # cotangent only on coincident pairs
    for squared in (False, True):
        out, (grad,) = vjp_all_modes(
            lambda a, s=squared: ops.pairwise_distance(a, squared=s),
            [cast_tensor(x, dtype)],
            cotangent=coincident,
            dtype=dtype,
        )
        assert np.all(out[coincident > 0] == 0.0)
        np.testing.assert_array_equal(np.diag(out), 0.0)
        np.testing.assert_array_equal(grad, 0.0)
    # Two sets with a common row, and all-zero rows.
    y = np.concatenate([x[1:2], np.zeros((1, 5), "float32")])
    out, grads = vjp_all_modes(
        ops.pairwise_distance,
        [cast_tensor(x, dtype), cast_tensor(y, dtype)],
        wrt=(0, 1),
        cotangent=np.array([[0, 0]] + [[1, 0]] + [[0, 0]] * 5, "float32"),
        dtype=dtype,
    )
    assert out[1, 0] == 0.0 and out[3, 0] == 0.0
    for g in grads:
        np.testing.assert_array_equal(g, 0.0)
    out, grads = vjp_all_modes(ops.pairwise_distance, [np.zeros((3, 2), "float32")])
    np.testing.assert_array_equal(out, 0.0)
    np.testing.assert_array_equal(grads[0], 0.0)


def test_gradient_matches_float64():
    x = _rows()
    y = np.random.default_rng(2).normal(size=(4, 5)).astype("float32")
    y[0] = x[2]
    cot = np.random.default_rng(3).normal(size=(7, 4)).astype("float32")
    _, (gx, gy) = vjp_all_modes(ops.pairwise_distance, [x, y], wrt=(0, 1), cotangent=cot)
    ex, ey = _distance_grad(x, y, cot)
    assert_close(gx, ex, tol=(1e-4, 1e-5))
    assert_close(gy, ey, tol=(1e-4, 1e-5))
    # Squared: 2 (x_i - y_j) c_ij, also at the coincident pair.
    _, (gx, gy) = vjp_all_modes(
        lambda a, b: ops.pairwise_distance(a, b, squared=True), [x, y], wrt=(0, 1), cotangent=cot
    )
    diff = x[:, None, :].astype("float64") - y[None, :, :]
    assert_close(gx, 2 * np.sum(cot[..., None] * diff, axis=1), tol=(1e-4, 1e-5))
    assert_close(gy, -2 * np.sum(cot[..., None] * diff, axis=0), tol=(1e-4, 1e-5))


@pytest.mark.parametrize("mode", MODES)
def test_common_offset_and_extreme_magnitudes_stay_exact(mode):
    """The expansion |x|^2 + |y|^2 - 2 x.y alone loses every digit to a
    common offset and overflows above 1e19; the values here are exact."""
    x = _rows(duplicates=False)
    for shifted in (x + 1e4, x * 1e30, x * 1e-30, x * 1e30 + 3e31):
        shifted = shifted.astype("float32")
        value, (grad,) = vjp(ops.pairwise_distance, [shifted], mode=mode)
        expected = ref.pairwise_distance(shifted)
        np.testing.assert_allclose(value, expected, rtol=2e-6, atol=0)
        assert_finite(grad)
    # The expansion itself, for contrast, on the offset rows:
    offset = (x + 1e4).astype("float32")
    sq = np.sum(offset.astype("float32") ** 2, axis=1, keepdims=True)
    naive = np.sqrt(np.maximum(sq + sq.T - 2 * offset @ offset.T, 0))
    assert np.max(np.abs(naive - ref.pairwise_distance(offset))) > 1.0


def test_many_features_and_symbolic_batch():
    x = np.random.default_rng(4).normal(size=(3, 1001)).astype("float32")
    out, (grad,) = vjp_all_modes(ops.pairwise_distance, [x])
    assert_close(out, ref.pairwise_distance(x), tol=(1e-5, 1e-5))
    assert_finite(grad)
    inputs = keras.Input((5,))
    assert ops.pairwise_distance(inputs).shape == (None, None)


def test_nan_stays_in_its_row():
    x = _rows(duplicates=False)
    x[2, 1] = np.nan
    out = to_numpy(ops.pairwise_distance(x))
    assert np.isnan(out[2]).all() and np.isnan(out[:, 2]).all()
    keep = np.arange(7) != 2
    assert_close(out[keep][:, keep], ref.pairwise_distance(x[keep]))


def test_bad_input_raises():
    with pytest.raises(ValueError, match=r"`x` must be a 2-D tensor.*\(5,\)"):
        ops.pairwise_distance(np.zeros(5, "float32"))
    with pytest.raises(ValueError, match=r"same number of features.*\(2, 3\).*\(2, 4\)"):
        ops.pairwise_distance(np.zeros((2, 3), "float32"), np.zeros((2, 4), "float32"))
    with pytest.raises(ValueError, match="`squared` must be a bool"):
        ops.pairwise_distance(np.zeros((2, 3), "float32"), squared="yes")


# --- safe_std --------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis,keepdims", [(None, False), (1, False), ((0, 2), True), (-1, True)])
def test_safe_std_matches_float64_and_keras(dtype, axis, keepdims):
    x = np.random.default_rng(5).normal(size=(3, 4, 5)).astype("float32") * 3 + 1
    x[1, :, :] = 0.5  # constant slices for axis 1 and -1
    fn = lambda v: ops.safe_std(v, axis=axis, keepdims=keepdims)  # noqa: E731
    out, (grad,) = vjp_all_modes(fn, [cast_tensor(x, dtype)], dtype=dtype)
    assert_close(out, ref.safe_std(round_to(x, dtype), axis=axis, keepdims=keepdims), dtype)
    assert_finite(grad)
    assert keras.backend.standardize_dtype(fn(cast_tensor(x, dtype)).dtype) == dtype
    if dtype == "float32":
        keras_value = to_numpy(K.std(cast_tensor(x), axis=axis, keepdims=keepdims))
        assert_close(out, keras_value)


def test_safe_std_gradient_and_extremes():
    x = np.array([[1.0, 2.0, 4.0, 8.0], [3.0, 3.0, 3.0, 3.0]], "float32")
    out, (grad,) = vjp_all_modes(lambda v: ops.safe_std(v, axis=-1), [x])
    row = x[0].astype("float64")
    assert_close(grad[0], (row - row.mean()) / (4 * row.std()))
    np.testing.assert_array_equal(grad[1], 0.0)
    big = np.array([3e38, -3e38, 1e38], "float32")
    out, (grad,) = vjp_all_modes(ops.safe_std, [big])
    assert_close(out, np.std(big.astype("float64")), tol=(1e-6, 0))
    assert_finite(grad)
    assert to_numpy(ops.safe_std(np.float32(2.0))) == 0.0
    with pytest.raises(ValueError, match="axis"):
        ops.safe_std(np.zeros((2, 3), "float32"), axis=2)


# --- issue 25: mixed scales, near-coincident rows, non-dyadic constants ----------


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_rows_of_1e20_leave_the_ordinary_distances_exact(dtype):
    """A single global scale (the largest row) pushed the ordinary rows'
    squared differences into underflow: 0.0 instead of 2.72."""
    x = _rows(duplicates=False)
    x[0] *= 1e20
    x[6] = x[6] * 3e19 + 1e20
    y = np.concatenate([x[1:3], x[:1] * 0.5])
    x, y = to_numpy(cast_tensor(x, dtype)), to_numpy(cast_tensor(y, dtype))
    for args, wrt in (([x], (0,)), ([x, y], (0, 1))):
        for squared in (False, True):
            out, grads = vjp_all_modes(
                lambda *a, s=squared: ops.pairwise_distance(*a, squared=s),
                [cast_tensor(a, dtype) for a in args],
                wrt=wrt,
                dtype=dtype,
            )
            expected = ref.pairwise_distance(*args, squared=squared)
            with np.errstate(over="ignore"):
                expected = to_numpy(
                    cast_tensor(expected.astype("float32"), dtype)
                )  # inf past the max
            assert_close(out, expected, dtype)
            assert out[1, 2] > 0 and out[2, 1 if len(args) == 1 else 0] > 0
            if not squared:
                cot = np.ones(out.shape)
                want = ref.pairwise_distance_grad(
                    *args[:1], args[1] if len(args) > 1 else None, cot
                )
                for got, exp in zip(grads, want if len(args) > 1 else [want]):
                    assert_close(got, exp, dtype, tol=(2e-5, 1e-6) if dtype == "float32" else None)


def test_near_coincident_rows_have_float32_exact_gradients():
    """The gradient of the expansion |a|^2 + |b|^2 - 2 a.b cancels for
    near-coincident rows: `eps * |a| / ||a - b||`, 3e-5 relative here."""
    rng = np.random.default_rng(7)
    a = (rng.normal(size=(4, 8)) * 3).astype("float32")
    b = (a + 1e-3 * rng.normal(size=(4, 8))).astype("float32")
    cot = rng.normal(size=(4, 4)).astype("float32")
    for squared in (False, True):
        _, (ga, gb) = vjp_all_modes(
            lambda x, y, s=squared: ops.pairwise_distance(x, y, squared=s),
            [a, b],
            wrt=(0, 1),
            cotangent=cot,
        )
        ea, eb = ref.pairwise_distance_grad(a, b, cot, squared=squared)
        for got, exp in ((ga, ea), (gb, eb)):
            assert np.max(np.abs(got - exp)) <= 2e-6 * np.max(np.abs(exp))
    _, (gx,) = vjp_all_modes(ops.pairwise_distance, [np.concatenate([a, b])], cotangent=None)
    ex = ref.pairwise_distance_grad(np.concatenate([a, b]), None, np.ones((8, 8)))
    assert np.max(np.abs(gx - ex)) <= 2e-6 * np.max(np.abs(ex))


@pytest.mark.parametrize("dtype", DTYPES)
def test_std_of_a_non_dyadic_constant_is_exactly_zero_with_a_zero_gradient(dtype):
    """Every entry -123.456: the computed mean is a rounding off the value,
    which gave 7.6e-6 (and a gradient that is not 0)."""
    x = np.full((3, 7, 5), -123.456, "float32")
    x[1] = 1e-3 * np.arange(35).reshape(7, 5) + 0.1  # not constant
    for axis in (-1, (1, 2), None):
        fn = lambda v, a=axis: ops.safe_std(v, axis=a)  # noqa: E731
        out, (grad,) = vjp_all_modes(fn, [cast_tensor(x, dtype)], dtype=dtype)
        constant = np.zeros_like(x, bool)
        constant[[0, 2]] = True
        if axis is None:
            assert_close(out, ref.safe_std(to_numpy(cast_tensor(x, dtype))), dtype)
            continue
        out = np.asarray(out)
        np.testing.assert_array_equal(out[[0, 2]], 0.0)
        np.testing.assert_array_equal(grad[constant], 0.0)
        assert_close(out, ref.safe_std(to_numpy(cast_tensor(x, dtype)), axis=axis), dtype)
    single = np.full(6, -123.456, "float32")
    out, (grad,) = vjp_all_modes(ops.safe_std, [cast_tensor(single, dtype)], dtype=dtype)
    assert out == 0.0
    np.testing.assert_array_equal(grad, 0.0)


@pytest.mark.parametrize("mode", MODES)
def test_distances_of_compile_time_constants(mode):
    """Rows closed over by a compiled function are constants to XLA, whose
    simplifier may rewrite the rescue's `(c d)**2` as `d**2 c**2` (inf * 0)."""
    x = _rows(duplicates=True)
    x[0] *= 1e30
    x[2] = 0.0
    x[5] = x[0]
    x[6] *= 1e-30
    for squared in (False, True):
        out = value(lambda s=squared: ops.pairwise_distance(x, squared=s), [], mode=mode)
        with np.errstate(over="ignore"):
            expected = ref.pairwise_distance(x, squared=squared).astype("float32")
        assert_close(out, expected)
