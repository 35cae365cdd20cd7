"""PyTorch: `dot_product_attention` by torch's own kernels, where they give
our numbers (private to `keras_stable.ops`; imported by `torch_native.py`,
so only when the backend is torch).

- `native_attention`, the blockwise path (`attention.attention_kernel`):
  torch's fused `scaled_dot_product_attention` (on the CPU its flash
  kernel: blocks of keys, memory linear in the length, FlashAttention-2's
  backward with `D = rowsum(dO * O)`, as our blockwise backward), which is
  what Keras's torch backend runs.
- `native_materialised_attention`, the materialised path (at most 1024
  keys): the exact softmax of whole rows, in blocks of query rows (about
  2**22 logits each, which the CPU's caches handle 1.5x faster than the
  whole `(B, N, T, S)` at once), the probabilities kept for a backward
  `dS = P * (dP - rowsum(P * dP))`: exactly 0 on a saturated row, as the
  `keras.ops` formulation (torch's fused backward leaves round-off there).

A query row with no allowed key is given every key (so no kernel meets an
empty softmax) and its output is filled with 0, which drops its upstream
gradient: output 0, and exactly 0 in every gradient, as our kernels.

Both are `torch.autograd.Function`s; when autograd differentiates their
backward again (`create_graph=True`: a gradient penalty), the backward
recomputes the attention with plain differentiable torch ops instead
(torch's fused kernel has no second derivative), materialising the logits.
"""

import torch

_NEG_INF = float("-inf")

# Logits per block of query rows of the materialised path (16 MiB of
# float32): at (8, 512, 8, 64) on the CPU, blocks of 128 rows ran 1.04-1.06x
# torch's fused kernel (forward + backward), the whole tensor at once 1.7x.
BLOCK_LOGITS = 2**22


def _usable(q, key, bias, cap):
    """Whether torch's kernels compute ours: eager, float32/float64 (the
    op casts half-precision inputs up first), no soft cap, no bias that
    wants a gradient (torch's fused kernel has none for its mask)."""
    if cap is not None or q.is_meta or torch.compiler.is_compiling() or key.shape[1] == 0:
        return False
    if q.dtype not in (torch.float32, torch.float64):
        return False
    return bias is None or not (bias.requires_grad and torch.is_grad_enabled())


def _heads(x):
    """A rank-5 `(b, k, g, t, s)` mask or bias as rank 4 `(b, k * g, t, s)`
    (head `n = k * G + g`)."""
    return x.reshape(x.shape[0], x.shape[1] * x.shape[2], x.shape[3], x.shape[4])


def _rows(x, start, size):
    """Query rows `[start, start + size)` of a rank-4 mask or bias (all of
    it when it broadcasts along the rows)."""
    return x if x.shape[2] == 1 else x[:, :, start : start + size]


