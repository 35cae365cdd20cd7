"""The `keras.ops` signatures: axis forms, norm orders, `l2_normalize`'s
`order` and `epsilon`.

`softmax`, `log_softmax` and `logsumexp` take an int, a tuple/list of ints
or None (all axes; `logsumexp`'s default, as `keras.ops.logsumexp`);
`safe_norm` takes the vector orders of `keras.ops.norm` and "fro";
`l2_normalize` takes `keras.ops.normalize`'s `order` and `epsilon`. Every
form is checked against a float64 NumPy reference: values, gradients
(finite differences in float64 at smooth points, exact zeros at singular
points), eager and compiled, float16/bfloat16 finite.
"""

import inspect

import keras
import numpy as np
import pytest

from keras_stable import ops
from tests import reference as ref
from tests.backend_utils import MODES
from tests.backend_utils import assert_close
from tests.backend_utils import assert_finite
from tests.backend_utils import cast_tensor
from tests.backend_utils import finite_difference
from tests.backend_utils import float64_arithmetic
from tests.backend_utils import float64_enabled
from tests.backend_utils import round_to
from tests.backend_utils import vjp
from tests.backend_utils import vjp_all_modes

NEG_INF = -np.inf
INF = np.inf
rng = np.random.default_rng(7)


def _fd_check(op_fn, ref_fn, x, extra=(), rtol=1e-6, atol=1e-7):
    """Gradient of sum(op(x)) == float64 finite differences of the reference."""
    with float64_enabled():
        args = [keras.ops.convert_to_tensor(np.asarray(x, "float64"))]
        args += [keras.ops.convert_to_tensor(np.asarray(e)) for e in extra]
        out, (g,) = vjp(op_fn, args, mode="eager")
    np.testing.assert_allclose(
        out, ref_fn(np.asarray(x, "float64"), *extra), rtol=1e-10, atol=1e-12
    )
    fd = finite_difference(lambda v: ref_fn(v, *extra), x)
    np.testing.assert_allclose(g, fd, rtol=rtol, atol=atol)


# --------------------------------------------------------------------------
# Signatures
# --------------------------------------------------------------------------


def _params(fn):
    return {n: p.default for n, p in inspect.signature(fn).parameters.items()}


@pytest.mark.parametrize(
    "ours, theirs, extra",
    [
        (ops.logsumexp, keras.ops.logsumexp, {"mask": None}),
        (ops.softmax, keras.ops.softmax, {"mask": None}),
        (ops.log_softmax, keras.ops.log_softmax, {"mask": None}),
        (ops.l2_normalize, keras.ops.normalize, {}),
        (ops.safe_norm, keras.ops.norm, {}),
    ],
    ids=["logsumexp", "softmax", "log_softmax", "l2_normalize", "safe_norm"],
)
def test_parameters_and_defaults_are_those_of_keras_ops(ours, theirs, extra):
    """Every keras.ops parameter exists with the same default (keyword use
    is drop-in; safe_norm's positional order is (x, axis, keepdims, ord))."""
    expected = dict(_params(theirs), **extra)
    assert _params(ours) == expected


# --------------------------------------------------------------------------
# Softmax family: axis forms
# --------------------------------------------------------------------------

SOFTMAX_OPS = {
    "softmax": (ops.softmax, ref.softmax),
    "log_softmax": (ops.log_softmax, ref.log_softmax),
    "logsumexp": (ops.logsumexp, ref.logsumexp),
}
AXES = [None, 0, -1, (0, 2), [2, 0], (1,), (0, 1, 2), ()]


def _axis_id(axis):
    return "None" if axis is None else str(axis).replace(" ", "")


def _np_axis(axis):
    return tuple(axis) if isinstance(axis, list) else axis


