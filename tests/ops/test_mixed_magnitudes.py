"""A seeded random grid for the geometry ops: magnitudes from 1e-30 to 1e30
mixed inside one input (float32 and bfloat16; 1e-3 to 1e3 in float16),
next to the structures that stress an exact formulation (coincident and
near-coincident rows, rows that differ only in a tiny entry, zero rows,
constant rows, rows of huge next to rows of ordinary magnitude), against
float64 references (`tests/reference.py`): values and gradients, eagerly and
compiled. A fast path that loses exactness anywhere on the grid fails
here."""

import keras
import numpy as np
import pytest

from keras_stable import ops
from tests import reference as ref
from tests.backend_utils import MODES
from tests.backend_utils import to_numpy
from tests.backend_utils import vjp

K = keras.ops
SEEDS = (0, 1)
ROWS, FEATURES = 14, 20  # 20 features: two blocks of the distance kernel
# Exponent ranges of the magnitudes: float16 holds 6e-5..65504.
EXPONENTS = {"float32": (-30, 30), "bfloat16": (-30, 30), "float16": (-3, 3)}
# Values: relative error per entry (and the smallest normal number, below
# which the result is subnormal or 0); gradients: relative to the scale of
# the slice's gradient (see each op).
VALUE_RTOL = {"float32": 1e-5, "bfloat16": 1e-2, "float16": 2e-3}
GRAD_RTOL = {"float32": 1e-5, "bfloat16": 2e-2, "float16": 4e-3}
TINY = {"float32": 2.0**-126, "bfloat16": 2.0**-126, "float16": 2.0**-14}


def _magnitudes(rng, shape, dtype):
    lo, hi = EXPONENTS[dtype]
    signs = rng.choice([-1.0, 1.0], size=shape)
    return signs * 10.0 ** rng.uniform(lo, hi, size=shape)


def _rows(seed, dtype, rows=ROWS, features=FEATURES):
    """`rows` rows of the grid, as the float64 values a `dtype` tensor holds."""
    rng = np.random.default_rng(seed)
    lo, hi = EXPONENTS[dtype]
    x = _magnitudes(rng, (rows, features), dtype)  # mixed inside each row
    x[rng.random(x.shape) < 0.1] = 0.0
    ordinary = rng.normal(size=features) * 3
    x[0] = ordinary
    x[1] = rng.normal(size=features) * 10.0**hi  # huge next to ordinary rows
    x[2] = rng.normal(size=features) * 2.0 - 1.0
    x[3] = rng.normal(size=features) * 10.0**lo  # tiny
    x[4] = x[0]  # coincident
    x[5] = x[0] * (1 + 1e-5 * rng.normal(size=features))  # near-coincident
    x[6] = x[7]  # a mixed row and ...
    small = np.argmin(np.abs(np.where(x[7] == 0, np.inf, x[7])))
    x[6, small] *= 3.0  # ... its copy that differs only in the tiniest entry
    x[8] = 0.0
    x[9] = -123.456  # a constant of a non-dyadic value
    x[10] = x[1] * (1 + 1e-3 * rng.normal(size=features))  # huge, near x[1]
    return _held(x, dtype)


def _held(x, dtype):
    return to_numpy(K.cast(K.convert_to_tensor(np.asarray(x, "float32")), dtype))


def _tensor(x, dtype):
    return K.cast(K.convert_to_tensor(np.asarray(x, "float32")), dtype)


def _expected(value, dtype):
    """The float64 reference as a `dtype` result holds it (inf past the
    maximum)."""
    with np.errstate(over="ignore"):
        return _held(np.asarray(value, "float64").astype("float32"), dtype)


def _check_value(actual, expected, dtype, what, atol=None):
    expected = _expected(expected, dtype)
    np.testing.assert_allclose(
        actual,
        expected,
        rtol=VALUE_RTOL[dtype],
        atol=TINY[dtype] if atol is None else atol,
        err_msg=what,
    )


def _check_grad(actual, expected, scale, dtype, what):
    """`|actual - expected| <= rtol * scale + tiny`, `scale` per slice: the
    size of the terms the gradient sums (a gradient near 0 by cancellation
    is held to the error of its terms, not to its own size)."""
    actual, expected = np.asarray(actual, "float64"), np.asarray(expected, "float64")
    assert np.all(np.isfinite(actual)), f"{what}: non-finite gradient"
    bound = GRAD_RTOL[dtype] * np.asarray(scale, "float64") + TINY[dtype]
    err = np.abs(actual - expected)
    bad = err > bound
    assert not bad.any(), (
        f"{what}: {bad.sum()} entries off, worst {np.max(err / bound):.3g}x the bound; "
        f"actual {actual[bad][:3]}, expected {expected[bad][:3]}"
    )


def _cotangent(seed, shape):
    return np.random.default_rng(seed + 100).normal(size=shape).astype("float32")


def _modes(fn, args, wrt, cotangent):
    for mode in MODES:
        yield mode, vjp(fn, args, wrt=wrt, cotangent=cotangent, mode=mode)


DTYPES = ("float32", "bfloat16", "float16")


