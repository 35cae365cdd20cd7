"""`linear_softmax_cross_entropy`'s options — a tied `(vocab, dim)` kernel
(`transpose_kernel`), `label_smoothing`, `z_loss`, `logit_soft_cap` — alone
and combined: the float64 materialised loss, gradients equal to autodiff of
the materialised float32 computation and to float64 central differences,
ignored tokens, chunks that divide neither tokens nor vocabulary, three
dtypes, eager and compiled."""

import itertools

import keras
import numpy as np
import pytest

from keras_stable import ops
from tests.backend_utils import MODES
from tests.backend_utils import assert_close
from tests.backend_utils import assert_finite
from tests.backend_utils import to_numpy
from tests.backend_utils import vjp
from tests.backend_utils import vjp_all_modes

IGNORE = -100
SHAPE, DIM, VOCAB = (3, 5), 6, 41  # 15 tokens, a prime vocabulary


def _problem(seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    hidden = (scale * rng.normal(size=SHAPE + (DIM,))).astype("float32")
    kernel = rng.normal(size=(DIM, VOCAB)).astype("float32")
    bias = rng.normal(size=(VOCAB,)).astype("float32")
    labels = rng.integers(0, VOCAB, SHAPE).astype("int32")
    labels.reshape(-1)[[2, 11]] = IGNORE
    return hidden, kernel, bias, labels


def reference(hidden, kernel, bias, labels, smoothing=0.0, z_loss=0.0, cap=None):
    """float64 NumPy, materialised: the `(dim, vocab)` kernel's logits."""
    logits = hidden.astype("float64") @ kernel.astype("float64") + bias.astype("float64")
    if cap is not None:
        logits = cap * np.tanh(logits / cap)
    m = logits.max(-1, keepdims=True)
    lse = (m + np.log(np.exp(logits - m).sum(-1, keepdims=True)))[..., 0]
    safe = np.where(labels == IGNORE, 0, labels)
    picked = np.take_along_axis(logits, safe[..., None], -1)[..., 0]
    loss = lse + z_loss * lse**2
    if smoothing < 1:  # (no 0 * -inf for a removed class)
        loss = loss - (1 - smoothing) * picked
    if smoothing > 0:
        loss = loss - smoothing * logits.mean(-1)
    return np.where(labels == IGNORE, 0.0, loss)


def materialised(labels, transpose, smoothing, z_loss, cap):
    """The same loss by autodiff of the `[tokens, vocab]` logits (float32)."""

    def fn(h, w, b):
        logits = keras.ops.matmul(h, keras.ops.transpose(w) if transpose else w) + b
        if cap is not None:
            logits = cap * keras.ops.tanh(logits / cap)
        lse = keras.ops.logsumexp(logits, axis=-1)
        safe = keras.ops.where(labels == IGNORE, 0, labels)
        target = (1 - smoothing) * keras.ops.one_hot(safe, VOCAB) + smoothing / VOCAB
        loss = lse - keras.ops.sum(target * logits, axis=-1) + z_loss * lse**2
        return keras.ops.where(labels == IGNORE, 0.0, loss)

    return fn


OPTIONS = {
    "transpose": [False, True],
    "smoothing": [0.0, 0.1, 1.0],
    "z_loss": [0.0, 1e-3],
    "cap": [None, 2.5],
}
COMBINATIONS = [dict(zip(OPTIONS, v)) for v in itertools.product(*OPTIONS.values())]


def _call(labels, transpose, smoothing, z_loss, cap, chunk_size):
    def fn(h, w, b):
        return ops.linear_softmax_cross_entropy(
            h,
            w,
            labels,
            b,
            chunk_size=chunk_size,
            ignore_class=IGNORE,
            transpose_kernel=transpose,
            label_smoothing=smoothing,
            z_loss=z_loss,
            logit_soft_cap=cap,
        )

    return fn


@pytest.mark.parametrize("options", COMBINATIONS, ids=lambda o: "-".join(map(str, o.values())))
def test_every_combination_matches_the_materialised_head(options):
    """All 24 combinations, chunk 7 (divides neither 41 nor 15), eager and
    compiled: the value against float64, the three gradients against autodiff
    of the materialised logits; ignored tokens give 0 and no gradient."""
    hidden, kernel, bias, labels = _problem()
    if options["transpose"]:
        kernel_in = np.ascontiguousarray(kernel.T)
    else:
        kernel_in = kernel
    cot = np.random.default_rng(1).normal(size=SHAPE).astype("float32")
    fused = _call(labels, chunk_size=7, **options)
    out, grads = vjp_all_modes(fused, [hidden, kernel_in, bias], wrt=(0, 1, 2), cotangent=cot)
    smoothing, z_loss, cap = options["smoothing"], options["z_loss"], options["cap"]
    assert_close(out, reference(hidden, kernel, bias, labels, smoothing, z_loss, cap))
    ref_out, ref_grads = vjp(
        materialised(labels, **options), [hidden, kernel_in, bias], wrt=(0, 1, 2), cotangent=cot
    )
    assert_close(out, ref_out, what="value vs materialised")
    for name, g, r in zip(("hidden", "kernel", "bias"), grads, ref_grads):
        assert g.shape == r.shape, name
        assert_close(g, r, what=f"d{name} vs materialised", tol=(2e-5, 2e-6))
    ignored = (labels == IGNORE).reshape(-1)
    assert np.all(grads[0].reshape(-1, DIM)[ignored] == 0), "ignored tokens' gradient"


@pytest.mark.parametrize("options", [COMBINATIONS[0], COMBINATIONS[-1], COMBINATIONS[13]])
def test_gradient_equals_float64_central_differences(options):
    """Independent of any autodiff: `<grad, v>` against the float64
    reference's `(f(x + t v) - f(x - t v)) / 2t`, for hidden, kernel, bias."""
    hidden, kernel, bias, labels = _problem(seed=3)
    kernel_in = np.ascontiguousarray(kernel.T) if options["transpose"] else kernel
    fused = _call(labels, chunk_size=9, **options)
    _, grads = vjp(fused, [hidden, kernel_in, bias], wrt=(0, 1, 2))
    rng = np.random.default_rng(4)
    smoothing, z_loss, cap = options["smoothing"], options["z_loss"], options["cap"]
    args = [hidden.astype("float64"), kernel.astype("float64"), bias.astype("float64")]
    for i, g in enumerate(grads):
        if i == 1 and options["transpose"]:
            g = g.T
        v = rng.normal(size=args[i].shape)
        t = 1e-6

        def f(step):
            moved = list(args)
            moved[i] = args[i] + step * v
            return reference(*moved, labels, smoothing, z_loss, cap).sum()

        numeric = (f(t) - f(-t)) / (2 * t)
        np.testing.assert_allclose(np.sum(g * v), numeric, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_three_dtypes_with_every_option(dtype):
    """Half-precision hidden states and kernel: float32 accumulation, the
    float64 value of the rounded inputs, finite gradients in the input dtype."""
    hidden, kernel, bias, labels = _problem()
    h, w = keras.ops.cast(hidden, dtype), keras.ops.cast(kernel.T.copy(), dtype)
    for mode in MODES:
        out, grads = vjp(
            _call(labels, True, 0.1, 1e-3, 2.5, chunk_size=16), [h, w, bias], wrt=(0, 1), mode=mode
        )
        exact_h, exact_w = to_numpy(h), to_numpy(w).T
        assert_close(
            out, reference(exact_h, exact_w, bias, labels, 0.1, 1e-3, 2.5), tol=(1e-5, 1e-5)
        )
        for g in grads:
            assert_finite(g, mode)


def test_soft_cap_far_out_has_an_exactly_vanishing_gradient():
    """Logits of 1e4 under a cap of 1: the capped logits saturate at ±1,
    the loss is that of ±1 logits, and their gradient through `tanh` is
    exactly 0 where `1 / cosh**2` underflows — never NaN."""
    hidden, kernel, bias, labels = _problem(scale=1e4)
    for mode in MODES:
        out, grads = vjp(
            _call(labels, False, 0.0, 0.0, 1.0, chunk_size=8),
            [hidden, kernel, bias],
            wrt=(0, 1, 2),
            mode=mode,
        )
        assert_close(out, reference(hidden, kernel, bias, labels, cap=1.0))
        for g in grads:
            assert_finite(g, mode)


def test_z_loss_and_smoothing_with_a_removed_class():
    """A `-inf` bias entry: z-loss keeps the class removed (finite loss);
    label smoothing puts mass on it, so the loss is +inf as in Keras's
    smoothed cross-entropy; gradients finite either way; a soft cap turns
    `-inf` into `-cap` (an ordinary class)."""
    hidden, kernel, bias, labels = _problem()
    labels = np.where(labels == 4, 5, labels)
    bias[4] = -np.inf
    counted = labels != IGNORE
    out, grads = vjp(_call(labels, False, 0.0, 1e-2, None, 8), [hidden, kernel, bias], wrt=(0, 1))
    assert_close(out, reference(hidden, kernel, bias, labels, z_loss=1e-2))
    smoothed, sgrads = vjp(
        _call(labels, False, 0.2, 0.0, None, 8), [hidden, kernel, bias], wrt=(0, 1)
    )
    assert np.all(smoothed[counted] == np.inf) and np.all(smoothed[~counted] == 0)
    capped = to_numpy(_call(labels, False, 0.2, 0.0, 3.0, 8)(hidden, kernel, bias))
    assert_close(capped, reference(hidden, kernel, bias, labels, 0.2, cap=3.0))
    for g in grads + sgrads:
        assert_finite(g)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"label_smoothing": 1.5}, r"`label_smoothing` must be in \[0, 1\]"),
        ({"label_smoothing": -0.1}, r"`label_smoothing`"),
        ({"z_loss": -1e-4}, r"`z_loss` must be a finite number >= 0"),
        ({"logit_soft_cap": 0.0}, r"`logit_soft_cap` must be a finite number > 0"),
        ({"logit_soft_cap": -3.0}, r"`logit_soft_cap`"),
        ({"transpose_kernel": "yes"}, r"`transpose_kernel` must be a bool"),
        ({"transpose_kernel": True}, r"kernel's second \(transpose_kernel=True\) \(7\)"),
    ],
)
def test_bad_options_name_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ops.linear_softmax_cross_entropy(
            np.ones((3, 5), "float32"),
            np.ones((5, 7), "float32"),
            np.zeros((3,), "int32"),
            **kwargs,
        )


def test_transposed_layout_gives_the_plain_layouts_numbers():
    """The `(vocab, dim)` layout gives the same numbers as its transpose in
    the `(dim, vocab)` layout, and its bias must match the vocabulary axis.
    (That no transposed copy of the kernel is made is a property of the
    code — row slices, einsums — not something this test can observe.)"""
    hidden, kernel, bias, labels = _problem()
    plain = _call(labels, False, 0.0, 0.0, None, 10)(hidden, kernel, bias)
    tied = _call(labels, True, 0.0, 0.0, None, 10)(hidden, kernel.T.copy(), bias)
    assert_close(to_numpy(tied), to_numpy(plain))  # the matmul may sum in another order
    with pytest.raises(ValueError, match=r"`bias` of shape \(6,\).*expected \(41,\)"):
        ops.linear_softmax_cross_entropy(
            hidden, kernel.T.copy(), labels, bias[:6], transpose_kernel=True
        )
