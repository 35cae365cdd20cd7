"""`dot_product_attention`: Keras's numbers wherever a query row has a key to
attend to (MHA, GQA, MQA, masks, bias, causal with `T != S`, scale, soft
cap), 0 and exactly zero gradients for a row with none, half precision
computed in float32, and ValueErrors for bad shapes."""

import inspect

import keras
import numpy as np
import pytest

from keras_stable import ops
from tests import reference
from tests.backend_utils import BACKEND
from tests.backend_utils import MODES
from tests.backend_utils import assert_close
from tests.backend_utils import assert_finite
from tests.backend_utils import float64_enabled
from tests.backend_utils import vjp
from tests.backend_utils import vjp_all_modes

RNG = np.random.default_rng(0)


def _qkv(b=2, t=5, s=7, n=4, kv=2, h=8, scale=1.0, dtype="float32", rng=RNG):
    q = (rng.normal(size=(b, t, n, h)) * scale).astype(dtype)
    k = (rng.normal(size=(b, s, kv, h)) * scale).astype(dtype)
    v = rng.normal(size=(b, s, kv, h)).astype(dtype)
    return q, k, v


def _mask(shape, keep_first=True):
    """A random padding-style mask; key 0 always attends (no empty row)."""
    m = RNG.uniform(size=shape) > 0.4
    if keep_first:
        m[..., 0] = True
    return m


def _attention(**kw):
    def fn(q, k, v, *rest):
        extra = dict(kw)
        if rest:
            extra["bias"] = rest[0]
        return ops.dot_product_attention(q, k, v, **extra)

    return fn


def _keras_attention(**kw):
    def fn(q, k, v, *rest):
        extra = dict(kw)
        if rest:
            extra["bias"] = rest[0]
        return keras.ops.dot_product_attention(q, k, v, **extra)

    return fn


