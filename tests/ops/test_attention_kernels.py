"""The blockwise attention kernel against the materialised formulation
(`KERAS_STABLE_PORTABLE`): values and gradients (query, key, value, bias)
for chunk sizes that divide neither length, empty rows, and a walk of the
JAX program showing that no `(B, N, T, S)` tensor exists in the value and
gradient."""

import numpy as np
import pytest

from keras_stable import ops
from tests import reference
from tests.backend_utils import MODES
from tests.backend_utils import assert_close
from tests.backend_utils import assert_finite
from tests.backend_utils import float64_enabled
from tests.backend_utils import jax_planned_bytes
from tests.backend_utils import portable
from tests.backend_utils import vjp
from tests.backend_utils import vjp_all_modes
from tests.ops.test_attention import EMPTY
from tests.ops.test_attention import _empty_rows

RNG = np.random.default_rng(1)
B, T, S, N, KV, H = 2, 5, 7, 4, 2, 8


def _qkv(t=T, s=S, n=N, kv=KV, dtype="float32"):
    q = RNG.normal(size=(B, t, n, H)).astype(dtype)
    k = RNG.normal(size=(B, s, kv, H)).astype(dtype)
    v = RNG.normal(size=(B, s, kv, H)).astype(dtype)
    return q, k, v


def _fn(chunk_size, **kw):
    def fn(q, k, v, *rest):
        extra = dict(kw)
        if rest:
            extra["bias"] = rest[0]
        return ops.dot_product_attention(q, k, v, chunk_size=chunk_size, **extra)

    return fn


def _materialised(monkeypatch, fn, args, wrt, cot):
    """The materialised formulation's value and gradients, in float64."""
    with monkeypatch.context() as m, float64_enabled():
        m.setenv("KERAS_STABLE_PORTABLE", "1")
        return vjp(fn, [np.asarray(a, "float64") for a in args], wrt, cot)


# The backward pass forms `dS = P * (dP - D)` with `D = rowsum(dO * O)`
# (FlashAttention-2) where autodiff forms `sum(P * dP)`: equal, but `D`
# rounds at the scale of `|dO| |V|` (here O(1), summed over H), so a
# gradient that cancels to 0 (one allowed key) is ~1e-6, not 0. Absolute
# tolerance for float32 gradients: 1e-5 of that unit scale.
GRAD_TOL = {"float32": (1e-5, 1e-5)}


CASES = {
    "gqa_mask": (dict(), {"mask": RNG.uniform(size=(B, 1, T, S)) > 0.3}, (1, N, T, S)),
    "causal_t_lt_s": (dict(t=4, s=7), {"is_causal": True}, (S,)),
    "causal_t_gt_s": (dict(t=7, s=5, kv=1), {"is_causal": True}, (7, 5)),
    "soft_cap_bias": (dict(kv=4), {"attn_logits_soft_cap": 1.5, "scale": 0.7}, (B, 1, 1, S)),
}


@pytest.mark.parametrize(
    "name, chunk_size",
    [
        ("gqa_mask", 3),  # S = 7: two whole blocks and a partial one
        ("gqa_mask", 7),  # one block
        ("causal_t_lt_s", 2),
        ("causal_t_gt_s", 10),  # a block longer than S
        ("soft_cap_bias", 4),
    ],
)
def test_blockwise_matches_materialised(monkeypatch, name, chunk_size):
    shape, kw, bias_shape = CASES[name]
    q, k, v = _qkv(**shape)
    bias = RNG.normal(size=bias_shape).astype("float32")
    args, wrt = [q, k, v, bias], (0, 1, 2, 3)
    cot = RNG.normal(size=q.shape).astype("float32")
    fn = _fn(chunk_size, **kw)
    ref_out, ref_grads = _materialised(monkeypatch, fn, args, wrt, cot)
    for mode in MODES:
        out, grads = vjp(fn, args, wrt, cot, mode)
        assert_close(out, ref_out, what=f"{mode} value vs materialised")
        for i, (g, r) in enumerate(zip(grads, ref_grads)):
            assert g.shape == r.shape == np.shape(args[i])
            assert_close(g, r, what=f"{mode} gradient {i} vs materialised", tol=GRAD_TOL["float32"])
    mask = kw.get("mask")
    ref = reference.dot_product_attention(
        q,
        k,
        v,
        bias=bias,
        mask=mask,
        scale=kw.get("scale"),
        is_causal=kw.get("is_causal", False),
        soft_cap=kw.get("attn_logits_soft_cap"),
    )
    assert_close(out, ref, what="value vs float64")


