"""PyTorch: `dot_product_attention` on torch's kernels
(`ops/_kernels/torch/attention.py`) under what users run on autograd besides one `backward`: a second backward
through the same graph (`retain_graph=True`, GAN and multi-loss loops),
the `torch.func` transforms (`grad`, `vmap` and their compositions) and
`gradcheck` with batched gradients, on the materialised path (at most 1024
keys) and the blockwise one (`chunk_size`, or past 1024 keys), empty rows
included (output 0, every gradient exactly 0 there)."""

import pytest

from keras_stable import ops
from tests.backend_utils import only_torch
from tests.ops.test_attention_kernels import _spy_torch_attention

pytestmark = [pytest.mark.torch, only_torch]

torch = pytest.importorskip("torch")

B, T, N, KV, H = 2, 5, 4, 2, 3
F64 = "float64"

# chunk_size, keys, the torch function that runs.
PATHS = {
    "materialised": (None, 7, "materialised_attention"),
    "blockwise": (3, 7, "attention"),
    "blockwise_past_1024_keys": (None, 1030, "attention"),
}


def _inputs(s, seed=0, t=T, n=N, kv=KV):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, t, n, H, generator=g, dtype=torch.float64)
    k = torch.randn(B, s, kv, H, generator=g, dtype=torch.float64)
    v = torch.randn(B, s, kv, H, generator=g, dtype=torch.float64)
    mask = torch.rand(B, 1, t, s, generator=g) > 0.4
    mask[..., 0] = True
    mask[0, 0, 1] = False  # query row 1 of sample 0 has no key
    return q, k, v, mask


def _attention(chunk_size, **kw):
    def fn(q, k, v, mask=None):
        return ops.dot_product_attention(q, k, v, mask=mask, chunk_size=chunk_size, **kw)

    return fn


def _autograd(fn, args, cot):
    """Value and gradients of `sum(fn(*args) * cot)` (query, key, value)
    by plain autograd."""
    leaves = [x.clone().requires_grad_() for x in args[:3]]
    out = fn(*leaves, *args[3:])
    return out.detach(), torch.autograd.grad(torch.sum(out * cot), leaves)


def _equal(actual, expected, what):
    for i, (a, e) in enumerate(zip(actual, expected)):
        torch.testing.assert_close(a, e, rtol=1e-10, atol=1e-12, msg=f"{what}: input {i}")


@pytest.mark.parametrize("kw", [{}, {"is_causal": True}], ids=["mask", "causal_mask"])
@pytest.mark.parametrize("path", sorted(PATHS))
def test_second_backward_through_the_same_graph(monkeypatch, path, kw):
    """`loss.backward(retain_graph=True)` then `loss.backward()`: the
    second gives the same gradients (the blockwise path ran its inner
    graph's backward without keeping it: 'Trying to backward through the
    graph a second time')."""
    chunk_size, s, native = PATHS[path]
    ran = _spy_torch_attention(monkeypatch, native)
    q, k, v, mask = _inputs(s)
    leaves = [x.requires_grad_() for x in (q, k, v)]
    out = _attention(chunk_size, **kw)(*leaves, mask)
    loss = torch.sum(out * torch.linspace(-1.0, 1.0, out.numel(), dtype=out.dtype).view(out.shape))
    loss.backward(retain_graph=True)
    first = [x.grad.clone() for x in leaves]
    for x in leaves:
        x.grad = None
    loss.backward()
    for i, (x, g) in enumerate(zip(leaves, first)):
        assert torch.equal(x.grad, g), f"input {i}"
    assert torch.all(first[0][0, 1] == 0)
    assert ran == [True]


