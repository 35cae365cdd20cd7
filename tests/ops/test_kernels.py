"""The fused kernels (`keras_stable/ops/_kernels/`) against the portable
`keras.ops` formulation they replace, which stays the reference.

The public ops run the kernels unless `KERAS_STABLE_PORTABLE` is set; each
test computes both, values and gradients, on the edge grid of
`tests/ops/cases.py` and on the grids below (zero vectors, `inf`, NaN,
huge and tiny entries, `-inf` entries, masks, fully masked rows), in
float32, float16 and bfloat16, eagerly and compiled. Where the two differ
on purpose (the kernel is exact where the portable form was not) the test
says so and checks the kernel against the float64 reference instead.

Second order: the backward passes are written with `keras.ops`, so they
are differentiated again (a WGAN-GP gradient penalty through `safe_norm`,
and Hessian-vector products of every kernel), on TensorFlow, JAX and
PyTorch.
"""

import keras
import numpy as np
import pytest

from keras_stable import ops
from tests.backend_utils import ALL_MODES
from tests.backend_utils import BACKEND
from tests.backend_utils import DTYPES
from tests.backend_utils import MODES
from tests.backend_utils import TOLERANCES
from tests.backend_utils import assert_close
from tests.backend_utils import assert_finite
from tests.backend_utils import float_tensor
from tests.backend_utils import portable
from tests.backend_utils import round_to
from tests.backend_utils import to_numpy
from tests.backend_utils import vjp
from tests.backend_utils import vjp_all_modes
from tests.ops.cases import edge_cases

INF = np.inf
NAN = np.nan
RNG = np.random.default_rng(7)


def _both(fn, args, wrt, cotangent, mode):
    """`(fused, portable)`, each `(value, grads)`."""
    fused = vjp(fn, args, wrt=wrt, cotangent=cotangent, mode=mode)
    with portable():
        reference = vjp(fn, args, wrt=wrt, cotangent=cotangent, mode=mode)
    return fused, reference


def _cotangent(fn, args, dtype):
    """A fixed random cotangent of the output's shape (ones would make the
    softmax gradient vanish identically)."""
    out = keras.ops.convert_to_numpy(keras.ops.cast(fn(*args), "float32"))
    return RNG.normal(size=np.shape(out)).astype("float32")


def _assert_same(fused, reference, dtype, what, skip_rows=None):
    """Values and gradients agree, NaN and inf patterns exactly. Rows in
    `skip_rows` (leading index of the value and of each gradient) are
    left out: the caller checks them another way."""
    (out, grads), (ref_out, ref_grads) = fused, reference
    rtol, atol = TOLERANCES[dtype]
    # The kernel and the portable form round differently: a few ulps of
    # the dtype, and gradients go through one more rounding.
    tol = (4 * rtol, 4 * atol)
    keep = Ellipsis
    if skip_rows and np.ndim(out):
        keep = np.setdiff1d(np.arange(np.shape(out)[0]), skip_rows)
    assert_close(np.asarray(out)[keep], np.asarray(ref_out)[keep], dtype, f"{what} value", tol)
    for i, (g, r) in enumerate(zip(grads, ref_grads)):
        assert_close(np.asarray(g)[keep], np.asarray(r)[keep], dtype, f"{what} gradient {i}", tol)


# --------------------------------------------------------------------------
# The grids.

NORM_ROWS = np.array(
    [
        [3.0, 4.0, 0.0, 0.0],
        [0.0, 0.0, 0.0, 0.0],
        [1e4, -1e4, 3.0, 0.0],
        [300.0, 300.0, 300.0, 300.0],  # overflows float16's sum of squares
        [1e30, -2e30, 0.0, 5e29],  # squares overflow float32
        [1e-30, 0.0, -2e-30, 0.0],  # squares underflow float32
        [INF, 1.0, 2.0, 0.0],
        [NAN, 1.0, 2.0, 0.0],
        [INF, NAN, 0.0, 0.0],
        [-INF, -INF, INF, 0.0],
        [0.5, -0.25, 2.0, -1.0],
    ]
)
# The norm itself above the float32 range (3e38 * sqrt(2)): exact in the
# kernel for l2_normalize/cosine (unit vectors), where the portable form
# divides by inf. (Subnormal inputs are not tested: XLA flushes them to 0.)
OUT_OF_RANGE_ROWS = np.array([[3e38, 3e38, 0.0, 0.0], [3e38, -1e38, 2e38, 0.0]])