@pytest.mark.parametrize(
    "name, dtype", [(name, "float32") for name in sorted(EMPTY)] + [("bias_and_mask", "bfloat16")]
)
def test_blockwise_empty_rows_give_zero_and_zero_gradients(monkeypatch, name, dtype):
    kw, bias = EMPTY[name]
    q, k, v = (RNG.normal(size=s).astype(dtype) for s in ((2, 6, 4, 8), (2, 6, 2, 8), (2, 6, 2, 8)))
    empty = _empty_rows(kw, bias, 6, 6)
    cot = RNG.normal(size=q.shape).astype("float32")
    cot_zeroed = cot * ~np.transpose(empty, (0, 2, 1))[..., None]
    args, wrt = [q, k, v], (0, 1, 2)
    if bias is not None:
        args, wrt = args + [bias.astype(dtype)], (0, 1, 2, 3)
    fn = _fn(4, **kw)
    ref_out, ref_grads = _materialised(monkeypatch, fn, args, wrt, cot)
    for mode in MODES:
        _check_empty(fn, args, wrt, cot, cot_zeroed, empty, bias, dtype, mode, ref_out, ref_grads)


@pytest.mark.parametrize("chunk_size", [None, 4])
@pytest.mark.parametrize("name", sorted(EMPTY) + ["gqa_mask", "causal_t_lt_s", "causal_t_gt_s"])
def test_with_a_constant_bias(monkeypatch, name, chunk_size):
    """Both paths (materialised: `chunk_size=None`; blockwise) where nothing
    but the query, key and value is differentiated (a mask, a constant bias
    with `-inf` entries): against the portable materialised formulation,
    empty rows included (output 0, every gradient as if their upstream were
    0). On PyTorch these are torch's kernels
    (`ops/_kernels/torch/attention.py`: exact blocks of query rows, torch's
    fused attention): the spy checks that they ran."""
    if name in EMPTY:
        (kw, bias), shape = EMPTY[name], dict(t=6, s=6)
        empty = _empty_rows(kw, bias, 6, 6)
    else:
        shape, kw, bias_shape = CASES[name]
        bias = RNG.normal(size=bias_shape).astype("float32")
        bias[..., 0] = -np.inf  # the first key removed (where the bias has keys)
        empty = None
    q, k, v = _qkv(**shape)
    cot = RNG.normal(size=q.shape).astype("float32")
    extra = {} if bias is None else {"bias": bias}
    fn = _fn(chunk_size, **kw, **extra)
    native = "attention" if chunk_size else "materialised_attention"
    ran = _spy_torch_attention(monkeypatch, native)
    ref_out, ref_grads = _materialised(monkeypatch, fn, [q, k, v], (0, 1, 2), cot)
    for mode in MODES:
        out, grads = vjp(fn, [q, k, v], (0, 1, 2), cot, mode)
        assert_close(out, ref_out, what=f"{mode} value vs materialised")
        for i, (g, r) in enumerate(zip(grads, ref_grads)):
            assert_finite(g, f"{mode} gradient {i}")
            assert_close(g, r, what=f"{mode} gradient {i} vs materialised", tol=GRAD_TOL["float32"])
        if empty is not None:
            # An empty row contributes exactly nothing: the gradients are
            # those of the same problem with its upstream zeroed, bit for bit.
            rows = np.transpose(empty, (0, 2, 1))
            _, zeroed = vjp(fn, [q, k, v], (0, 1, 2), cot * ~rows[..., None], mode)
            assert np.all(out[rows] == 0) and np.all(grads[0][rows] == 0)
            for i, (g, z) in enumerate(zip(grads, zeroed)):
                np.testing.assert_array_equal(g, z, err_msg=f"{mode} gradient {i}")
    if ran is not None:
        assert ran and all(ran), ran


def _spy_torch_attention(monkeypatch, name):
    """On PyTorch, a list that records whether each call of torch's op
    `name` (in the table `torch.OPS` that `dispatch.native_op` reads) gave
    torch's result; None elsewhere."""
    import keras

    if keras.backend.backend() != "torch":
        return None
    from keras_stable.ops._kernels import torch as torch_kernels

    ran, real = [], torch_kernels.OPS[name]

    def spy(*args):
        out = real(*args)
        ran.append(out is not None)
        return out

    monkeypatch.setitem(torch_kernels.OPS, name, spy)
    return ran


