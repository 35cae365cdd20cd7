"""PyTorch: torch's own fused cross-entropies against the portable formulation.

`sparse_softmax_cross_entropy` and `sigmoid_cross_entropy` (from logits)
run `torch.nn.functional.cross_entropy` and
`binary_cross_entropy_with_logits` where those give the portable
formulation's values (`keras_stable/ops/_kernels/torch/losses.py`:
`native_sparse_cross_entropy`, `native_sigmoid_cross_entropy`), and the
portable formulation elsewhere. Each case of the grid below says which
path it takes (checked on the native function itself), and the public op
is compared with `KERAS_STABLE_PORTABLE=1`, values and gradients, in
float32 and float64, and with the float64 NumPy reference.
"""

import keras
import numpy as np
import pytest

from keras_stable import ops
from tests import reference as ref
from tests import reference_sequences as ref_sequences
from tests.backend_utils import TOLERANCES
from tests.backend_utils import assert_close
from tests.backend_utils import portable
from tests.backend_utils import to_numpy
from tests.backend_utils import vjp

pytestmark = pytest.mark.torch

INF = np.inf
NAN = np.nan
DTYPES = ("float32", "float64")
RNG = np.random.default_rng(11)


def _native():
    from keras_stable.ops._kernels.torch import losses

    return losses


def _spy(monkeypatch, name, record):
    """Replaces torch's op `name` in the table `dispatch.native_op` reads
    (`torch.OPS`) by one that calls `record(args)` first."""
    from keras_stable.ops._kernels import torch as torch_kernels

    real = torch_kernels.OPS[name]
    monkeypatch.setitem(torch_kernels.OPS, name, lambda *a: record(a) or real(*a))


def _tensor(a, dtype):
    return keras.ops.convert_to_tensor(np.asarray(a, dtype))


def _assert_same(fn, args, wrt, dtype, what):
    """The public op (native where it applies) and the portable formulation:
    values and gradients, NaN and inf patterns exactly."""
    out = fn(*args)
    cot = RNG.normal(size=np.shape(to_numpy(out))).astype(dtype)
    fused = vjp(fn, args, wrt=wrt, cotangent=cot)
    with portable():
        portable_ = vjp(fn, args, wrt=wrt, cotangent=cot)
    rtol, atol = TOLERANCES[dtype]
    tol = (4 * rtol, 4 * atol)
    assert_close(fused[0], portable_[0], dtype, f"{what} value", tol)
    for i, (g, r) in enumerate(zip(fused[1], portable_[1])):
        assert_close(g, r, dtype, f"{what} gradient {i}", tol)
    return fused


# --------------------------------------------------------------------------
# Sparse softmax cross-entropy. Each case: (labels, logits, axis,
# ignore_class, native): `native` whether torch's cross_entropy applies.