def test_logsumexp_default_is_all_axes():
    x = rng.normal(size=(2, 3, 4)) * 10
    out = keras.ops.convert_to_numpy(ops.logsumexp(cast_tensor(x)))
    assert out.shape == ()
    assert_close(out, ref.logsumexp(round_to(x, "float32"), axis=None))
    out = ops.logsumexp(cast_tensor(x), keepdims=True)
    assert tuple(out.shape) == (1, 1, 1)
    # The old default, now spelled out.
    assert_close(
        keras.ops.convert_to_numpy(ops.logsumexp(cast_tensor(x), axis=-1)),
        ref.logsumexp(round_to(x, "float32"), axis=-1),
    )


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=_axis_id)
def test_logsumexp_shapes_match_numpy(axis, keepdims):
    x = np.zeros((2, 3, 4), "float32")
    expected = np.log(np.sum(np.exp(x), axis=_np_axis(axis), keepdims=keepdims))
    out = ops.logsumexp(cast_tensor(x), axis=axis, keepdims=keepdims)
    assert tuple(out.shape) == expected.shape
    assert_close(keras.ops.convert_to_numpy(out), expected)


@pytest.mark.parametrize("axis", AXES, ids=_axis_id)
@pytest.mark.parametrize("name", SOFTMAX_OPS)
def test_softmax_family_axis_forms_values_and_gradients(name, axis):
    """Values vs float64 reference and gradients vs float64 finite
    differences, with a mask and -inf entries, for every axis form."""
    op, r = SOFTMAX_OPS[name]
    x = rng.normal(size=(2, 3, 4)) * 3
    # Every group keeps a valid entry: each reduced axis has size >= 2, so
    # each group meets the even-parity entries (with axis=() each entry is
    # its own group: nothing is masked).
    i, j, k = np.indices((2, 3, 4))
    mask = (rng.random((2, 3, 4)) > 0.3) | ((i + j + k) % 2 == 0) | (axis == ())
    x[1, 2, 3] = NEG_INF
    kw = {"axis": axis}
    nax = _np_axis(axis)
    out, (g,) = vjp_all_modes(lambda a, m: op(a, mask=m, **kw), [cast_tensor(x), mask])
    with np.errstate(all="ignore"):
        expected = r(round_to(x, "float32"), axis=nax, mask=mask)
    assert_close(out, expected, what=f"{name} axis={axis}")
    assert_finite(g, f"{name} gradient")
    assert not g[~mask].any() and g[1, 2, 3] == 0  # masked / -inf: exactly 0
    # Gradient == finite differences (float64, no -inf: the FD reference
    # must be finite where it is differentiated), for a random cotangent
    # (sum(softmax) is constant). Masked entries are constant (0 / -inf):
    # only the others are compared.
    x[1, 2, 3] = 0.5
    w = rng.normal(size=(2, 3, 4) if name != "logsumexp" else np.shape(r(x, axis=nax)))

    def masked_ref(v, m):
        out = r(v, axis=nax, mask=m) * w
        return out if name == "logsumexp" else np.where(m, out, 0.0)

    def masked_op(a, m):
        out = op(a, mask=m, **kw) * keras.ops.convert_to_tensor(w)
        return out if name == "logsumexp" else keras.ops.where(m, out, keras.ops.zeros_like(out))

    _fd_check(masked_op, masked_ref, x, (mask,))


@pytest.mark.parametrize("axis", [(1, 2), None, [0, 2]], ids=_axis_id)
@pytest.mark.parametrize("name", SOFTMAX_OPS)
def test_softmax_family_groups_with_nothing_left_over_tuple_axes(name, axis):
    """A fully masked (or all -inf) group gives 0 / -inf with a zero
    gradient; NaN under the mask never leaks; +inf gives +inf / NaN-free."""
    op, r = SOFTMAX_OPS[name]
    x = rng.normal(size=(2, 3, 4))
    mask = np.ones((2, 3, 4), bool)
    if axis is None:
        mask[:] = False  # the whole tensor is the group
    elif axis == (1, 2):
        mask[1] = False  # second group empty
        x[1, 0, 0] = np.nan  # under the mask
    else:  # groups are x[:, j, :]
        mask[:, 1, :] = False
        x[:, 2, :] = NEG_INF  # all -inf group
    for mode in MODES:
        out, (g,) = vjp(lambda a, m: op(a, axis=axis, mask=m), [cast_tensor(x), mask], mode=mode)
        with np.errstate(all="ignore"):
            expected = r(x, axis=_np_axis(axis), mask=mask)
        assert_close(out, round_to(expected, "float32"), what=f"{name} {mode}")
        assert_finite(g, f"{name} gradient {mode}")
        np.testing.assert_array_equal(g[~mask], 0)
        if axis == [0, 2]:
            np.testing.assert_array_equal(g[:, 2, :], 0)