@pytest.mark.parametrize("chunk_size", [None, 3])
def test_second_order_matches_the_portable_formulation(chunk_size):
    """A gradient penalty through attention (`d/dq <grad_q sum(att * c), w>`)
    on both paths, a causal mask over left padding (empty rows) included:
    the backward passes are differentiable (torch's kernels hand the second
    order to plain differentiable ops) and give the portable derivative."""
    import keras

    from tests.ops.test_kernels import _input_gradient
    from tests.ops.test_kernels import _second_order

    q, k, v = _qkv()
    mask = np.ones((B, 1, 1, S), bool)
    mask[0, ..., :3] = False  # with is_causal: rows 0-2 of sample 0 see no key
    cot = keras.ops.convert_to_tensor(RNG.normal(size=q.shape).astype("float32"))
    w = keras.ops.convert_to_tensor(RNG.normal(size=q.shape).astype("float32"))
    kv = [keras.ops.convert_to_tensor(x) for x in (k, v)]

    def attention(a):
        out = ops.dot_product_attention(a, *kv, mask=mask, is_causal=True, chunk_size=chunk_size)
        return out * cot

    def loss(ps):
        return keras.ops.sum(_input_gradient(attention, ps[0]) * w)

    (h,) = _second_order(loss, [q])
    with portable():
        (ph,) = _second_order(loss, [q])
    assert_finite(h)
    assert_close(h, ph, what="Hessian-vector product", tol=(1e-4, 1e-5))


def _check_empty(fn, args, wrt, cot, cot_zeroed, empty, bias, dtype, mode, ref_out, ref_grads):
    out, grads = vjp(fn, args, wrt, cot, mode)
    _, grads_zeroed = vjp(fn, args, wrt, cot_zeroed, mode)
    assert_close(out, ref_out, dtype, what="value vs materialised")
    rows = np.transpose(empty, (0, 2, 1))
    assert np.all(out[rows] == 0)
    for i, g in enumerate(grads):
        assert_finite(g, f"gradient {i}")
        np.testing.assert_array_equal(g, grads_zeroed[i], err_msg=f"gradient {i}")
        assert_close(
            g, ref_grads[i], dtype, what=f"gradient {i} vs materialised", tol=GRAD_TOL.get(dtype)
        )
    assert np.all(grads[0][rows] == 0)
    if bias is not None:
        assert np.all(grads[3][empty] == 0)


def test_blockwise_float16_logits_above_65504():
    q = np.full((1, 2, 1, 8), 100.0, "float16")
    k = np.full((1, 5, 1, 8), 100.0, "float16")
    k[0, 3] = 99.0
    v = RNG.normal(size=(1, 5, 1, 8)).astype("float16")
    out, grads = vjp_all_modes(_fn(2, scale=1.0), [q, k, v], (0, 1, 2), dtype="float16")
    for g in grads:
        assert_finite(g)
    assert_close(out, reference.dot_product_attention(q, k, v, scale=1.0), "float16")


# --------------------------------------------------------------------------
# No (B, N, T, S) tensor in the value and gradient (JAX program walk)
# --------------------------------------------------------------------------


def _jaxpr_sizes(jaxpr):
    """Element counts of every input and intermediate, sub-programs (loop
    bodies, custom_vjp rules) included."""
    jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
    for var in (*jaxpr.constvars, *jaxpr.invars):
        yield int(np.prod(var.aval.shape))
    for eqn in jaxpr.eqns:
        for var in eqn.outvars:
            yield int(np.prod(getattr(var.aval, "shape", ())))
        for param in eqn.params.values():
            for sub in param if isinstance(param, (tuple, list)) else (param,):
                if hasattr(getattr(sub, "jaxpr", sub), "eqns"):
                    yield from _jaxpr_sizes(sub)


def _largest(fn, args):
    import jax
    import jax.numpy as jnp

    def loss(*a):
        return jnp.sum(fn(*a))

    grad = jax.value_and_grad(loss, argnums=(0, 1, 2, 3))
    jaxpr = jax.make_jaxpr(jax.jit(grad))(*[jnp.asarray(a) for a in args])
    return max(_jaxpr_sizes(jaxpr))