LOGITS = np.array(
    [
        [2.0, -1.0, 0.0, 1.0],
        [0.0, 0.0, 0.0, 0.0],
        [0.5, -0.25, 2.0, -1.0],
    ]
)
LARGE = np.array(
    [
        [1e4, -1e4, 3.0, 0.0],
        [1000.0, 999.0, 0.0, -1000.0],
        [-3e4, -3e4, -3e4, -3e4 + 1.0],
    ]
)
NEG_INF_ROWS = np.array(
    [
        [2.0, -INF, 0.0, 1.0],
        [-INF, -INF, -INF, -INF],
        [0.5, -0.25, 2.0, -1.0],
    ]
)
SPARSE_CASES = {
    "finite": ([0, 3, 2], LOGITS, -1, None, True),
    "large": ([1, 0, 3], LARGE, -1, None, True),
    "ignore_class=-1": ([0, -1, 2], LOGITS, -1, -1, True),
    "ignore_class in range": ([2, 1, 2], LOGITS, -1, 2, True),
    "class axis 0": ([[0, 2], [3, 1]], np.stack([LOGITS[:2].T, LARGE[:2].T], -1), 0, None, True),
    "-inf logits": ([0, 1, 2], NEG_INF_ROWS, -1, None, False),
    "label on a -inf class": ([1, 0, 2], NEG_INF_ROWS, -1, None, False),
    "+inf logit": ([0, 1, 2], np.where(np.eye(3, 4) > 0, INF, LOGITS), -1, None, False),
    "NaN logit": ([0, 1, 2], np.where(np.eye(3, 4) > 0, NAN, LOGITS), -1, None, False),
    "label out of range": ([0, 4, 2], LOGITS, -1, None, False),
    "negative label": ([0, -3, 2], LOGITS, -1, None, False),
    "out of range next to ignore_class": ([0, -1, 7], LOGITS, -1, -1, False),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", list(SPARSE_CASES))
def test_native_sparse_cross_entropy_matches_the_portable_formulation(case, dtype):
    labels, logits, axis, ignore_class, native = SPARSE_CASES[case]
    labels = _tensor(labels, "int32")
    logits = _tensor(logits, dtype)
    direct = _native().native_sparse_cross_entropy(labels, logits, axis, ignore_class)
    assert (direct is not None) == native, f"{case}: native path taken: {direct is not None}"

    def fn(labels, logits):
        return ops.sparse_softmax_cross_entropy(
            labels, logits, axis=axis, ignore_class=ignore_class
        )

    out, _ = _assert_same(fn, [labels, logits], (1,), dtype, case)
    if not np.all(np.isfinite(to_numpy(logits)) | (to_numpy(logits) == -INF)):
        return  # +inf or NaN: NaN in both formulations, +inf in the reference
    with np.errstate(invalid="ignore"):
        expected = ref.sparse_softmax_cross_entropy(
            to_numpy(labels), to_numpy(logits), axis=axis, ignore_class=ignore_class
        )
    assert_close(out, expected, dtype, f"{case} value vs float64")
    if native:
        assert_close(to_numpy(direct), expected, dtype, f"{case} native value vs float64")


@pytest.mark.parametrize("dtype", DTYPES)
def test_native_sparse_cross_entropy_gradient_is_softmax_minus_onehot(dtype):
    """The native gradient against the closed form in float64, an ignored
    example included (zero gradient)."""
    labels = np.array([0, -1, 2])
    logits = np.concatenate([LOGITS[:1], LARGE[1:2], LOGITS[2:]])
    out, (grad,) = vjp(
        lambda t, x: ops.sparse_softmax_cross_entropy(t, x, ignore_class=-1),
        [_tensor(labels, "int32"), _tensor(logits, dtype)],
        wrt=(1,),
    )
    probs = ref.softmax(logits)
    expected = probs - np.eye(4)[np.maximum(labels, 0)]
    expected[labels == -1] = 0.0
    assert_close(grad, expected, dtype, "gradient vs float64")


def test_native_sparse_cross_entropy_declines_what_it_does_not_cover():
    """Half precision (computed in float32 by the op, so the op itself
    still reaches the native path) and a 0-d input are declined."""
    native = _native().native_sparse_cross_entropy
    labels = _tensor([0, 1, 2], "int32")
    assert native(labels, _tensor(LOGITS, "float16"), -1, None) is None
    assert native(_tensor(0, "int32"), _tensor(1.0, "float32"), 0, None) is None
    assert native(labels, _tensor(LOGITS, "float32"), -1, None) is not None


@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
def test_sparse_cross_entropy_in_half_precision_matches_the_portable_formulation(dtype):
    labels = _tensor([0, 3, 2], "int32")
    logits = keras.ops.cast(_tensor(LOGITS, "float32"), dtype)
    fn = ops.sparse_softmax_cross_entropy
    fused = vjp(fn, [labels, logits], wrt=(1,))
    with portable():
        reference = vjp(fn, [labels, logits], wrt=(1,))
    assert_close(fused[0], reference[0], dtype, "value")
    assert_close(fused[1][0], reference[1][0], dtype, "gradient")


def test_sparse_cross_entropy_with_a_mask_takes_the_portable_formulation(monkeypatch):
    """A mask on the classes is not torch's: the native op is not called."""
    calls = []
    _spy(monkeypatch, "sparse_cross_entropy", calls.append)
    labels, logits = _tensor([0, 3, 2], "int32"), _tensor(LOGITS, "float32")
    mask = np.array([[True, True, False, True]] * 3)

    def fn(labels, logits):
        return ops.sparse_softmax_cross_entropy(labels, logits, mask=mask)

    _assert_same(fn, [labels, logits], (1,), "float32", "masked")
    assert not calls
    ops.sparse_softmax_cross_entropy(labels, logits)
    assert len(calls) == 1


# --------------------------------------------------------------------------
# Sigmoid cross-entropy from logits: (labels, logits, native).

SIGMOID_LABELS = np.array([[0.0, 1.0, 0.25, 1.0], [1.0, 0.0, 0.5, 0.0]])
SIGMOID_CASES = {
    "finite": (SIGMOID_LABELS, [[-2.0, 0.5, 3.0, -0.25], [1.0, -1.0, 0.0, 7.0]], True),
    "zero logits": (SIGMOID_LABELS, np.zeros((2, 4)), True),
    "large": (SIGMOID_LABELS, [[1e4, -1e4, 100.0, -100.0], [3e4, 80.0, -80.0, -3e4]], True),
    "-inf logit": (SIGMOID_LABELS, [[-INF, 0.5, 3.0, -0.25], [1.0, -1.0, 0.0, 7.0]], False),
    "+inf logit": (SIGMOID_LABELS, [[INF, 0.5, 3.0, -0.25], [1.0, -1.0, 0.0, INF]], False),
    "NaN logit": (SIGMOID_LABELS, [[NAN, 0.5, 3.0, -0.25], [1.0, -1.0, 0.0, 7.0]], False),
}


def _compute_dtype(dtype):
    """The dtype `sigmoid_cross_entropy` computes in: Keras's `result_type`
    of float64 inputs is float32 on PyTorch (`common.dtypes.compute_dtype_of`),
    so float64 inputs are computed, and compared, in float32 there."""
    return keras.backend.result_type(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", list(SIGMOID_CASES))
def test_native_sigmoid_cross_entropy_matches_the_portable_formulation(case, dtype):
    labels, logits, native = SIGMOID_CASES[case]
    labels, logits = _tensor(labels, dtype), _tensor(logits, dtype)
    compute = _compute_dtype(dtype)
    out, _ = _assert_same(ops.sigmoid_cross_entropy, [labels, logits], (0, 1), compute, case)
    x, y = to_numpy(logits), to_numpy(labels)
    with np.errstate(invalid="ignore"):
        expected = ref.sigmoid_cross_entropy(y, x)
    assert_close(out, expected, compute, f"{case} value vs float64")
    # The native op itself, in the dtype of its inputs (float64 included).
    direct = _native().native_sigmoid_cross_entropy(labels, logits)
    assert (direct is not None) == native, f"{case}: native path taken: {direct is not None}"
    if not native:
        return
    assert_close(to_numpy(direct), expected, dtype, f"{case} native value vs float64")
    # Its gradients, in torch: d/dx = sigmoid(x) - y (0.5 - y at 0), d/dy = -x.
    wrt = [t.detach().clone().requires_grad_(True) for t in (labels, logits)]
    total = _native().native_sigmoid_cross_entropy(*wrt).sum()
    d_labels, d_logits = (to_numpy(g) for g in torch_grad(total, wrt))
    sigmoid = 0.5 * (1.0 + np.tanh(0.5 * x))
    assert_close(d_logits, sigmoid - y, dtype, f"{case} native logit gradient vs float64")
    assert_close(d_labels, -x, dtype, f"{case} native label gradient vs float64")
    # Through the public op (computed in `compute`): the same gradients.
    _, (d_labels, d_logits) = vjp(ops.sigmoid_cross_entropy, [labels, logits], (0, 1))
    assert_close(d_logits, sigmoid - y, compute, f"{case} logit gradient vs float64")
    assert_close(d_labels, -x, compute, f"{case} label gradient vs float64")


@pytest.mark.parametrize("dtype", DTYPES)
def test_native_sigmoid_cross_entropy_is_exact_for_confident_logits(dtype):
    """Label 0 with logit -30 is `log1p(exp(-30))` = 9.4e-14, not round-off
    (torch's `binary_cross_entropy_with_logits` gives `(1 - y) x -
    log_sigmoid(x)`, a cancellation): relative error of float32 round-off."""
    labels = np.array([0.0, 1.0, 0.0, 1.0, 0.0])
    logits = np.array([-30.0, 30.0, -17.0, 25.0, -80.0])
    expected = ref.sigmoid_cross_entropy(labels, logits)
    direct = _native().native_sigmoid_cross_entropy(_tensor(labels, dtype), _tensor(logits, dtype))
    assert direct is not None
    np.testing.assert_allclose(to_numpy(direct), expected, rtol=1e-6, atol=0)
    out = ops.sigmoid_cross_entropy(_tensor(labels, dtype), _tensor(logits, dtype))
    np.testing.assert_allclose(to_numpy(out), expected, rtol=1e-6, atol=0)


def torch_grad(total, wrt):
    import torch

    return torch.autograd.grad(total, wrt)


def test_native_sigmoid_cross_entropy_declines_what_it_does_not_cover():
    """Half precision and labels of another dtype than the logits."""
    native = _native().native_sigmoid_cross_entropy
    labels, logits = SIGMOID_CASES["finite"][:2]
    assert native(_tensor(labels, "float16"), _tensor(logits, "float16")) is None
    assert native(_tensor(labels, "float64"), _tensor(logits, "float32")) is None
    assert native(_tensor(labels, "float32"), _tensor(logits, "float32")) is not None


@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
def test_sigmoid_cross_entropy_in_half_precision_matches_the_portable_formulation(dtype):
    labels, logits = SIGMOID_CASES["large"][:2]
    args = [keras.ops.cast(_tensor(a, "float32"), dtype) for a in (labels, logits)]
    fused = vjp(ops.sigmoid_cross_entropy, args, wrt=(0, 1))
    with portable():
        reference = vjp(ops.sigmoid_cross_entropy, args, wrt=(0, 1))
    assert_close(fused[0], reference[0], dtype, "value")
    for g, r in zip(fused[1], reference[1]):
        assert_close(g, r, dtype, "gradient")


# --------------------------------------------------------------------------
# CTC. Each case: (target, logits, target_length, output_length,
# mask_index, native): `native` whether torch's ctc_loss applies. The
# batches mix feasible samples with repeats, empty labels, lengths shorter
# than the padding and infeasible samples (too long, or `[1, 1]` in too few
# frames), so the feasibility rule applied after torch's zero_infinity is
# checked too.


def _ctc_batch(logit_scale, seed=5):
    rng = np.random.default_rng(seed)
    target = np.array(
        [[1, 2, 3, 0], [2, 2, 0, 0], [1, 1, 1, 1], [3, 1, 2, 1], [0, 0, 0, 0], [1, 2, 1, 2]]
    )
    target_length = np.array([3, 2, 4, 4, 0, 4])
    output_length = np.array([6, 3, 6, 2, 5, 0])
    logits = logit_scale * rng.normal(size=(6, 6, 5))
    return target, logits, target_length, output_length


CTC_CASES = {
    "ordinary": (*_ctc_batch(1.0), 0, True),
    "logits of 1e3": (*_ctc_batch(1e3), 0, True),
    "blank last": (*_ctc_batch(2.0), 4, True),
    "padding past the lengths holds the blank": (
        np.array([[1, 2, 0], [3, 4, 4]]),
        RNG.normal(size=(2, 5, 5)),
        np.array([2, 1]),
        np.array([5, 4]),
        4,
        True,
    ),
    "a label within its length is the blank": (
        np.array([[1, 0, 2]]),
        RNG.normal(size=(1, 6, 4)),
        np.array([3]),
        np.array([6]),
        0,
        False,
    ),
    "logits of 1e7": (*_ctc_batch(1e7), 0, False),
    "a -inf logit": (
        np.array([[1, 2]]),
        np.where(np.eye(4, 3)[None] > 0, -INF, RNG.normal(size=(1, 4, 3))),
        np.array([2]),
        np.array([4]),
        0,
        False,
    ),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", list(CTC_CASES))
def test_native_ctc_loss_matches_the_portable_formulation(case, dtype):
    target, logits, target_length, output_length, mask_index, native = CTC_CASES[case]
    args = [
        _tensor(target, "int32"),
        _tensor(logits, dtype),
        _tensor(target_length, "int32"),
        _tensor(output_length, "int32"),
    ]
    direct = _native().native_ctc_loss(*args, mask_index)
    assert (direct is not None) == native, f"{case}: native path taken: {direct is not None}"
    for zero_infinity in (True, False):

        def fn(logits, zero_infinity=zero_infinity):
            return ops.ctc_loss(
                args[0], logits, args[2], args[3], mask_index, zero_infinity=zero_infinity
            )

        what = f"{case}, {zero_infinity=}"
        cot = RNG.normal(size=(len(target),))
        out, (grad,) = vjp(fn, [args[1]], wrt=(0,), cotangent=cot.astype(dtype))
        assert np.all(np.isfinite(to_numpy(grad)))
        assert np.all(to_numpy(out) >= 0)
        if not native:  # declined: the portable formulation ran (test_ctc.py)
            continue
        with portable():
            portable_out, (portable_grad,) = vjp(
                fn, [args[1]], wrt=(0,), cotangent=cot.astype(dtype)
            )
        # Both formulations compute in float32 (float64 logits too: see
        # `compute_dtype_of`), so each is held to test_ctc.py's float32
        # bound against the float64 reference: T ulp(|logit|) of absolute
        # error in the gradient is in the float32 problem itself.
        expected, expected_grad = ref_sequences.ctc_loss(
            target,
            logits.astype("float32"),
            target_length,
            output_length,
            mask_index,
            zero_infinity,
        )
        expected_grad = expected_grad * cot[:, None, None]
        finite = np.isfinite(logits)
        ulp = float(np.spacing(np.float32(np.max(np.abs(logits[finite])))))
        tol = (1e-5, max(1e-6, logits.shape[1] * ulp) * np.max(np.abs(cot)))
        for name, (v, g) in {"op": (out, grad), "portable": (portable_out, portable_grad)}.items():
            assert_close(v, expected, "float32", f"{what}: {name} value", (1e-5, 1e-5))
            assert_close(g, expected_grad, "float32", f"{what}: {name} gradient", tol)


def test_stable_ctc_takes_torch_ctc_with_and_without_a_mask(monkeypatch):
    """`StableCTC` reaches torch's CTC on unmasked logits, and with a Keras
    mask on the frames (not a prefix: every other frame), through the
    marked frames gathered to the front; values and gradients are the
    portable formulation's."""
    from keras_stable import losses
    from keras_stable.ops._kernels import torch as torch_kernels

    calls = []
    native = _native().native_ctc_loss

    def spy(*args):
        calls.append(1)
        return native(*args)

    # torch's CTC, reached from the table `dispatch.native_op` reads or (the
    # marked frames gathered first) from `native_ctc_loss_over_frames`.
    monkeypatch.setitem(torch_kernels.OPS, "ctc_loss", spy)
    monkeypatch.setattr(_native(), "native_ctc_loss", spy)
    target, logits, _, _ = _ctc_batch(1.0)
    target = np.where(np.arange(4) < np.array([3, 2, 4, 4, 0, 4])[:, None], target, 0)
    loss = losses.StableCTC(reduction="none")
    mask = np.tile(np.arange(6) % 2 == 0, (6, 1))
    mask[0] = [True, False, True, True, False, True]  # [1, 2, 3] in 4 frames

    def run(with_mask):
        def fn(x):
            if with_mask:
                x = x * 1.0  # a fresh tensor to carry the mask
                x._keras_mask = _tensor(mask, "bool")
            return loss(_tensor(target, "int32"), x)

        return vjp(fn, [_tensor(logits, "float32")], wrt=(0,), cotangent=np.arange(1.0, 7.0))

    for with_mask in (False, True):
        calls.clear()
        value, (grad,) = run(with_mask)
        assert calls == [1], with_mask
        with portable():
            expected, (expected_grad,) = run(with_mask)
        assert_close(value, expected, "float32", f"{with_mask=}: value")
        assert_close(grad, expected_grad, "float32", f"{with_mask=}: gradient")
    assert value[0] > 0 and np.all(grad[0, ~mask[0]] == 0.0)


def test_the_tables_name_every_native_the_kernels_ask_for():
    """`dispatch.native_pass` and `dispatch.native_op` read the tables of
    the torch sub-package by name: every name the package asks for is in
    its table, and every entry is asked for (no dead native)."""
    import pathlib
    import re

    from keras_stable.ops._kernels import torch as torch_kernels

    package = pathlib.Path(ops.__file__).parent
    source = "\n".join(p.read_text() for p in package.rglob("*.py"))
    for function, table in (
        ("native_pass", torch_kernels.PASSES),
        ("native_op", torch_kernels.OPS),
    ):
        asked = set(re.findall(function + r'\(\s*"(\w+)"', source))
        assert asked == set(table), (function, asked ^ set(table))