SOFTMAX_ROWS = np.array(
    [
        [2.0, -INF, 0.0, 1.0],
        [-INF, -INF, -INF, -INF],
        [1000.0, 999.0, 0.0, -1000.0],
        [12.0, 11.0, 0.0, -3.0],
        [INF, 1.0, 0.0, 0.0],
        [NAN, 1.0, 2.0, 3.0],
        [INF, NAN, 0.0, 0.0],
        [0.5, -0.25, 2.0, -1.0],
    ]
)
SOFTMAX_MASK = np.array(
    [
        [True, True, False, True],
        [True, True, True, True],
        [False, False, False, False],  # fully masked
        [True, False, True, True],
        [True, True, True, True],
        [False, True, True, True],  # NaN under the mask
        [True, True, True, False],
        [True, True, True, True],
    ]
)
# Rows with a NaN logit in a valid entry: the value is NaN (checked), the
# gradient has NaN in the valid entries of the row (checked); which of the
# masked or `-inf` entries also show NaN depends on the formulation.
NAN_ROWS_UNMASKED = (5, 6)
NAN_ROWS_MASKED = (6,)
PLUS_INF_ROW = 4


def _norm_ops():
    return {
        "safe_norm(axis=-1)": lambda x: ops.safe_norm(x, axis=-1),
        "safe_norm(axis=0, keepdims)": lambda x: ops.safe_norm(x, axis=0, keepdims=True),
        "safe_norm(axis=None)": lambda x: ops.safe_norm(x[:3]),
        "safe_norm(ord=2)": lambda x: ops.safe_norm(x, axis=1, ord=2),
        "l2_normalize": lambda x: ops.l2_normalize(x),
        "l2_normalize(axis=0)": lambda x: ops.l2_normalize(x, axis=0),
        "cosine_similarity": lambda x, y: ops.cosine_similarity(x, y),
    }


NORM_OPS = _norm_ops()


def _norm_args(name):
    x = NORM_ROWS
    if name == "cosine_similarity":
        # Each row against a reversed copy: zero against nonzero, inf
        # against finite, rescued against plain.
        return [x, x[::-1].copy()], (0, 1)
    return [x], (0,)


# Rows of NORM_ROWS checked on their own (`_assert_same` skips them):
# [inf, NaN] is NaN in both formulations, with a NaN gradient in the
# kernel (the portable form has a 0 at the infinite entry). The tiny row
# has a NaN gradient in the portable l2_normalize (its derivative scales
# with 1/||x||**2, which underflows) and the exact one in the kernel.
INF_NAN_ROW, TINY_ROW = 8, 5