@pytest.mark.parametrize("squared", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_pairwise_distance_of_x(dtype, squared):
    for seed in SEEDS:
        x = _rows(seed, dtype)
        c = _cotangent(seed, (ROWS, ROWS))
        expected = ref.pairwise_distance(x, squared=squared)
        grad = ref.pairwise_distance_grad(x, None, c, squared=squared)
        diff = np.abs(x[:, None, :] - x[None, :, :]).max(-1)
        for mode, (value, (gx,)) in _modes(
            lambda a, s=squared: ops.pairwise_distance(a, squared=s),
            [_tensor(x, dtype)],
            (0,),
            c,
        ):
            what = f"seed {seed}, {mode}"
            _check_value(value, expected, dtype, what)
            np.testing.assert_array_equal(np.diag(value), 0.0)
            np.testing.assert_array_equal(value[0, 4], 0.0)
            # Each term of row i's gradient is at most |c_ij| (2|c_ij| |d|
            # squared), from both sides.
            w = np.abs(c) + np.abs(c.T)
            if squared:
                w = 2 * w * diff
            _check_grad(gx, grad, w.sum(1, keepdims=True), dtype, what)


@pytest.mark.parametrize("squared", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_pairwise_distance_of_x_and_y(dtype, squared):
    for seed in SEEDS:
        x = _rows(seed, dtype)
        y = np.concatenate([x[[0, 1, 6, 8]], _rows(seed + 10, dtype)[:7]])
        c = _cotangent(seed, (ROWS, len(y)))
        expected = ref.pairwise_distance(x, y, squared=squared)
        ex, ey = ref.pairwise_distance_grad(x, y, c, squared=squared)
        w = np.abs(c)
        if squared:
            w = 2 * w * np.abs(x[:, None, :] - y[None, :, :]).max(-1)
        for mode, (value, (gx, gy)) in _modes(
            lambda a, b, s=squared: ops.pairwise_distance(a, b, squared=s),
            [_tensor(x, dtype), _tensor(y, dtype)],
            (0, 1),
            c,
        ):
            what = f"seed {seed}, {mode}"
            _check_value(value, expected, dtype, what)
            assert value[0, 0] == value[4, 0] == value[1, 1] == value[6, 2] == value[8, 3] == 0.0
            # x[7] differs from x[6] only in its tiniest entry (its square
            # underflows).
            assert squared or value[7, 2] > 0
            _check_grad(gx, ex, w.sum(1, keepdims=True), dtype, what + ", x")
            _check_grad(gy, ey, w.sum(0)[:, None], dtype, what + ", y")


@pytest.mark.parametrize("dtype", DTYPES)
def test_safe_norm(dtype):
    for seed in SEEDS:
        x = _rows(seed, dtype)
        c = _cotangent(seed, (ROWS,))
        for mode, (value, (gx,)) in _modes(
            lambda a: ops.safe_norm(a, axis=-1), [_tensor(x, dtype)], (0,), c
        ):
            what = f"seed {seed}, {mode}"
            _check_value(value, ref.safe_norm(x, axis=-1), dtype, what)
            scale = np.abs(c)[:, None]  # |g * x / ||x||| <= |g|
            _check_grad(gx, ref.safe_norm_grad(x, c), scale, dtype, what)


@pytest.mark.parametrize("dtype", DTYPES)
def test_l2_normalize(dtype):
    for seed in SEEDS:
        x = _rows(seed, dtype)
        c = _cotangent(seed, x.shape)
        norm = ref.safe_norm(x, axis=-1, keepdims=True)
        for mode, (value, (gx,)) in _modes(ops.l2_normalize, [_tensor(x, dtype)], (0,), c):
            what = f"seed {seed}, {mode}"
            _check_value(value, ref.l2_normalize(x), dtype, what, atol=VALUE_RTOL[dtype] * 1e-2)
            scale = np.where(
                norm > 0, np.abs(c).max(-1, keepdims=True) / np.where(norm > 0, norm, 1), 0
            )
            _check_grad(gx, ref.l2_normalize_grad(x, c), scale, dtype, what)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cosine_similarity(dtype):
    for seed in SEEDS:
        x1 = _rows(seed, dtype)
        x2 = np.concatenate([x1[:4], _rows(seed + 20, dtype)[4:]])  # equal rows too
        x2[5] = x1[5]
        c = _cotangent(seed, (ROWS,))
        e1, e2 = ref.cosine_similarity_grad(x1, x2, c)
        for mode, (value, (g1, g2)) in _modes(
            ops.cosine_similarity, [_tensor(x1, dtype), _tensor(x2, dtype)], (0, 1), c
        ):
            what = f"seed {seed}, {mode}"
            expected = ref.cosine_similarity(x1, x2)
            _check_value(value, expected, dtype, what, atol=VALUE_RTOL[dtype] * 0.1)
            for g, e, x in ((g1, e1, x1), (g2, e2, x2)):
                n = ref.safe_norm(x, axis=-1, keepdims=True)
                scale = np.where(n > 0, 2 * np.abs(c)[:, None] / np.where(n > 0, n, 1), 0)
                _check_grad(g, e, scale, dtype, what)


@pytest.mark.parametrize("dtype", DTYPES)
def test_safe_std(dtype):
    for seed in SEEDS:
        x = _rows(seed, dtype)
        c = _cotangent(seed, (ROWS,))
        for mode, (value, (gx,)) in _modes(
            lambda a: ops.safe_std(a, axis=-1), [_tensor(x, dtype)], (0,), c
        ):
            what = f"seed {seed}, {mode}"
            _check_value(value, ref.safe_std(x, axis=-1), dtype, what)
            assert value[8] == value[9] == 0.0  # constant rows: exactly 0
            expected = ref.safe_std_grad(x, c)
            _check_grad(gx, expected, np.abs(expected).max(-1, keepdims=True), dtype, what)