class _Attention:
    """One call in torch's head-major layout: the queries `(B, N, T, H)`,
    keys and values `(B, K, S, H)`, and, broadcastable to `(B, N, T, S)`,
    the `bias`, the keys each row may attend to (`allowed`: mask, causality,
    `bias != -inf`) and the rows with none (`dead`, `(b, n, t, 1)`; None
    when every row has a key)."""

    def __init__(self, q5, key, bias5, mask5, scale, is_causal):
        b, t, kv, groups, h = q5.shape
        s = key.shape[1]
        self.shape, self.scale, self.groups = (b, t, kv, groups, h), scale, groups
        self.query = q5.reshape(b, t, kv * groups, h).transpose(1, 2)
        self.bias = None if bias5 is None else _heads(bias5)
        # Causality alone: torch's kernel applies it itself (top-left, as
        # Keras); every row then sees key 0, so none is empty.
        self.causal_only = is_causal and mask5 is None and bias5 is None
        allowed = None if mask5 is None else _heads(mask5)
        if self.bias is not None:
            finite = self.bias != _NEG_INF
            allowed = finite if allowed is None else allowed & finite
        if is_causal:
            causal = torch.ones((t, s), dtype=torch.bool, device=q5.device).tril_()[None, None]
            allowed = causal if allowed is None else allowed & causal
        self.allowed, self.dead = allowed, None
        if allowed is not None and not self.causal_only:
            dead = ~torch.any(allowed, dim=-1, keepdim=True)
            if bool(torch.any(dead)):  # a host sync
                self.dead = dead

    def heads_of(self, x):
        """Keys or values `(B, S, K, H)` as `(B, K, S, H)`."""
        return x.transpose(1, 2)

    def expanded(self, x):
        """`(B, K, S, H)` as `(B, N, S, H)`: key head `k` for query heads
        `k * G ... k * G + G - 1`."""
        return x if self.groups == 1 else x.repeat_interleave(self.groups, dim=1)

    def grouped(self, grad):
        """The inverse of `expanded` for a gradient: summed over the group."""
        if self.groups == 1:
            return grad
        b, n, s, h = grad.shape
        return grad.reshape(b, n // self.groups, self.groups, s, h).sum(2)

    def mask_logits(self, logits, start, size):
        """Bias, masked keys (-inf) and empty rows (0: any finite row) of
        the query rows `[start, start + size)`, in place."""
        if self.bias is not None:
            logits += _rows(self.bias, start, size)
        if self.allowed is not None:
            logits.masked_fill_(~_rows(self.allowed, start, size), _NEG_INF)
        if self.dead is not None:
            logits.masked_fill_(_rows(self.dead, start, size), 0.0)
        return logits

    def cleared(self, x):
        """`x` (rows along axis 2) with the empty rows 0 (their gradient too)."""
        return x if self.dead is None else x.masked_fill(self.dead, 0.0)

    def reference(self, query, key, value):
        """The attention by plain differentiable torch ops (the second
        order of both functions): `(B, N, T, H)`."""
        logits = torch.matmul(query * self.scale, self.expanded(key).transpose(-1, -2))
        if self.bias is not None:
            logits = logits + self.bias
        if self.allowed is not None:
            logits = logits.masked_fill(~self.allowed, _NEG_INF)
        probs = torch.softmax(self.cleared(logits), -1)
        return self.cleared(torch.matmul(self.cleared(probs), self.expanded(value)))

    def fused(self, query, key, value):
        """torch's fused attention, `(B, N, T, H)`."""
        attn_mask = None
        if not self.causal_only and self.allowed is not None:
            if self.bias is None:
                attn_mask = self.allowed if self.dead is None else self.allowed | self.dead
            else:
                attn_mask = torch.where(self.allowed, self.bias, _NEG_INF)
                attn_mask = self.cleared(attn_mask)
        out = torch.nn.functional.scaled_dot_product_attention(
            query,
            key,
            value,
            attn_mask=attn_mask,
            is_causal=self.causal_only,
            scale=self.scale,
            enable_gqa=self.groups > 1,
        )
        return self.cleared(out)

    def output(self, out):
        """`(B, N, T, H)` as the kernels' `(B, T, K, G, H)`."""
        return out.transpose(1, 2).reshape(self.shape)


def _gradients(out, inputs, needs, d_out, **kwargs):
    """`(d query, d key, d value, None)` of `out` by autograd, None for the
    inputs that want none (the last None: the problem argument)."""
    wanted = [x for x, need in zip(inputs, needs) if need]
    grads = iter(torch.autograd.grad(out, wanted, d_out, **kwargs))
    return tuple(next(grads) if need else None for need in needs) + (None,)


def _second_order(ctx, problem, d_out):
    """The backward of either function while autograd records it: the
    gradients of `problem.reference`, differentiable themselves."""
    inputs = ctx.saved_tensors[:3]
    with torch.enable_grad():
        out = problem.reference(*inputs)
    return _gradients(
        out, inputs, ctx.needs_input_grad[:3], d_out, create_graph=True, allow_unused=True
    )


class _Fused(torch.autograd.Function):
    """torch's fused attention, its own backward kept for the first order."""

    @staticmethod
    def forward(ctx, query, key, value, problem):
        with torch.enable_grad():
            inputs = [x.detach().requires_grad_() for x in (query, key, value)]
            out = problem.fused(*inputs)
        ctx.problem, ctx.graph = problem, (inputs, out)
        ctx.save_for_backward(query, key, value)
        return out.detach()

    @staticmethod
    def backward(ctx, d_out):
        if torch.is_grad_enabled():
            return _second_order(ctx, ctx.problem, d_out)
        inputs, out = ctx.graph
        return _gradients(out, inputs, ctx.needs_input_grad[:3], d_out)


class _RowBlocks(torch.autograd.Function):
    """The materialised attention in blocks of query rows; the backward
    from the kept probabilities: `dV = P^T dO`, `dS = P * (dP - rowsum(P *
    dP))` with `dP = dO V^T`, `dQ = scale dS K`, `dK = scale dS^T Q`.

    The products are batched over `B * N` heads of contiguous
    `(rows, H)` matrices, and the keys' and values' gradients accumulate
    in place (`baddbmm_`): measured 1.1-1.3x torch's fused kernel with all
    three gradients at (8, 512, 8, 64), 1.3-1.45x with strided
    `(B, N, T, H)` views and a temporary per block.
    """

    @staticmethod
    def forward(ctx, query, key, value, problem):
        q, k, v = _RowBlocks.matrices(query, key, value, problem)
        heads, rows, keys = q.shape[0], q.shape[1], k.shape[1]
        size = max(1, min(rows, BLOCK_LOGITS // max(1, heads * keys)))
        k_t = k.transpose(1, 2)
        probs, outs = [], []
        for start in range(0, rows, size):
            logits = torch.bmm(q[:, start : start + size], k_t)
            problem.mask_logits(_RowBlocks.per_head(logits, query), start, size)
            p = torch.softmax(logits, -1)
            if problem.dead is not None:
                _RowBlocks.per_head(p, query).masked_fill_(_rows(problem.dead, start, size), 0.0)
            probs.append(p)
            outs.append(torch.bmm(p, v))
        ctx.problem, ctx.size = problem, size
        # The inputs (for a second derivative) and their matrices (small
        # next to the probabilities; copying them again costs more).
        ctx.save_for_backward(query, key, value, q, k, v, *probs)
        return _RowBlocks.per_head(torch.cat(outs, 1), query)

    @staticmethod
    def backward(ctx, d_out):
        problem = ctx.problem
        if torch.is_grad_enabled():
            return _second_order(ctx, problem, d_out)
        query, key, value, q, k, v, *probs = ctx.saved_tensors
        need_q, need_k, need_v = ctx.needs_input_grad[:3]
        # An empty row's upstream (even inf) is dropped.
        d_out = problem.cleared(d_out).reshape(q.shape)
        d_q = torch.empty_like(q) if need_q else None
        d_k = torch.zeros_like(k) if need_k else None
        d_v = torch.zeros_like(v) if need_v else None
        v_t = v.transpose(1, 2)
        for i, p in enumerate(probs):
            block = slice(i * ctx.size, (i + 1) * ctx.size)
            d_o = d_out[:, block]
            if need_v:
                d_v.baddbmm_(p.transpose(1, 2), d_o)
            if need_q or need_k:
                d_s = torch.bmm(d_o, v_t).mul_(p)
                d_s.addcmul_(p, torch.sum(d_s, -1, keepdim=True), value=-1.0)
                if need_q:
                    d_q[:, block] = torch.bmm(d_s, k)
                if need_k:
                    d_k.baddbmm_(d_s.transpose(1, 2), q[:, block])
        heads = query.shape[:2]
        return (
            d_q.mul_(problem.scale).view(query.shape) if need_q else None,
            problem.grouped(d_k.view(*heads, *d_k.shape[1:])) if need_k else None,
            problem.grouped(d_v.view(*heads, *d_v.shape[1:])) if need_v else None,
            None,
        )

    @staticmethod
    def matrices(query, key, value, problem):
        """The scaled queries `(B * N, T, H)` and the keys and values
        `(B * N, S, H)` (repeated over a group), contiguous copies."""
        heads = query.shape[0] * query.shape[1]
        q = (query * problem.scale).reshape(heads, *query.shape[2:])
        k, v = (problem.expanded(x).reshape(heads, *x.shape[2:]) for x in (key, value))
        return q, k, v

    @staticmethod
    def per_head(x, query):
        """A `(B * N, rows, ...)` block viewed as `(B, N, rows, ...)`."""
        return x.view(*query.shape[:2], *x.shape[1:])


def native_attention(q, key, value, bias, mask, scale, is_causal, cap):
    """`attention_kernel`'s output by torch's fused attention, or None
    where it does not compute ours (`_usable`). `q` `(B, T, K, G, H)`,
    `key`/`value` `(B, S, K, H)`, rank-5 `bias`/`mask`."""
    if not _usable(q, key, bias, cap):
        return None
    problem = _Attention(q, key, bias, mask, scale, is_causal)
    out = _Fused.apply(problem.query, problem.heads_of(key), problem.heads_of(value), problem)
    return problem.output(out)


def native_materialised_attention(q, key, value, bias, mask, scale, is_causal, cap):
    """The materialised formulation's output (`attention._materialised`)
    by exact blocks of query rows, or None where it does not apply
    (`_usable`). The arguments of `native_attention`."""
    if not _usable(q, key, bias, cap):
        return None
    problem = _Attention(q, key, bias, mask, scale, is_causal)
    out = _RowBlocks.apply(problem.query, problem.heads_of(key), problem.heads_of(value), problem)
    return problem.output(out)