def _unit_gradient(x, cot):
    """float64: the gradient of sum(cot * x / ||x||) over the last axis."""
    n = np.sqrt(np.sum(x * x, axis=-1, keepdims=True))
    u = x / n
    return (cot - u * np.sum(cot * u, axis=-1, keepdims=True)) / n


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(NORM_OPS))
def test_norm_kernels_match_the_portable_formulation(name, dtype, mode):
    op = NORM_OPS[name]
    arrays, wrt = _norm_args(name)
    columns = "axis=0" in name
    if columns:
        # Columns: leave out the rows with inf/NaN, which would make every
        # column non-finite.
        arrays = [a[[0, 1, 2, 3, 4, 5, 10]] for a in arrays]
    args = [float_tensor(a, dtype) for a in arrays]
    cot = _cotangent(op, args, dtype)
    fused, reference = _both(op, args, wrt, cot, mode)
    what = f"{name} {dtype} {mode}"
    special = []
    if not columns and name != "safe_norm(axis=None)":
        special = [INF_NAN_ROW]
        if name in ("l2_normalize", "cosine_similarity"):
            special.append(TINY_ROW)
        if name == "cosine_similarity" and dtype == "float16":
            special += [4, 6]  # 1e30 is inf in float16: inf against inf
    _assert_same(fused, reference, dtype, what, skip_rows=special)
    out, grads = fused
    if not special:
        return
    ref_out = reference[0]
    assert np.isnan(out[INF_NAN_ROW]).all() and np.isnan(ref_out[INF_NAN_ROW]).all(), what
    if name != "cosine_similarity":
        assert np.isnan(grads[0][INF_NAN_ROW]).all(), f"{what}: NaN propagates"
    finite = np.all([np.isfinite(round_to(a, dtype)).all(axis=-1) for a in arrays], axis=0)
    finite_rows = np.flatnonzero(finite)
    for g in grads:
        assert_finite(g[finite_rows], f"{what} gradient of the finite rows")
    if name == "l2_normalize" and round_to(arrays[0][TINY_ROW], dtype).any():
        x = round_to(arrays[0][TINY_ROW], dtype)
        unit = x / np.sqrt(np.sum(x * x))
        assert_close(out[TINY_ROW], unit, dtype, f"{what} tiny row value")
        g = _unit_gradient(x, cot[TINY_ROW].astype("float64"))
        assert_close(
            grads[0][TINY_ROW],
            g,
            dtype,
            f"{what} tiny row gradient",
            tol=(1e-2, 1e-2 * np.abs(g).max()),
        )
    if name == "cosine_similarity" and round_to(arrays[0][TINY_ROW], dtype).any():
        # The tiny row against itself: cosine 1, gradient 0 up to round-off
        # amplified by 1 / ||x|| (about 4e29).
        assert_close(out[TINY_ROW], 1.0, dtype, f"{what} tiny row value")
        for g in grads:
            assert np.all(np.abs(g[TINY_ROW]) <= 1e-6 * 4.5e29), f"{what}: {g[TINY_ROW]}"
        if dtype == "float16":
            assert np.isnan(out[[4, 6]]).all() and np.isnan(ref_out[[4, 6]]).all(), what


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
def test_softmax_family_kernels_match_the_portable_formulation(dtype, mode):
    x = float_tensor(SOFTMAX_ROWS, dtype)
    m = keras.ops.convert_to_tensor(SOFTMAX_MASK)
    cases = {
        "softmax": (lambda a: ops.softmax(a), NAN_ROWS_UNMASKED),
        "softmax(mask)": (lambda a: ops.softmax(a, mask=m), NAN_ROWS_MASKED),
        "log_softmax": (lambda a: ops.log_softmax(a), NAN_ROWS_UNMASKED),
        "log_softmax(mask)": (lambda a: ops.log_softmax(a, mask=m), NAN_ROWS_MASKED),
        "logsumexp(axis=-1)": (lambda a: ops.logsumexp(a, axis=-1), NAN_ROWS_UNMASKED),
        "logsumexp(mask, keepdims)": (
            lambda a: ops.logsumexp(a, axis=-1, keepdims=True, mask=m),
            NAN_ROWS_MASKED,
        ),
    }
    valid = np.isfinite(SOFTMAX_ROWS) | np.isnan(SOFTMAX_ROWS)
    valid &= SOFTMAX_ROWS != -INF
    for name, (op, nan_rows) in cases.items():
        cot = _cotangent(op, [x], dtype)
        fused, reference = _both(op, [x], (0,), cot, mode)
        what = f"{name} {dtype} {mode}"
        special = () if name.startswith("softmax") else (PLUS_INF_ROW,)
        _assert_same(fused, reference, dtype, what, skip_rows=nan_rows + special)
        out, (g,) = fused
        # The +inf row: the same values. The kernels' logsumexp gradient is
        # 0 on it, where the portable one leaked a NaN through the select
        # that returns +inf; the kernels' log_softmax gradient is NaN at the
        # +inf entry (whose value is NaN) and 0 on the entries whose value
        # is -inf, where the portable one gave those the upstream gradient.
        # softmax: NaN throughout, in both.
        assert_close(out[PLUS_INF_ROW], reference[0][PLUS_INF_ROW], dtype, f"{what} +inf row value")
        g_inf = g[PLUS_INF_ROW]
        if name.startswith("logsumexp"):
            np.testing.assert_array_equal(g_inf, 0)
        elif name.startswith("log_softmax"):
            assert np.isnan(g_inf[0]) and np.all(g_inf[1:] == 0), f"{what}: {g_inf}"
        rows_valid = valid & (SOFTMAX_MASK if "mask" in name else True)
        for r in nan_rows:
            if name.startswith("logsumexp"):
                assert np.isnan(out[r]).all(), f"{what}: NaN row {r} value {out[r]}"
            else:
                assert np.isnan(out[r][rows_valid[r]]).all(), f"{what}: NaN row {r} value {out[r]}"
            assert np.isnan(g[r][rows_valid[r]]).all(), f"{what}: NaN row {r} gradient {g[r]}"
        # Everything off the NaN rows is finite, except the +inf row's
        # value and the NaN of softmax/log_softmax at the +inf entry.
        keep = np.setdiff1d(np.arange(len(SOFTMAX_ROWS)), nan_rows + (PLUS_INF_ROW,))
        assert_finite(g[keep], f"{what} gradient")