# name -> (shape kwargs for _qkv, op kwargs, bias shape or None)
CASES = {
    "mha": (dict(n=4, kv=4), {}, None),
    "gqa": (dict(n=4, kv=2), {}, None),
    "mqa": (dict(n=4, kv=1), {}, None),
    "padding_mask": (dict(), {"mask": _mask((2, 1, 1, 7))}, None),
    "full_mask": (dict(), {"mask": _mask((2, 4, 5, 7))}, None),
    "mask_2d": (dict(), {"mask": _mask((5, 7))}, None),
    "bias_per_head": (dict(), {}, (1, 4, 5, 7)),
    "bias_2d": (dict(), {}, (5, 7)),
    "causal": (dict(t=6, s=6), {"is_causal": True}, None),
    "causal_t_lt_s": (dict(t=4, s=7), {"is_causal": True}, None),
    "causal_t_gt_s": (dict(t=7, s=4), {"is_causal": True}, None),
    "causal_and_mask": (dict(t=6, s=6), {"is_causal": True, "mask": _mask((2, 1, 1, 6))}, None),
    "scale": (dict(), {"scale": 0.3}, None),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_float64_reference_and_keras(name):
    """Values against float64 NumPy, values and gradients (query, key,
    value, bias) against `keras.ops.dot_product_attention`, eager and
    compiled."""
    shape, kw, bias_shape = CASES[name]
    q, k, v = _qkv(**shape)
    args = [q, k, v]
    wrt = (0, 1, 2)
    if bias_shape is not None:
        args.append(RNG.normal(size=bias_shape).astype("float32"))
        wrt = (0, 1, 2, 3)
    cot = RNG.normal(size=q.shape).astype("float32")
    out, grads = vjp_all_modes(_attention(**kw), args, wrt=wrt, cotangent=cot)
    ref = reference.dot_product_attention(*args[:3], bias=args[3] if bias_shape else None, **kw)
    assert_close(out, ref, what="value vs float64")
    # Keras's own op in float64: its gradients, free of float32 rounding.
    with float64_enabled():
        args64 = [np.asarray(a, "float64") for a in args]
        theirs = _keras_attention(**kw)
        if BACKEND == "tensorflow" and shape.get("kv") == 1:
            # Keras's TF path fails on K == 1 (it repeats the heads only for
            # K > 1 and tf.einsum does not broadcast): the plain formulation.
            def theirs(q, k, v):
                return _plain(q, k, v, None, 8**-0.5)

        k_out, k_grads = vjp(theirs, args64, wrt=wrt, cotangent=cot)
    assert_close(out, k_out, what="value vs keras")
    for i, (g, r) in enumerate(zip(grads, k_grads)):
        assert_close(g, r, what=f"gradient {i} vs keras")


def _plain(q, k, v, cap, scale):
    """The textbook formulation with the soft cap (Keras has it only on JAX
    TPU): the gradient reference for the cap."""
    ko = keras.ops
    n, kv = q.shape[2], k.shape[2]
    k = ko.repeat(k, n // kv, axis=2)
    v = ko.repeat(v, n // kv, axis=2)
    logits = ko.einsum("btnh,bsnh->bnts", q, k) * scale
    if cap is not None:
        logits = cap * ko.tanh(logits / cap)
    return ko.einsum("bnts,bsnh->btnh", ko.softmax(logits, axis=-1), v)


def test_soft_cap_matches_reference():
    """Values against float64; gradients across modes and against the plain
    formulation in float64. Gradients compare at float32's 1e-5 relative to
    their own scale: a soft-capped gradient entry that cancels to ~0.007
    next to entries of ~2 carries round-off of ~1.5e-6 (measured over 12
    draws: up to 1.5e-6 of the largest entry, eager or XLA), which the
    elementwise atol of 1e-6 failed for some draws (and with the module's
    RNG, for some test orders)."""
    rng = np.random.default_rng(123)  # this test's draws, whatever ran before
    q, k, v = _qkv(scale=3.0, rng=rng)
    cot = rng.normal(size=q.shape).astype("float32")
    fn = _attention(attn_logits_soft_cap=2.5)
    ref = reference.dot_product_attention(q, k, v, soft_cap=2.5)

    def plain(a, b, c):
        return _plain(a, b, c, 2.5, 8**-0.5)

    # The plain formulation in float64: its float32 run differs from ours by
    # both rounding orders (the scale on the queries or on the logits).
    with float64_enabled():
        args64 = [np.asarray(a, "float64") for a in (q, k, v)]
        _, p_grads = vjp(plain, args64, (0, 1, 2), cot, mode=MODES[0])
    for mode in MODES:
        out, grads = vjp(fn, [q, k, v], (0, 1, 2), cot, mode)
        assert_close(out, ref, what=f"{mode} value vs float64")
        for g, r in zip(grads, p_grads):
            tol = (1e-5, 1e-5 * float(np.max(np.abs(r))))
            assert_close(g, r, what=f"{mode} gradient vs plain formulation (float64)", tol=tol)


def test_float64_gradients_match_finite_differences():
    """GQA, padding mask, causal, bias: the gradient of the float64 path
    against finite differences of the NumPy reference."""
    q, k, v = _qkv(b=1, t=3, s=4, n=2, kv=1, h=2)
    mask = np.array([[[[True, True, False, True]]]])
    bias = RNG.normal(size=(3, 4))

    def ref(x, which):
        args = [q, k, v]
        args[which] = x
        return reference.dot_product_attention(*args, bias=bias, mask=mask, is_causal=True)

    with float64_enabled():
        args = [np.asarray(a, "float64") for a in (q, k, v)]
        fn = _attention(mask=mask, is_causal=True, bias=bias)
        out, grads = vjp(fn, args, wrt=(0, 1, 2))
    np.testing.assert_allclose(out, ref(q, 0), rtol=1e-10, atol=1e-12)
    from tests.backend_utils import finite_difference

    for i, g in enumerate(grads):
        fd = finite_difference(lambda x, i=i: ref(x, i), args[i])
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8, err_msg=f"grad {i}")


# --------------------------------------------------------------------------
# Rows with nothing to attend to
# --------------------------------------------------------------------------


def _empty_row_cases():
    t, s = 6, 6
    mask = _mask((2, 1, t, s))
    mask[0, 0, 2] = False  # one fully masked row
    mask[1, 0, :] = False  # a whole sample masked
    bias = RNG.normal(size=(2, 4, t, s)).astype("float32")
    bias[0, 1, 3] = -np.inf  # a -inf bias row (one head)
    bias[1, 2, :, 1] = -np.inf  # a removed key
    pad = np.ones((2, 1, 1, s), bool)
    pad[0, ..., :2] = False  # left padding: rows 0, 1 see nothing under causal
    pad[1, ..., :4] = False
    return {
        "masked_rows": ({"mask": mask}, None),
        "neg_inf_bias": ({}, bias),
        "left_padding_causal": ({"mask": pad, "is_causal": True}, None),
        "bias_and_mask": ({"mask": mask, "is_causal": True}, bias),
    }


EMPTY = _empty_row_cases()


def _empty_rows(kw, bias, t, s, n=4):
    """(B, N, T) bool: the rows with no allowed key."""
    allowed = np.ones((2, n, t, s), bool)
    if "mask" in kw:
        allowed &= np.broadcast_to(kw["mask"], allowed.shape)
    if bias is not None:
        allowed &= np.broadcast_to(bias != -np.inf, allowed.shape)
    if kw.get("is_causal"):
        allowed &= np.tril(np.ones((t, s), bool))
    return ~allowed.any(-1)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(EMPTY))
def test_empty_rows_give_zero_and_zero_gradients(name, dtype):
    """Output 0 and no contribution to any gradient from an empty row;
    exact values elsewhere; everything finite (Keras: NaN for a -inf bias
    row, the mean of the values for a masked row)."""
    kw, bias = EMPTY[name]
    q, k, v = _qkv(t=6, s=6)
    empty = _empty_rows(kw, bias, 6, 6)  # (B, N, T)
    assert empty.any() and not empty.all()
    cot = RNG.normal(size=q.shape).astype("float32")
    # The same problem with the empty rows' upstream gradient zeroed: an
    # empty row contributes nothing, so every gradient is bit-identical.
    cot_zeroed = cot * ~np.transpose(empty, (0, 2, 1))[..., None]
    args = [x.astype(dtype) for x in (q, k, v)]
    wrt = (0, 1, 2)
    if bias is not None:
        args.append(bias.astype(dtype))
        wrt = (0, 1, 2, 3)
    fn = _attention(**kw)
    out, grads = vjp_all_modes(fn, args, wrt, cot, dtype=dtype)
    _, grads_zeroed = vjp(fn, args, wrt, cot_zeroed, mode=MODES[0])  # the same mode
    assert_finite(out, "value")
    for i, g in enumerate(grads):
        assert_finite(g, f"gradient {i}")
        np.testing.assert_array_equal(g, grads_zeroed[i], err_msg=f"gradient {i}")
    rows = np.transpose(empty, (0, 2, 1))  # (B, T, N)
    assert np.all(out[rows] == 0), "empty rows give 0"
    assert np.all(grads[0][rows] == 0), "empty rows' query gradient is 0"
    if bias is not None:
        assert np.all(grads[3][empty] == 0), "empty rows' bias gradient is 0"
    ref = reference.dot_product_attention(*args[:3], bias=bias, **kw)
    assert_close(out, ref, dtype, what="value vs float64")


def test_every_row_empty_gives_zero_gradients_everywhere():
    q, k, v = _qkv()
    mask = np.zeros((2, 1, 5, 7), bool)
    out, grads = vjp_all_modes(_attention(mask=mask), [q, k, v], (0, 1, 2))
    assert np.all(out == 0)
    for g in grads:
        assert np.all(g == 0)


def test_one_allowed_key_returns_its_value():
    q, k, v = _qkv(n=2, kv=2)
    mask = np.zeros((2, 1, 5, 7), bool)
    mask[..., 3] = True
    out, grads = vjp_all_modes(_attention(mask=mask), [q, k, v], (0, 1, 2))
    np.testing.assert_array_equal(out, np.broadcast_to(v[:, 3:4], out.shape))
    assert np.all(grads[0] == 0) and np.all(grads[1] == 0), "softmax of one entry is constant"


@pytest.mark.parametrize("size", [1000.0, -1000.0])
def test_logits_near_1000(size):
    """Logits of magnitude ~1000: the shift by the row maximum keeps exp in
    range; values and gradients against float64."""
    q, k, v = _qkv(h=4)
    q = np.abs(q) * 0 + 1.0
    k = (np.linspace(0.5, 1.0, 7)[None, :, None, None] * np.ones(k.shape) * size / 2).astype(
        "float32"
    )
    cot = RNG.normal(size=q.shape).astype("float32")
    out, grads = vjp_all_modes(_attention(), [q, k, v], (0, 1, 2), cot)
    assert_close(out, reference.dot_product_attention(q, k, v), what="value vs float64")
    # Gradients against finite differences of the float64 reference: Keras's
    # own (torch) carries round-off of the logits' size there (2**-15 to
    # 2**-13 where the exact gradient is 1e-34), even in float64.
    from tests.backend_utils import finite_difference

    args = [q, k, v]
    for i, g in enumerate(grads):

        def ref(x, i=i):
            xs = [np.asarray(a, "float64") for a in args]
            xs[i] = x
            return reference.dot_product_attention(*xs) * cot

        assert_finite(g)
        assert_close(
            g, finite_difference(ref, args[i]), what=f"gradient {i} vs float64", tol=(1e-5, 1e-6)
        )


def test_float16_logits_above_65504_are_exact():
    """float16 `q . k` of 8e4 overflows a float16 einsum (NaN on Keras's
    TF path); the logits are computed in float32."""
    h = 8
    q = np.full((1, 2, 1, h), 100.0, "float16")
    k = np.full((1, 3, 1, h), 100.0, "float16")
    k[0, 1] = 99.0
    v = RNG.normal(size=(1, 3, 1, h)).astype("float16")
    out, grads = vjp_all_modes(_attention(scale=1.0), [q, k, v], (0, 1, 2), dtype="float16")
    assert keras.backend.standardize_dtype(ops.dot_product_attention(q, k, v).dtype) == "float16"
    assert_finite(out)
    for g in grads:
        assert_finite(g)
    ref = reference.dot_product_attention(q, k, v, scale=1.0)
    assert_close(out, ref, "float16", what="value vs float64")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_inputs_computed_in_float32(dtype):
    q, k, v = (x.astype(dtype) for x in _qkv())
    mask = _mask((2, 1, 1, 7))
    out, grads = vjp_all_modes(
        _attention(mask=mask, is_causal=True), [q, k, v], (0, 1, 2), dtype=dtype
    )
    ref = reference.dot_product_attention(q, k, v, mask=mask, is_causal=True)
    assert_close(out, ref, dtype, what="value vs float64")
    q32, k32, v32 = (np.asarray(x, "float32") for x in (q, k, v))
    _, g32 = vjp(_attention(mask=mask, is_causal=True), [q32, k32, v32], (0, 1, 2))
    for g, r in zip(grads, g32):
        assert_close(g, r, dtype, what="gradient vs float32")


# --------------------------------------------------------------------------
# Signature and bad input
# --------------------------------------------------------------------------


def test_signature_is_that_of_keras_plus_chunk_size():
    ours = inspect.signature(ops.dot_product_attention).parameters
    theirs = inspect.signature(keras.ops.dot_product_attention).parameters
    assert list(ours)[: len(theirs)] == list(theirs)
    for name, p in theirs.items():
        assert ours[name].default == p.default, name
    assert ours["chunk_size"].kind is inspect.Parameter.KEYWORD_ONLY


@pytest.mark.parametrize(
    "args, kw, words",
    [
        (((2, 5, 4, 8), (2, 7, 2, 8), (2, 7, 2, 8)[:3]), {}, ["value.shape"]),
        (((5, 4, 8), (2, 7, 2, 8), (2, 7, 2, 8)), {}, ["query.shape=(5, 4, 8)"]),
        (((2, 5, 4, 8), (2, 7, 2, 6), (2, 7, 2, 6)), {}, ["head dimension", "(2, 7, 2, 6)"]),
        (((2, 5, 4, 8), (2, 7, 3, 8), (2, 7, 3, 8)), {}, ["multiple", "K=3"]),
        (((2, 5, 4, 8), (2, 7, 2, 8), (2, 6, 2, 8)), {}, ["key.shape", "value.shape"]),
        (((2, 5, 4, 8), (3, 7, 2, 8), (3, 7, 2, 8)), {}, ["batch"]),
        (
            ((2, 5, 4, 8), (2, 7, 2, 8), (2, 7, 2, 8)),
            {"mask": np.ones((2, 3, 5, 7), bool)},
            ["`mask`", "(2, 3, 5, 7)"],
        ),
        (
            ((2, 5, 4, 8), (2, 7, 2, 8), (2, 7, 2, 8)),
            {"bias": np.ones((6, 7), "float32")},
            ["`bias`", "(6, 7)"],
        ),
        (
            ((2, 5, 4, 8), (2, 7, 2, 8), (2, 7, 2, 8)),
            {"mask": np.ones((1, 2, 1, 5, 7), bool)},
            ["`mask`", "rank"],
        ),
        (((2, 5, 4, 8), (2, 7, 2, 8), (2, 7, 2, 8)), {"chunk_size": 0}, ["chunk_size"]),
        (
            ((2, 5, 4, 8), (2, 7, 2, 8), (2, 7, 2, 8)),
            {"attn_logits_soft_cap": -1.0},
            ["attn_logits_soft_cap"],
        ),
        (((2, 5, 4, 8), (2, 7, 2, 8), (2, 7, 2, 8)), {"is_causal": 1}, ["is_causal"]),
    ],
    ids=[
        "value_rank",
        "query_rank",
        "head_dims",
        "heads_not_multiple",
        "key_value_shapes",
        "batch",
        "mask_shape",
        "bias_shape",
        "mask_rank",
        "chunk_size",
        "soft_cap",
        "is_causal",
    ],
)
def test_bad_input_raises_value_error_naming_it(args, kw, words):
    tensors = [np.zeros(s, "float32") for s in args]
    with pytest.raises(ValueError) as info:
        ops.dot_product_attention(*tensors, **kw)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


@pytest.mark.skipif(
    BACKEND == "torch", reason="Keras's own dot_product_attention measured on TF/JAX"
)
def test_keras_gives_nan_for_a_neg_inf_bias_row():
    """The trap itself (docs/traps/attention.md): Keras NaNs, we do not."""
    q, k, v = _qkv()
    bias = np.zeros((5, 7), "float32")
    bias[2] = -np.inf
    theirs = np.asarray(
        keras.ops.convert_to_numpy(keras.ops.dot_product_attention(q, k, v, bias=bias))
    )
    ours = np.asarray(keras.ops.convert_to_numpy(ops.dot_product_attention(q, k, v, bias=bias)))
    assert np.isnan(theirs[:, 2]).all()
    assert np.all(ours[:, 2] == 0) and np.isfinite(ours).all()


def test_symbolic_call_with_variable_lengths_gives_the_query_shape():
    # A functional model's `keras.Input((None, 4, 8))` (issue #38 item 5):
    # Keras's op returns the query's shape; ours refused unknown lengths.
    q = keras.Input((None, 4, 8))
    kv = keras.Input((None, 2, 8))
    for kwargs in ({}, {"is_causal": True}, {"chunk_size": 16}):
        out = ops.dot_product_attention(q, kv, kv, **kwargs)
        kwargs.pop("chunk_size", None)
        expected = keras.ops.dot_product_attention(q, kv, kv, **kwargs)
        assert tuple(out.shape) == tuple(expected.shape) == (None, None, 4, 8)
        assert out.dtype == expected.dtype
    with pytest.raises(ValueError, match="number of query heads"):
        ops.dot_product_attention(keras.Input((None, 3, 8)), kv, kv)