@pytest.mark.jax
def test_blockwise_value_and_gradient_hold_no_full_logits(monkeypatch):
    """Causal attention over left-padded keys with a per-key bias: the
    largest intermediate of the blockwise value-and-gradient is a block
    (`B * N * T * chunk`), the materialised one holds `B * N * T * S`."""
    b, t, s, n, kv, h, chunk = 2, 96, 96, 4, 2, 8, 16
    q, k, v = (
        RNG.normal(size=x).astype("float32") for x in ((b, t, n, h), (b, s, kv, h), (b, s, kv, h))
    )
    bias = RNG.normal(size=(b, 1, 1, s)).astype("float32")
    mask = np.ones((b, 1, 1, s), bool)
    mask[0, ..., :10] = False
    full = b * n * t * s

    def blockwise(q, k, v, bias):
        return ops.dot_product_attention(
            q, k, v, bias=bias, mask=mask, is_causal=True, chunk_size=chunk
        )

    assert _largest(blockwise, [q, k, v, bias]) <= b * n * t * chunk < full
    with monkeypatch.context() as m:
        m.setenv("KERAS_STABLE_PORTABLE", "1")
        assert _largest(blockwise, [q, k, v, bias]) >= full


@pytest.mark.jax
def test_long_sequences_take_the_blockwise_path_by_default():
    """Past 1024 keys the default runs the blockwise path (blocks of 256)."""
    b, t, s, n, h = 1, 8, 1100, 1, 4
    q = RNG.normal(size=(b, t, n, h)).astype("float32")
    k, v = (RNG.normal(size=(b, s, n, h)).astype("float32") for _ in range(2))
    bias = RNG.normal(size=(s,)).astype("float32")

    def default(q, k, v, bias):
        return ops.dot_product_attention(q, k, v, bias=bias)

    # The inputs themselves are (B, S, K, H) = 4400 elements; the logits
    # would be B * N * T * S = 8800.
    assert _largest(default, [q, k, v, bias]) < b * n * t * s


def _compiled_bytes(fn, args):
    """The planned bytes of the value and gradient of `sum(fn(q, k, v)**2)`."""
    import jax.numpy as jnp

    return jax_planned_bytes(lambda *a: jnp.sum(fn(*a) ** 2), args, argnums=(0, 1, 2))


@pytest.mark.jax
def test_long_sequence_memory_against_keras():
    """At 4096 keys the default (blockwise) value and gradient needs at least
    8x less memory than `keras.ops.dot_product_attention`'s (the issue's
    bar; 19x measured at (1, 4096, 8, 64) in docs/benchmarks.md). Compiled
    only: nothing runs."""
    import keras

    b, t, n, h = 1, 4096, 2, 16
    q, k, v = (RNG.normal(size=(b, t, n, h)).astype("float32") for _ in range(3))
    ours = _compiled_bytes(lambda q, k, v: ops.dot_product_attention(q, k, v), [q, k, v])
    theirs = _compiled_bytes(lambda q, k, v: keras.ops.dot_product_attention(q, k, v), [q, k, v])
    assert theirs >= 8 * ours, (theirs / 2**20, ours / 2**20)


@pytest.mark.parametrize("chunk_size", [None, 3])
def test_symbolic_inputs_give_the_output_spec(chunk_size):
    """A functional model's KerasTensors (unknown batch): the output's
    shape and dtype, on either path."""
    import keras

    q, k = keras.Input((5, 4, 8)), keras.Input((7, 2, 8))
    out = ops.dot_product_attention(q, k, k, is_causal=True, chunk_size=chunk_size)
    assert tuple(out.shape) == (None, 5, 4, 8) and out.dtype == q.dtype


@pytest.mark.tensorflow
def test_blockwise_under_tf_function_with_unknown_batch():
    import tensorflow as tf

    q, k, v = _qkv()
    spec = [tf.TensorSpec((None,) + x.shape[1:]) for x in (q, k, v)]

    @tf.function(input_signature=spec)
    def step(q, k, v):
        with tf.GradientTape() as tape:
            tape.watch(q)
            out = ops.dot_product_attention(q, k, v, is_causal=True, chunk_size=3)
        return out, tape.gradient(out, q)

    out, grad = step(q, k, v)
    ref = reference.dot_product_attention(q, k, v, is_causal=True)
    assert_close(out.numpy(), ref, what="value vs float64")
    assert_finite(grad.numpy())