# Labels for SOFTMAX_ROWS: one-hot, soft, mass on a `-inf` entry (row 0:
# loss +inf), on a masked entry (row 3 under the mask), on nothing.
CE_LABELS = np.array(
    [
        [0.0, 0.5, 0.25, 0.25],
        [1.0, 0.0, 0.0, 0.0],
        [0.0, 1.0, 0.0, 0.0],
        [0.25, 0.25, 0.25, 0.25],
        [0.0, 0.0, 1.0, 0.0],
        [0.0, 0.0, 0.0, 1.0],
        [0.0, 0.0, 1.0, 0.0],
        [0.7, 0.0, 0.3, 0.0],
    ]
)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
def test_softmax_cross_entropy_kernel_matches_the_portable_formulation(dtype, mode):
    """The dense cross-entropy kernel: the value and both gradients (logits
    and labels) of the portable formulation, with and without a mask and
    label smoothing; rows with a NaN or `+inf` logit are non-finite in
    both (which of NaN and inf depends on the formulation)."""
    x = float_tensor(SOFTMAX_ROWS, dtype)
    y = float_tensor(CE_LABELS, dtype)
    m = keras.ops.convert_to_tensor(SOFTMAX_MASK)
    cases = {
        "plain": {},
        "mask": {"mask": m},
        "label_smoothing": {"label_smoothing": 0.1},
        "mask, label_smoothing": {"mask": m, "label_smoothing": 0.2},
    }
    bad_rows = {"plain": (4, 5, 6), "mask": (4, 6), "label_smoothing": (4, 5, 6)}
    for name, kwargs in cases.items():

        def op(labels, logits, kwargs=kwargs):
            return ops.softmax_cross_entropy(labels, logits, **kwargs)

        cot = _cotangent(op, [y, x], dtype)
        fused, reference = _both(op, [y, x], (0, 1), cot, mode)
        what = f"softmax_cross_entropy({name}) {dtype} {mode}"
        bad = bad_rows.get(name, (4, 6))
        _assert_same(fused, reference, dtype, what, skip_rows=bad)
        out, grads = fused
        assert not np.isfinite(out[list(bad)]).any(), f"{what}: {out}"
        assert not np.isfinite(reference[0][list(bad)]).any(), what
        keep = np.setdiff1d(np.arange(len(SOFTMAX_ROWS)), bad)
        assert_finite(grads[1][keep], f"{what} logits gradient")
        if name == "plain":
            assert out[0] == np.inf, f"{what}: label on a -inf logit"
            assert out[1] == 0.0 and not grads[1][1].any(), f"{what}: nothing left"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("axis", [0, (0, 1), None], ids=["axis0", "axis01", "axisNone"])
def test_softmax_family_tuple_axes(axis, mode, dtype):
    x = RNG.normal(size=(3, 4, 5)) * 4
    x[1, 2, :] = -INF
    mask = RNG.random((3, 4, 5)) > 0.3
    args = [float_tensor(x, dtype)]
    m = keras.ops.convert_to_tensor(mask)
    for name, op in {
        "softmax": lambda a: ops.softmax(a, axis=axis),
        "log_softmax(mask)": lambda a: ops.log_softmax(a, axis=axis, mask=m),
        "logsumexp": lambda a: ops.logsumexp(a, axis=axis),
        "logsumexp(mask)": lambda a: ops.logsumexp(a, axis=axis, mask=m),
        "l2_normalize": lambda a: ops.l2_normalize(a, axis=axis),
        "safe_norm": lambda a: ops.safe_norm(a, axis=axis),
    }.items():
        cot = _cotangent(op, args, dtype)
        fused, reference = _both(op, args, (0,), cot, mode)
        _assert_same(fused, reference, dtype, f"{name} axis={axis} {dtype} {mode}")