def test_logsumexp_plus_inf_and_nan_over_tuple_axes():
    x = np.zeros((2, 2, 3))
    x[0, 1, 2] = INF
    x[1, 0, 0] = np.nan
    out = keras.ops.convert_to_numpy(ops.logsumexp(cast_tensor(x), axis=(1, 2))).astype("float64")
    assert out[0] == INF and np.isnan(out[1])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("name", SOFTMAX_OPS)
def test_softmax_family_tuple_axes_half_precision(name, dtype):
    """Logits that overflow exp in float16: computed in float32, finite."""
    op, r = SOFTMAX_OPS[name]
    x = np.array([[[12.0, 11.0], [0.0, 100.0]], [[-100.0, 50.0], [30.0, 31.0]]])
    mask = np.array([[[True, True], [True, False]], [[False, False], [False, False]]])
    out, (g,) = vjp_all_modes(
        lambda a, m: op(a, axis=(1, 2), mask=m), [cast_tensor(x, dtype), mask], dtype=dtype
    )
    with np.errstate(all="ignore"):
        expected = round_to(r(round_to(x, dtype), axis=(1, 2), mask=mask), dtype)
    assert_close(out, expected, dtype)
    assert_finite(g, f"{name} gradient in {dtype}")
    out = op(cast_tensor(x, dtype), axis=(1, 2))
    assert keras.backend.standardize_dtype(out.dtype) == dtype