@pytest.mark.parametrize("path", sorted(PATHS))
def test_func_grad_matches_autograd(monkeypatch, path):
    """`torch.func.grad` (query, key, value) gives autograd's gradients,
    exactly 0 on the empty row."""
    chunk_size, s, native = PATHS[path]
    ran = _spy_torch_attention(monkeypatch, native)
    q, k, v, mask = _inputs(s, seed=1)
    cot = torch.randn(q.shape, dtype=q.dtype)
    fn = _attention(chunk_size)
    _, expected = _autograd(fn, (q, k, v, mask), cot)

    def loss(q, k, v):
        return torch.sum(fn(q, k, v, mask) * cot)

    grads = torch.func.grad(loss, argnums=(0, 1, 2))(q, k, v)
    _equal(grads, expected, "torch.func.grad vs autograd")
    assert torch.all(grads[0][0, 1] == 0)
    assert ran and all(ran)


@pytest.mark.parametrize("path", sorted(PATHS))
def test_vmap_matches_a_loop(monkeypatch, path):
    """`torch.func.vmap` over a leading dimension (of every input, of the
    queries only, of the mask only), `vmap(grad)`, and autograd through
    `vmap`, against the same calls one by one."""
    chunk_size, s, native = PATHS[path]
    ran = _spy_torch_attention(monkeypatch, native)
    fn = _attention(chunk_size)
    stacks = [torch.stack(xs) for xs in zip(*(_inputs(s, seed=i) for i in range(3)))]
    qs, ks, vs, masks = stacks
    q, k, v, mask = (x[0] for x in stacks)

    def loop(*args, in_dims):
        calls = [[x if d is None else x[i] for x, d in zip(args, in_dims)] for i in range(3)]
        return torch.stack([fn(*call) for call in calls])

    for in_dims, args in (
        ((0, 0, 0, 0), (qs, ks, vs, masks)),
        ((0, None, None, None), (qs, k, v, mask)),
        ((None, None, None, 0), (q, k, v, masks)),
    ):
        out = torch.func.vmap(fn, in_dims=in_dims)(*args)
        torch.testing.assert_close(out, loop(*args, in_dims=in_dims), rtol=1e-12, atol=1e-12)
    assert torch.all(out[0, 0, 1] == 0)

    def loss(q, k, v, mask):
        return torch.sum(fn(q, k, v, mask) ** 2)

    grad = torch.func.grad(loss, argnums=(0, 1, 2))
    batched = torch.func.vmap(grad)(qs, ks, vs, masks)
    one_by_one = [torch.stack(g) for g in zip(*(grad(*(x[i] for x in stacks)) for i in range(3)))]
    _equal(batched, one_by_one, "vmap(grad) vs a loop")
    assert torch.all(batched[0][0, 0, 1] == 0)

    leaves = [x.clone().requires_grad_() for x in (qs, ks, vs)]
    torch.sum(torch.func.vmap(fn)(*leaves, masks) ** 2).backward()
    _equal([x.grad for x in leaves], one_by_one, "autograd through vmap vs a loop")
    assert ran and all(ran)


@pytest.mark.parametrize("chunk_size", [None, 2], ids=["materialised", "blockwise"])
@pytest.mark.parametrize("kw", [{}, {"is_causal": True}], ids=["mask", "causal_mask"])
def test_gradcheck(monkeypatch, chunk_size, kw):
    """`gradcheck` and `gradgradcheck` in float64 with batched gradients
    (a `vmap` of the backward), grouped heads and an empty row."""
    native = "attention" if chunk_size else "materialised_attention"
    ran = _spy_torch_attention(monkeypatch, native)
    q, k, v, mask = _inputs(4, seed=2, t=3, n=2, kv=1)
    q, k, v, mask = q[:1], k[:1], v[:1], mask[:1]
    assert not torch.any(mask[0, 0, 1])
    fn = _attention(chunk_size, **kw)
    inputs = [x.requires_grad_() for x in (q, k, v)]

    def attention(q, k, v):
        return fn(q, k, v, mask)

    assert torch.autograd.gradcheck(attention, inputs, check_batched_grad=True)
    assert torch.autograd.gradgradcheck(attention, inputs, check_batched_grad=True)
    assert ran and all(ran)