# Rows without a NaN, `+inf` or empty slice (and a mask that leaves
# something in every row): the grids on which the native PyTorch kernels
# run their fast paths (the grids above send them to the `keras.ops`
# kernels: one such row anywhere does).
FINITE_SOFTMAX_ROWS = [0, 2, 3, 7]
FINITE_NORM_ROWS = [0, 1, 2, 10]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
def test_kernels_on_rows_without_special_slices(dtype, mode):
    x = float_tensor(SOFTMAX_ROWS[FINITE_SOFTMAX_ROWS], dtype)
    finite = float_tensor(SOFTMAX_ROWS[[2, 3, 7]], dtype)
    y = float_tensor(CE_LABELS[[2, 3, 7]], dtype)
    m = keras.ops.convert_to_tensor(SOFTMAX_MASK[[0, 3, 4, 7]])
    n = float_tensor(NORM_ROWS[FINITE_NORM_ROWS], dtype)
    for name, op, args, wrt in (
        ("softmax", lambda a: ops.softmax(a), [x], (0,)),
        ("softmax(mask)", lambda a: ops.softmax(a, mask=m), [x], (0,)),
        ("log_softmax", lambda a: ops.log_softmax(a), [x], (0,)),
        ("log_softmax(mask)", lambda a: ops.log_softmax(a, mask=m), [x], (0,)),
        ("logsumexp", lambda a: ops.logsumexp(a, axis=-1), [x], (0,)),
        ("softmax_cross_entropy", ops.softmax_cross_entropy, [y, finite], (0, 1)),
        ("safe_norm", lambda a: ops.safe_norm(a, axis=-1), [n], (0,)),
        ("l2_normalize", lambda a: ops.l2_normalize(a), [n], (0,)),
        (
            "cosine_similarity",
            lambda a: ops.cosine_similarity(a, keras.ops.flip(a, axis=0)),
            [n],
            (0,),
        ),
    ):
        cot = _cotangent(op, args, dtype)
        fused, reference = _both(op, args, wrt, cot, mode)
        _assert_same(fused, reference, dtype, f"{name} {dtype} {mode}")


KERNEL_CASE_PREFIXES = (
    "safe_norm",
    "l2_normalize",
    "cosine",
    "logsumexp",
    "softmax_",
    "log_softmax",
    "task_distance",
)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "case",
    [
        c
        for c in edge_cases()
        if c.name.startswith(KERNEL_CASE_PREFIXES) and not c.name.startswith("softmax_ce")
    ],
    ids=repr,
)
def test_edge_grid_of_cases_py(case, dtype, mode):
    """The shared edge grid (`tests/ops/cases.py`), kernels against the
    portable formulation."""
    args = [
        float_tensor(a, dtype)
        if i in case.float_args
        else keras.ops.convert_to_tensor(np.asarray(a))
        for i, a in enumerate(case.args)
    ]
    cot = _cotangent(case.op, args, dtype)
    fused, reference = _both(case.op, args, case.wrt, cot, mode)
    _assert_same(fused, reference, dtype, f"{case.name} {dtype} {mode}")


@pytest.mark.parametrize("mode", MODES)
def test_unit_vectors_exact_where_the_norm_leaves_the_range(mode):
    """`l2_normalize` and `cosine_similarity` of vectors whose norm
    overflows float32 (3e38 * sqrt(2)): the kernel rescales by a power of
    two and returns the exact unit vector (the portable form divides by
    inf), with finite gradients; `safe_norm` gives inf, with the gradient
    x / ||x|| (about 0.7, computed exactly from the rescaled vector)."""
    x = OUT_OF_RANGE_ROWS
    t = float_tensor(x, "float32")
    out, (g,) = vjp(lambda a: ops.l2_normalize(a), [t], mode=mode)
    unit = x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True))  # float64
    assert_close(out, unit, what="l2_normalize")
    assert_finite(g, "l2_normalize gradient")
    out, (g1, g2) = vjp(
        lambda a, b: ops.cosine_similarity(a, b),
        [t, keras.ops.flip(t, axis=0)],
        wrt=(0, 1),
        mode=mode,
    )
    assert_close(out, np.sum(unit * unit[::-1], axis=-1), what="cosine")
    assert_finite(g1, "cosine gradient")
    assert_finite(g2, "cosine gradient")
    out, (g,) = vjp(lambda a: ops.safe_norm(a, axis=-1), [t], mode=mode)
    np.testing.assert_array_equal(out, [INF, INF])
    assert_close(g, unit, what="safe_norm gradient")