def test_shifted_logits_int_axis_still_serves_cross_entropy():
    x = rng.normal(size=(3, 4))
    labels = np.eye(4)[[0, 3, 1]]
    out = keras.ops.convert_to_numpy(
        ops.softmax_cross_entropy(cast_tensor(labels), cast_tensor(x), axis=-1)
    )
    assert_close(out, ref.softmax_cross_entropy(labels, round_to(x, "float32"), axis=-1))


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: ops.logsumexp(np.ones((2, 3), "float32"), axis=(0, 0)), r"`axis`.*repeats"),
        (lambda: ops.softmax(np.ones((2, 3), "float32"), axis=(0, 2)), r"`axis`=2 .*rank 2"),
        (
            lambda: ops.log_softmax(np.ones((2, 3), "float32"), axis=(0, 1.0)),
            r"`axis` must be an int",
        ),
        (
            lambda: ops.logsumexp(np.ones((2, 3), "float32"), axis="all"),
            r"`axis` must be an int, a tuple",
        ),
    ],
)
def test_bad_axis_forms(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --------------------------------------------------------------------------
# safe_norm: orders
# --------------------------------------------------------------------------

VECTOR_ORDS = [None, 2, 1, INF, -INF, 0, 3, 0.5, 2.5, -1, -2.5, 2.0]


def _ord_id(o):
    return {INF: "inf", -INF: "-inf"}.get(o, repr(o))


def _float64_params(orders):
    """The general p-norms go through `keras.ops.power`, float32 in float64
    on Keras 3.16's torch backend (`float64_arithmetic`)."""
    general = [o[0] not in (None, 1, 2, INF, -INF) for o in orders]
    return [
        pytest.param(*o, marks=[float64_arithmetic] if g else [])
        for o, g in zip(orders, general, strict=True)
    ]


def np_norm(x, axis=None, ord=None, keepdims=False):
    x = np.asarray(x, "float64")
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.linalg.norm(x, ord=ord, axis=axis, keepdims=keepdims)


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("ord", VECTOR_ORDS, ids=_ord_id)
def test_safe_norm_vector_orders_values(ord, keepdims):
    x = rng.normal(size=(3, 5)) * 4
    x[1, 2] = 0.0  # a zero entry
    x[2] = 0.0  # the zero vector
    for axis in (-1, 0):
        out, (g,) = vjp_all_modes(
            lambda a, axis=axis: ops.safe_norm(a, axis=axis, keepdims=keepdims, ord=ord),
            [cast_tensor(x)],
        )
        assert out.shape == np_norm(x, axis, ord, keepdims).shape
        assert_close(out, np_norm(round_to(x, "float32"), axis, ord, keepdims), what=f"ord={ord}")
        assert_finite(g, f"ord={ord} gradient")
    # 1-D input, axis=None: a vector norm as in keras.ops.norm.
    out = keras.ops.convert_to_numpy(ops.safe_norm(cast_tensor(x[0]), ord=ord))
    assert_close(out, np_norm(round_to(x[0], "float32"), None, ord))


@pytest.mark.parametrize("ord", _float64_params([(o,) for o in VECTOR_ORDS if o != 0]), ids=_ord_id)
def test_safe_norm_vector_orders_gradients_match_finite_differences(ord):
    """At smooth points (no zero entries, distinct magnitudes)."""
    x = np.array([[0.7, -1.9, 2.6, -0.3], [1.2, 0.4, -3.1, 2.2]])
    _fd_check(lambda a: ops.safe_norm(a, axis=-1, ord=ord), lambda v: np_norm(v, -1, ord), x)
    _fd_check(lambda a: ops.safe_norm(a, axis=0, ord=ord), lambda v: np_norm(v, 0, ord), x)


def test_safe_norm_count_has_zero_gradient():
    x = np.array([[0.0, 1.0, -2.0], [0.0, 0.0, 0.0]])
    for mode in MODES:
        out, (g,) = vjp(lambda a: ops.safe_norm(a, axis=-1, ord=0), [cast_tensor(x)], mode=mode)
        np.testing.assert_array_equal(out, [2, 0])
        np.testing.assert_array_equal(g, 0)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ord", VECTOR_ORDS + ["fro"], ids=_ord_id)
def test_safe_norm_zero_vector_value_and_gradient_exactly_zero(ord, mode, dtype):
    axis = (1, 2) if ord == "fro" else -1
    x = np.zeros((2, 3, 4))
    out, (g,) = vjp(
        lambda a: ops.safe_norm(a, axis=axis, ord=ord), [cast_tensor(x, dtype)], mode=mode
    )
    np.testing.assert_array_equal(out, 0)
    np.testing.assert_array_equal(g, 0)


@pytest.mark.parametrize("ord", [1, INF, -INF, 0.5, 3, -1, -2.5], ids=_ord_id)
def test_safe_norm_zero_entry_gradient_is_finite_and_zero_there(ord):
    """A zero entry: the derivative does not exist there (kink, or infinite
    slope for p < 1); its gradient is 0, the others stay exact."""
    x = np.array([[3.0, 0.0, -4.0, 1.5]])
    for mode in MODES:
        out, (g,) = vjp(lambda a: ops.safe_norm(a, axis=-1, ord=ord), [cast_tensor(x)], mode=mode)
        assert_close(out, np_norm(x, -1, ord))
        assert_finite(g, f"ord={ord}")
        assert g[0, 1] == 0
    if ord < 0:  # the norm is 0 around this point while x[1] stays 0
        np.testing.assert_array_equal(g, 0)
    elif ord not in (INF, -INF):
        fd = finite_difference(lambda v: np_norm(v, -1, ord), x)
        fd[0, 1] = 0.0
        np.testing.assert_allclose(g, fd, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("ord", VECTOR_ORDS, ids=_ord_id)
def test_safe_norm_inf_and_nan_entries(ord):
    x = np.array([[INF, 1.0, 2.0], [np.nan, 1.0, 2.0], [-INF, -INF, INF], [np.nan, 0.0, 0.0]])
    out, (g,) = vjp(lambda a: ops.safe_norm(a, axis=-1, ord=ord), [cast_tensor(x)])
    assert_close(out, np_norm(x, -1, ord))  # inf and NaN exactly (NaN counts for ord 0)
    assert_finite(g[0], f"ord={ord} gradient next to inf")
    assert_finite(g[2], f"ord={ord} gradient of all-inf")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("ord", VECTOR_ORDS, ids=_ord_id)
def test_safe_norm_orders_half_precision(ord, dtype):
    """float16 [300]*4 (sum of squares 360000 > 65504) and small entries."""
    x = np.array([[300.0, 300.0, 300.0, 300.0], [1e-3, 2e-3, 0.0, 5.0], [0.0] * 4])
    out, (g,) = vjp_all_modes(
        lambda a: ops.safe_norm(a, axis=-1, ord=ord), [cast_tensor(x, dtype)], dtype=dtype
    )
    assert_close(out, round_to(np_norm(round_to(x, dtype), -1, ord), dtype), dtype)
    assert_finite(out, f"ord={ord} value in {dtype}")
    assert_finite(g, f"ord={ord} gradient in {dtype}")
    np.testing.assert_array_equal(g[2], 0)
    assert (
        keras.backend.standardize_dtype(
            ops.safe_norm(cast_tensor(x, dtype), ord=ord, axis=-1).dtype
        )
        == dtype
    )


@pytest.mark.parametrize("ord", [1, 3, 0.5, -1, INF], ids=_ord_id)
def test_safe_norm_p_orders_do_not_overflow_when_the_norm_fits(ord):
    """Scaled: entries near float32's limits (their powers overflow or
    underflow) still give the exact norm."""
    x = np.array([[1e30, 2e30, -3e30], [1e-30, 2e-30, 3e-30]])
    out, (g,) = vjp(lambda a: ops.safe_norm(a, axis=-1, ord=ord), [cast_tensor(x)])
    assert_close(out, np_norm(round_to(x, "float32"), -1, ord))
    assert_finite(g, f"ord={ord}")


def test_safe_norm_euclidean_path_unchanged():
    """ord=None, 2, 2.0 and 'fro' (2 axes) are the same computation."""
    x = rng.normal(size=(3, 4)) * 1e3
    x[0] = 0.0
    base_out, (base_g,) = vjp(lambda a: ops.safe_norm(a, axis=-1), [cast_tensor(x)])
    for ord in (2, 2.0, np.int64(2)):
        out, (g,) = vjp(lambda a, ord=ord: ops.safe_norm(a, axis=-1, ord=ord), [cast_tensor(x)])
        np.testing.assert_array_equal(out, base_out)
        np.testing.assert_array_equal(g, base_g)
    base_out, (base_g,) = vjp(lambda a: ops.safe_norm(a, axis=(0, 1)), [cast_tensor(x)])
    for ord in (None, "fro"):
        out, (g,) = vjp(lambda a, ord=ord: ops.safe_norm(a, axis=(0, 1), ord=ord), [cast_tensor(x)])
        np.testing.assert_array_equal(out, base_out)
        np.testing.assert_array_equal(g, base_g)
    out, _ = vjp(lambda a: ops.safe_norm(a, ord="fro"), [cast_tensor(x)])  # axis=None on a matrix
    np.testing.assert_array_equal(out, base_out)
    assert_close(out, np_norm(round_to(x, "float32"), (0, 1), "fro"))


def test_safe_norm_rank0_and_empty_axes():
    x = np.array([[-3.0, 0.0]])
    for ord in (1, INF, 3, -1):
        out = keras.ops.convert_to_numpy(ops.safe_norm(cast_tensor(x), axis=(), ord=ord))
        np.testing.assert_array_equal(out, [[3.0, 0.0]])
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(ops.safe_norm(cast_tensor(x), axis=(), ord=0)), [[1.0, 0.0]]
    )
    assert float(keras.ops.convert_to_numpy(ops.safe_norm(cast_tensor(-2.0), ord=1))) == 2.0


@pytest.mark.parametrize(
    "x_shape, axis, ord, match",
    [
        (
            (2, 3),
            (0, 1),
            "nuc",
            r"`ord`='nuc' over 2 axes is a matrix norm.*Supported values of `ord`",
        ),
        ((2, 3), None, "nuc", r"`ord`='nuc' .*matrix norm"),
        ((2, 3), -1, "fro", r"`ord`='fro' is a matrix norm: it needs exactly 2 axes, got 1"),
        ((2, 3), -1, "nuc", r"`ord`='nuc' is a matrix norm"),
        ((2, 3), (0, 1), 1, r"`ord`=1 over 2 axes is a matrix norm"),
        ((2, 3), None, 2, r"`ord`=2 over 2 axes"),
        ((2, 3), (0, 1), INF, r"`ord`=inf over 2 axes"),
        ((2, 3, 4), None, 2, r"`ord`=2 needs 1 axis .*got 3 axes"),
        ((2, 3, 4), None, "fro", r"`ord`='fro' is a matrix norm: it needs exactly 2 axes, got 3"),
        ((3,), None, "inf", r"Invalid `ord`='inf'"),
        ((3,), None, True, r"Invalid `ord`=True"),
        ((3,), None, float("nan"), r"Invalid `ord`=nan"),
        ((3,), None, [1], r"Invalid `ord`=\[1\]"),
    ],
)
def test_safe_norm_unsupported_ord_raises_naming_ord(x_shape, axis, ord, match):
    with pytest.raises(ValueError, match=match):
        ops.safe_norm(np.ones(x_shape, "float32"), axis=axis, ord=ord)


def test_supported_ord_list_is_in_the_message():
    with pytest.raises(ValueError, match=r"None .*'fro' .*2, 1, inf, -inf, 0"):
        ops.safe_norm(np.ones((2, 3), "float32"), ord="nuc")


# --------------------------------------------------------------------------
# l2_normalize: order, axis forms, epsilon
# --------------------------------------------------------------------------


def np_normalize(x, axis=-1, order=2, epsilon=None):
    x = np.asarray(x, "float64")
    if order == 2:
        n = np.sqrt(np.sum(x * x, axis=axis, keepdims=True))
    else:
        n = np.linalg.norm(x, ord=order, axis=axis, keepdims=True)
    if epsilon is not None:
        n = np.maximum(n, epsilon)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(n > 0, x / np.where(n > 0, n, 1.0), 0.0)


@pytest.mark.parametrize(
    "order, axis",
    _float64_params(
        [(2, -1), (2, 0), (2, (0, 2)), (2, None), (2, [2, 1]), (1, -1), (1, 1), (3, -1), (4, 0)]
    ),
    ids=str,
)
def test_l2_normalize_orders_and_axes(order, axis):
    x = rng.normal(size=(2, 3, 4)) * 5
    x[0, 1] = 0.0  # a zero vector along the last axis
    nax = _np_axis(axis)
    out, (g,) = vjp_all_modes(
        lambda a: ops.l2_normalize(a, axis=axis, order=order), [cast_tensor(x)]
    )
    assert_close(out, np_normalize(round_to(x, "float32"), nax, order))
    assert_finite(g, "l2_normalize gradient")
    if axis == -1:
        np.testing.assert_array_equal(out[0, 1], 0)
        np.testing.assert_array_equal(g[0, 1], 0)
    # Gradient == finite differences at a smooth point, for a random cotangent.
    y = rng.normal(size=(2, 3, 4)) + np.sign(rng.normal(size=(2, 3, 4))) * 0.5
    w = rng.normal(size=(2, 3, 4))
    _fd_check(
        lambda a: ops.l2_normalize(a, axis=axis, order=order) * keras.ops.convert_to_tensor(w),
        lambda v: np_normalize(v, nax, order) * w,
        y,
    )


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", [1, 2, 3])
def test_l2_normalize_zero_vector_gradient_exactly_zero(order, mode, dtype):
    out, (g,) = vjp(
        lambda a: ops.l2_normalize(a, order=order),
        [cast_tensor(np.zeros((2, 3)), dtype)],
        mode=mode,
    )
    np.testing.assert_array_equal(out, 0)
    np.testing.assert_array_equal(g, 0)


@pytest.mark.parametrize("order", _float64_params([(1,), (2,), (3,)]))
def test_l2_normalize_epsilon_matches_keras_formula(order):
    """x / max(||x||, eps): norms above eps are unit, below are shrunk."""
    eps = 1e-3
    x = np.array([[3.0, -4.0, 1.0], [3e-5, 4e-5, 0.0], [1e-3, 2e-3, -2e-3], [0.0, 0.0, 0.0]])
    out, (g,) = vjp_all_modes(
        lambda a: ops.l2_normalize(a, order=order, epsilon=eps), [cast_tensor(x)]
    )
    assert_close(out, np_normalize(round_to(x, "float32"), -1, order, eps))
    assert_finite(g, "gradient with epsilon")
    # The zero vector: x / eps near 0, so the gradient is 1/eps (finite).
    np.testing.assert_allclose(g[3], 1 / eps, rtol=1e-6)
    # And keras.ops.normalize itself, where its value is defined.
    theirs = keras.ops.convert_to_numpy(
        keras.ops.normalize(cast_tensor(x[:3]), order=order, epsilon=eps)
    )
    assert_close(out[:3], theirs, tol=(1e-5, 1e-7))
    # Gradients at smooth points of both regimes.
    w = np.array([[0.3, -1.0, 2.0], [1.5, 0.5, -0.7], [1.0, 1.0, 1.0]])
    y = np.array([[3.0, -4.0, 1.0], [3e-4, -4e-4, 1e-4], [0.2, 0.5, -0.4]])
    _fd_check(
        lambda a: ops.l2_normalize(a, order=order, epsilon=eps) * keras.ops.convert_to_tensor(w),
        lambda v: np_normalize(v, -1, order, eps) * w,
        y,
        rtol=1e-5,
        atol=1e-6,
    )


def test_l2_normalize_epsilon_zero_and_default():
    x = np.array([[3e-9, 4e-9], [0.0, 0.0]])
    for eps in (None, 0.0, 0):
        out, (g,) = vjp(lambda a, eps=eps: ops.l2_normalize(a, epsilon=eps), [cast_tensor(x)])
        assert_close(out, [[0.6, 0.8], [0.0, 0.0]])
        np.testing.assert_array_equal(g[1], 0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("order", [1, 2, 3])
def test_l2_normalize_orders_half_precision(order, dtype):
    x = np.array([[300.0, 300.0, 300.0, 300.0], [0.0] * 4, [1e-3, 0.0, -2e-3, 0.5]])
    out, (g,) = vjp_all_modes(
        lambda a: ops.l2_normalize(a, order=order), [cast_tensor(x, dtype)], dtype=dtype
    )
    assert_close(out, round_to(np_normalize(round_to(x, dtype), -1, order), dtype), dtype)
    assert_finite(g, f"order={order} gradient in {dtype}")
    np.testing.assert_array_equal(g[1], 0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"order": 0}, r"`order` must be an int >= 1"),
        ({"order": -1}, r"`order` must be an int >= 1"),
        ({"order": 2.5}, r"`order` must be an int >= 1"),
        ({"order": "a"}, r"`order` must be an int >= 1"),
        ({"order": True}, r"`order` must be an int >= 1"),
        ({"order": 1, "axis": (0, 1)}, r"`order`=1 over 2 axes is a matrix norm"),
        ({"order": 3, "axis": None}, r"`order`=3 over 2 axes"),
        ({"epsilon": -1e-7}, r"`epsilon` must be None or a float >= 0"),
        ({"epsilon": "1e-7"}, r"`epsilon` must be None or a float >= 0"),
        ({"axis": (0, 0)}, r"`axis`.*repeats"),
    ],
)
def test_l2_normalize_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ops.l2_normalize(np.ones((2, 3), "float32"), **kwargs)