@pytest.mark.parametrize("mode", MODES)
def test_infinite_and_nan_upstream_gradients_at_dead_entries(mode):
    """A log after a softmax sends an infinite (or NaN) gradient to the
    masked and `-inf` entries (p = 0) and to the zero vectors of a norm:
    the kernels return exactly 0 there, as the portable form does."""
    x = np.array([[2.0, -INF, 0.0, 1.0], [1.0, 2.0, 3.0, 4.0], [-INF, -INF, -INF, -INF]])
    mask = np.array([[True, True, True, False], [True, True, True, True], [True, True, True, True]])
    t = float_tensor(x, "float32")
    m = keras.ops.convert_to_tensor(mask)
    cot = np.ones_like(x)
    dead = ~mask | (x == -INF)
    cot[dead] = INF
    for name, op in {
        "softmax": lambda a: ops.softmax(a, mask=m),
        "log_softmax": lambda a: ops.log_softmax(a, mask=m),
    }.items():
        out, (g,) = vjp(op, [t], cotangent=cot.astype("float32"), mode=mode)
        assert_finite(g, name)
        np.testing.assert_array_equal(g[dead], 0)
    z = np.array([[0.0, 0.0, 0.0], [1.0, 2.0, 2.0]])
    out, (g,) = vjp(
        lambda a: ops.l2_normalize(a),
        [float_tensor(z, "float32")],
        cotangent=np.array([[INF, NAN, 1.0], [1.0, 0.0, 0.0]], "float32"),
        mode=mode,
    )
    np.testing.assert_array_equal(g[0], 0)
    out, (g,) = vjp(
        lambda a: ops.safe_norm(a, axis=-1),
        [float_tensor(z, "float32")],
        cotangent=np.array([INF, 1.0], "float32"),
        mode=mode,
    )
    np.testing.assert_array_equal(g[0], 0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_kernels_compiled_match_eager(dtype):
    """`vjp_all_modes`: each kernel compiled (XLA on TensorFlow, `jax.jit`)
    gives the eager values and gradients, NaN and inf patterns included
    (both modes whatever KERAS_STABLE_TEST_MODES says)."""
    z = float_tensor(SOFTMAX_ROWS, dtype)
    m = keras.ops.convert_to_tensor(SOFTMAX_MASK)
    for name, op in NORM_OPS.items():
        args, wrt = _norm_args(name)
        if name == "cosine_similarity":
            # Not the tiny row against itself: its gradient is 0 up to
            # round-off times 1 / ||x|| (4e29), which differs under XLA.
            args = [np.delete(a, TINY_ROW, axis=0) for a in args]
        args = [float_tensor(a, dtype) for a in args]
        vjp_all_modes(op, args, wrt, _cotangent(op, args, dtype), dtype, modes=ALL_MODES)
    for op in (
        lambda a: ops.softmax(a, mask=m),
        lambda a: ops.log_softmax(a),
        lambda a: ops.logsumexp(a, axis=-1, mask=m),
    ):
        vjp_all_modes(op, [z], (0,), _cotangent(op, [z], dtype), dtype, modes=ALL_MODES)


def _compiled_on_constants(fn, args):
    """`fn(*args)` compiled with every argument a compile-time constant:
    XLA folds the whole computation, after its algebraic simplifier has
    reassociated products (`(x * c)**2` into `x**2 * c**2`, which
    overflows)."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        return tf.function(lambda: fn(*args), jit_compile=True)()
    import jax

    return jax.jit(lambda: fn(*args))()


@pytest.mark.skipif(BACKEND == "torch", reason="no compiler on torch")
@pytest.mark.parametrize("dtype", ("float32", "float16"))
def test_kernels_on_compile_time_constants(dtype):
    """Compiled on constant inputs (a target closed over by a loss under
    `jax.jit`), every kernel gives its eager value: the rescue of the
    zero, tiny and huge rows survives XLA's constant folding; and the
    gradient with respect to the one non-constant argument too."""
    rows = np.concatenate([NORM_ROWS[[0, 1, 2, 3, 4, 5, 10]], OUT_OF_RANGE_ROWS[:, :4]])
    z = float_tensor(SOFTMAX_ROWS, dtype)
    for name, op in NORM_OPS.items():
        if "axis=None" in name:
            continue
        args = [float_tensor(rows, dtype)]
        if name == "cosine_similarity":
            args.append(float_tensor(rows[::-1].copy(), dtype))
        expected = to_numpy(op(*args))
        got = to_numpy(_compiled_on_constants(op, args))
        assert_close(got, expected, dtype, f"{name} {dtype} on constants")
    if "cosine_similarity" in NORM_OPS:
        x1 = float_tensor(rows, dtype)
        x2 = rows[::-1].copy()

        def one_constant(b):
            return ops.cosine_similarity(x1, b)

        vjp_all_modes(one_constant, [float_tensor(x2, dtype)], dtype=dtype)
    for op in (ops.softmax, ops.log_softmax, lambda a: ops.logsumexp(a, axis=-1)):
        expected = to_numpy(op(z))
        assert_close(to_numpy(_compiled_on_constants(op, [z])), expected, dtype, "softmax family")


def test_kernels_can_be_switched_off():
    """`KERAS_STABLE_PORTABLE=1` runs the portable formulation: same values."""
    x = float_tensor(SOFTMAX_ROWS[[0, 2, 3, 7]], "float32")
    fused = keras.ops.convert_to_numpy(ops.softmax(x))
    with portable():
        reference = keras.ops.convert_to_numpy(ops.softmax(x))
    assert_close(fused, reference)


# --------------------------------------------------------------------------
# Second order.


def _second_order(loss, params):
    """`loss(params) -> scalar` (which itself takes a gradient); returns the
    gradient of `loss` with respect to `params` (a list of float32 NumPy
    arrays), through the backend's autodiff, as float64 NumPy."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        vs = [tf.Variable(p) for p in params]
        with tf.GradientTape() as tape:
            out = loss(vs)
        return [np.asarray(g, "float64") for g in tape.gradient(out, vs)]
    if BACKEND == "jax":
        import jax

        grads = jax.grad(lambda ps: loss(ps))([keras.ops.convert_to_tensor(p) for p in params])
        return [np.asarray(g, "float64") for g in grads]
    import torch

    ps = [torch.tensor(p, requires_grad=True) for p in params]
    grads = torch.autograd.grad(loss(ps), ps)
    return [g.detach().numpy().astype("float64") for g in grads]


def _input_gradient(fn, x):
    """`d sum(fn(x)) / dx` with the graph kept for a second derivative."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        with tf.GradientTape() as tape:
            tape.watch(x)
            out = keras.ops.sum(fn(x))
        return tape.gradient(out, x)
    if BACKEND == "jax":
        import jax

        return jax.grad(lambda a: keras.ops.sum(fn(a)))(x)
    import torch

    if not x.requires_grad:  # an input; a parameter keeps its graph
        x = x.detach().requires_grad_(True)
    (g,) = torch.autograd.grad(keras.ops.sum(fn(x)), x, create_graph=True)
    return g


GROUPS, WIDTH, DIM = 3, 2, 4


def _critic(x, kernel, weights):
    """A critic with norms inside: `D(x) = sum_g v_g ||(x W)_g||` over
    groups of the features; its input gradient goes through the norm's
    backward, so the penalty differentiates that backward again."""
    h = keras.ops.reshape(keras.ops.matmul(x, kernel), (-1, GROUPS, WIDTH))
    return keras.ops.sum(ops.safe_norm(h, axis=-1) * weights, axis=-1)


def _penalty(x, kernel, weights):
    grad_x = _input_gradient(lambda a: _critic(a, kernel, weights), x)
    return keras.ops.mean(keras.ops.square(ops.safe_norm(grad_x, axis=-1) - 1.0))


def _penalty_np(x, kernel, weights):
    """float64 NumPy: the same penalty, the critic's input gradient written
    out (0 for a group whose features are all 0)."""
    h = (x @ kernel).reshape(-1, GROUPS, WIDTH)
    n = np.sqrt(np.sum(h * h, axis=-1, keepdims=True))
    unit = np.where(n > 0, h / np.where(n > 0, n, 1.0), 0.0)
    grad_h = (unit * weights[None, :, None]).reshape(len(x), -1)
    grad_x = grad_h @ kernel.T
    return np.mean((np.sqrt(np.sum(grad_x * grad_x, axis=-1)) - 1.0) ** 2)


def _fd(fn, params, eps=1e-6):
    grads = []
    for i, p in enumerate(params):
        g = np.zeros_like(p)
        for idx in np.ndindex(p.shape):
            up = [q.copy() for q in params]
            down = [q.copy() for q in params]
            up[i][idx] += eps
            down[i][idx] -= eps
            g[idx] = (fn(*up) - fn(*down)) / (2 * eps)
        grads.append(g)
    return grads


WGAN_POINTS = {
    # x = 0 rows: every group's features are 0, the critic's input gradient
    # is exactly 0 for every kernel, and so is the penalty's gradient.
    "zero_inputs": (
        np.zeros((3, DIM)),
        RNG.normal(size=(DIM, GROUPS * WIDTH)),
        RNG.normal(size=GROUPS),
    ),
    # v = 0: the input gradient is exactly 0 here (and nonzero nearby, where
    # ||grad|| has its kink: the symmetric difference is 0, as the kernel).
    "zero_weights": (
        RNG.normal(size=(3, DIM)),
        RNG.normal(size=(DIM, GROUPS * WIDTH)),
        np.zeros(GROUPS),
    ),
    "generic": (
        np.concatenate([RNG.normal(size=(3, DIM)), np.zeros((1, DIM))]),
        RNG.normal(size=(DIM, GROUPS * WIDTH)),
        RNG.normal(size=GROUPS),
    ),
}


@pytest.mark.parametrize("point", list(WGAN_POINTS))
def test_wgan_gradient_penalty_second_order_through_safe_norm(point):
    """`(||grad_x D(x)|| - 1)**2` differentiated with respect to D's
    weights, through `safe_norm` twice (inside D, so that the outer
    gradient differentiates the norm's fused backward, and on the input
    gradient): finite everywhere, equal to central differences of the
    float64 reference, and to the portable formulation's."""
    x, kernel, weights = WGAN_POINTS[point]
    xt = keras.ops.convert_to_tensor(x.astype("float32"))

    def loss(ps):
        return _penalty(xt, ps[0], ps[1])

    params = [kernel.astype("float32"), weights.astype("float32")]
    grads = _second_order(loss, params)
    with portable():
        portable_grads = _second_order(loss, params)
    expected = _fd(lambda k, w: _penalty_np(x, k, w), [kernel, weights])
    for name, g, pg, e in zip(("kernel", "weights"), grads, portable_grads, expected):
        assert_finite(g, f"{point}: d penalty / d {name}")
        np.testing.assert_allclose(
            g, e, rtol=1e-3, atol=1e-4, err_msg=f"{point}: {name} vs float64 FD"
        )
        np.testing.assert_allclose(
            g, pg, rtol=1e-4, atol=1e-5, err_msg=f"{point}: {name} vs portable"
        )
    if point != "generic":
        for g in grads:
            np.testing.assert_array_equal(g, 0)


HVP_OPS = {
    "safe_norm": lambda a, m: ops.safe_norm(a, axis=-1),
    "safe_norm(float16)": lambda a, m: ops.safe_norm(keras.ops.cast(a, "float16"), axis=-1),
    "l2_normalize": lambda a, m: ops.l2_normalize(a),
    "cosine_similarity": lambda a, m: ops.cosine_similarity(a, keras.ops.flip(a, axis=0)),
    "softmax": lambda a, m: ops.softmax(a, mask=m),
    "log_softmax": lambda a, m: ops.log_softmax(a, mask=m),
    "logsumexp": lambda a, m: ops.logsumexp(a, axis=-1, mask=m),
    "softmax_cross_entropy": lambda a, m: ops.softmax_cross_entropy(
        keras.ops.softmax(keras.ops.flip(a, axis=0)), a, mask=m, label_smoothing=0.1
    ),
}


@pytest.mark.parametrize("name", list(HVP_OPS))
def test_hessian_vector_products_match_the_portable_formulation(name):
    """`d/dx <grad_x sum(op(x) * c), w>` at a generic point with a zero
    vector and a fully masked row: the kernels' backward passes are
    differentiable, and their derivative is the portable one's."""
    op = HVP_OPS[name]
    x = RNG.normal(size=(4, 5)).astype("float32")
    x[1] = 0.0
    mask = np.ones((4, 5), bool)
    mask[2] = False
    mask[3, 1] = False
    m = keras.ops.convert_to_tensor(mask)
    cot = keras.ops.convert_to_tensor(RNG.normal(size=np.shape(op(x, m))).astype("float32"))
    w = keras.ops.convert_to_tensor(RNG.normal(size=(4, 5)).astype("float32"))

    def loss(ps):
        g = _input_gradient(lambda a: keras.ops.cast(op(a, m), "float32") * cot, ps[0])
        return keras.ops.sum(g * w)

    (h,) = _second_order(loss, [x])
    with portable():
        (ph,) = _second_order(loss, [x])
    assert_finite(h, name)
    tol = (1e-2, 1e-2) if "float16" in name else (1e-4, 1e-5)
    assert_close(h, ph, what=f"{name} Hessian-vector product", tol=tol)


@pytest.mark.jax
def test_jax_forward_mode_needs_the_portable_formulation():
    """`keras.ops.custom_gradient` is a `jax.custom_vjp`, which JAX cannot
    differentiate in forward mode (`jax.jvp`, `jax.jacfwd`, `jax.hessian`);
    `KERAS_STABLE_PORTABLE=1` runs the portable formulation, which can."""
    import jax
    import jax.numpy as jnp

    x = jnp.asarray(RNG.normal(size=(2, 3)).astype("float32"))

    def f(a):
        return ops.safe_norm(a, axis=-1)

    with pytest.raises(TypeError, match="custom_vjp"):
        jax.jvp(f, (x,), (jnp.ones_like(x),))
    with portable():
        _, tangent = jax.jvp(f, (x,), (jnp.ones_like(x),))
    expected = np.sum(np.asarray(x) / np.linalg.norm(np.asarray(x), axis=-1, keepdims=True), -1)
    assert_close(tangent, expected)
