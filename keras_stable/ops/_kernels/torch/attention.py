"""PyTorch: `dot_product_attention` by torch's own kernels, where they give
our numbers (private to `keras_stable.ops`; in the table `OPS` of this
package, imported only when the backend is torch).

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

Both are `torch.autograd.Function`s in the `forward` + `setup_context`
style, so that `torch.func` transforms take them. Their first-order
backward runs torch's kernel (the fused attention's own backward, kept
from the forward and retained, so that `retain_graph=True` allows another)
or the kept probabilities. Where that cannot serve, the backward is
`_Attention.gradients`: the same formulas by plain differentiable torch
ops, the probabilities recomputed in blocks of query rows. That is when
autograd differentiates the backward again (`create_graph=True`: a
gradient penalty; torch's fused kernel has no second derivative), and
under `torch.func` (`grad` differentiates with `create_graph=True`; a
`vmap` of the backward meets batched tensors, which torch's kernels and
in-place updates do not take). Under `vmap` the forward folds the mapped
dimension into the batch and runs unchanged (`_vmap_rule`): torch's fused
kernel has no batching rule on the CPU.
"""

import copy

import torch

_NEG_INF = float("-inf")

# Logits per block of query rows of the materialised path (16 MiB of
# float32): at (8, 512, 8, 64) on the CPU, blocks of 128 rows ran 1.04-1.06x
# torch's fused kernel (forward + backward), the whole tensor at once 1.7x.
BLOCK_LOGITS = 2**22


def _transformed():
    """Whether a `torch.func` transform (`grad`, `vmap`...) is running
    (the check `torch.autograd.Function.apply` makes)."""
    return torch._C._are_functorch_transforms_active()


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
    """Query rows `[start, start + size)` of a rank-4 tensor (all of it
    when it broadcasts along the rows, or is that block: the older `vmap`
    of `gradcheck`'s batched gradients has no rule for a whole slice)."""
    whole = x.shape[2] == 1 or (start == 0 and size >= x.shape[2])
    return x if whole else x[:, :, start : start + size]


def _block_rows(heads, rows, keys):
    """Query rows per block: about `BLOCK_LOGITS` logits."""
    return max(1, min(rows, BLOCK_LOGITS // max(1, heads * keys)))


def _plus(total, term):
    return term if total is None else total + term


class _Attention:
    """One call in torch's head-major layout: the queries `(B, N, T, H)`,
    keys and values `(B, K, S, H)`, and, broadcastable to `(B, N, T, S)`,
    the `bias`, the keys each row may attend to (`allowed`: mask, causality,
    `bias != -inf`) and the rows with none (`dead`, `(b, n, t, 1)`; None
    when every row has a key).

    The functions take `bias`, `allowed` and `dead` as inputs (`tensors`)
    and work on a copy holding theirs (`using`): under `torch.func` a
    method may only use the tensors it is given. `kept` carries what a
    forward keeps for the first-order backward to `setup_context`."""

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
        self.allowed, self.dead, self.kept = allowed, None, None
        if allowed is not None and not self.causal_only:
            dead = ~torch.any(allowed, dim=-1, keepdim=True)
            # Under `vmap` no Python branch may read a value: keep the
            # (maybe all-False) rows there; elsewhere a host sync.
            if _transformed() or bool(torch.any(dead)):
                self.dead = dead

    def tensors(self):
        return self.bias, self.allowed, self.dead

    def using(self, bias, allowed, dead):
        """This call with the given `bias`, `allowed` and `dead`."""
        view = copy.copy(self)
        view.bias, view.allowed, view.dead, view.kept = bias, allowed, dead, None
        return view

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

    def probabilities(self, query, key_t, start, size):
        """The softmax of the query rows `[start, start + size)` (`query`
        those rows, `key_t` `(B, N, H, S)`) by plain out-of-place ops: 0 on
        an empty row."""
        logits = torch.matmul(query * self.scale, key_t)
        if self.bias is not None:
            logits = logits + _rows(self.bias, start, size)
        if self.allowed is not None:
            logits = logits.masked_fill(~_rows(self.allowed, start, size), _NEG_INF)
        if self.dead is None:
            return torch.softmax(logits, -1)
        dead = _rows(self.dead, start, size)
        return torch.softmax(logits.masked_fill(dead, 0.0), -1).masked_fill(dead, 0.0)

    def gradients(self, query, key, value, d_out, needs):
        """`(d query, d key, d value)` (None where `needs` says no) by plain
        differentiable torch ops, in blocks of query rows whose
        probabilities are recomputed: `dV = P^T dO`, `dS = P * (dP -
        rowsum(P * dP))` with `dP = dO V^T`, `dQ = scale dS K`, `dK =
        scale dS^T Q`. An empty row's upstream (even inf) is dropped and
        its probabilities are 0: it adds exactly 0."""
        need_q, need_k, need_v = needs
        k, v = self.expanded(key), self.expanded(value)
        k_t, v_t = k.transpose(-1, -2), v.transpose(-1, -2)
        d_out = self.cleared(d_out)
        b, n, rows, _ = query.shape
        size = _block_rows(b * n, rows, k.shape[2])
        d_q, d_k, d_v = [], None, None
        for start in range(0, rows, size):
            q = _rows(query, start, size)
            p = self.probabilities(q, k_t, start, size)
            d_o = _rows(d_out, start, size)
            if need_v:
                d_v = _plus(d_v, torch.matmul(p.transpose(-1, -2), d_o))
            if need_q or need_k:
                d_p = torch.matmul(d_o, v_t)
                d_s = p * (d_p - torch.sum(p * d_p, -1, keepdim=True))
                if need_q:
                    d_q.append(torch.matmul(d_s, k))
                if need_k:
                    d_k = _plus(d_k, torch.matmul(d_s.transpose(-1, -2), q))
        return (
            torch.cat(d_q, 2) * self.scale if need_q else None,
            self.grouped(d_k * self.scale) if need_k else None,
            self.grouped(d_v) if need_v else None,
        )

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


class _Function(torch.autograd.Function):
    """What both functions share. Their inputs: `query` `(B, N, T, H)`,
    `key`, `value` `(B, K, S, H)`, the `_Attention`'s `tensors()` and the
    `_Attention` itself; their output `(B, N, T, H)`."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        *tensors, problem = inputs
        # What the forward kept: taken by the first `setup_context` (under
        # `torch.func.grad`, that of the plain call below the transform,
        # whose backward never runs: this one then recomputes).
        kept, problem.kept = problem.kept, None
        ctx.problem, ctx.fast = problem, kept is not None
        kept_tensors, ctx.extra = kept if ctx.fast else ((), None)
        ctx.save_for_backward(*tensors, *kept_tensors)

    @staticmethod
    def gradients(ctx, d_out, first_order):
        """The backward: `first_order(ctx, problem, saved, d_out, needs)`
        from what the forward kept, where it serves, else
        `_Attention.gradients`."""
        query, key, value, bias, allowed, dead, *kept = ctx.saved_tensors
        problem = ctx.problem.using(bias, allowed, dead)
        needs = ctx.needs_input_grad[:3]
        if ctx.fast and not torch.is_grad_enabled() and not _batched(d_out):
            grads = first_order(ctx, problem, (query, key, value, *kept), d_out, needs)
        else:
            grads = problem.gradients(query, key, value, d_out, needs)
        return (*grads, None, None, None, None)


def _batched(x):
    """Whether `x` is mapped over (a `torch.func.vmap` of the backward, or
    the batched gradients of `gradcheck`, by the older `vmap`): torch's
    kernels and in-place updates of unmapped tensors do not take it."""
    functorch = torch._C._functorch
    return _transformed() or functorch.is_batchedtensor(x) or functorch.is_legacy_batchedtensor(x)


def _vmap_rule(function, info, in_dims, query, key, value, bias, allowed, dead, problem):
    """`function` under `vmap`: the mapped dimension folded into the batch
    (`V * B`), the queries, keys and values copied out where not mapped,
    a mask or bias that broadcasts left as it is."""
    size = info.batch_size
    batch = (query if in_dims[0] is None else query.movedim(in_dims[0], 0)[0]).shape[0]

    def fold(x, dim, full):
        if x is None:
            return None
        if dim is None:
            if not full and x.shape[0] == 1:
                return x
            x = x.unsqueeze(0)
        else:
            x = x.movedim(dim, 0)
        x = x.expand(size, batch, *x.shape[2:])
        return x.reshape(size * batch, *x.shape[2:])

    args = (query, key, value, bias, allowed, dead)
    folded = [fold(x, d, i < 3) for i, (x, d) in enumerate(zip(args, in_dims))]
    out = function.apply(*folded, problem)
    return out.reshape(size, batch, *out.shape[1:]), 0


class _Fused(_Function):
    """torch's fused attention, its own backward kept for the first order."""

    @staticmethod
    def forward(query, key, value, bias, allowed, dead, problem):
        with torch.enable_grad():
            inputs = [x.detach().requires_grad_() for x in (query, key, value)]
            out = problem.using(bias, allowed, dead).fused(*inputs)
        problem.kept = ((), (inputs, out))
        return out.detach()

    @staticmethod
    def backward(ctx, d_out):
        return _Function.gradients(ctx, d_out, _Fused.first_order)

    @staticmethod
    def vmap(info, in_dims, *args):
        return _vmap_rule(_Fused, info, in_dims, *args)

    @staticmethod
    def first_order(ctx, problem, saved, d_out, needs):
        # Retained: a second backward through the same graph
        # (`retain_graph=True`) runs it again.
        inputs, out = ctx.extra
        wanted = [x for x, need in zip(inputs, needs) if need]
        grads = iter(torch.autograd.grad(out, wanted, d_out, retain_graph=True))
        return tuple(next(grads) if need else None for need in needs)


class _RowBlocks(_Function):
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
    def forward(query, key, value, bias, allowed, dead, problem):
        view = problem.using(bias, allowed, dead)
        q, k, v = _RowBlocks.matrices(query, key, value, view)
        heads, rows, keys = q.shape[0], q.shape[1], k.shape[1]
        size = _block_rows(heads, rows, keys)
        k_t = k.transpose(1, 2)
        probs, outs = [], []
        for start in range(0, rows, size):
            logits = torch.bmm(q[:, start : start + size], k_t)
            view.mask_logits(_RowBlocks.per_head(logits, query), start, size)
            p = torch.softmax(logits, -1)
            if dead is not None:
                _RowBlocks.per_head(p, query).masked_fill_(_rows(dead, start, size), 0.0)
            probs.append(p)
            outs.append(torch.bmm(p, v))
        # The matrices (small next to the probabilities; copying them
        # again costs more) and the probabilities.
        problem.kept = ((q, k, v, *probs), size)
        return _RowBlocks.per_head(torch.cat(outs, 1), query)

    @staticmethod
    def backward(ctx, d_out):
        return _Function.gradients(ctx, d_out, _RowBlocks.first_order)

    @staticmethod
    def vmap(info, in_dims, *args):
        return _vmap_rule(_RowBlocks, info, in_dims, *args)

    @staticmethod
    def first_order(ctx, problem, saved, d_out, needs):
        query, _, _, q, k, v, *probs = saved
        need_q, need_k, need_v = needs
        # An empty row's upstream (even inf) is dropped.
        d_out = problem.cleared(d_out).reshape(q.shape)
        d_q = torch.empty_like(q) if need_q else None
        d_k = torch.zeros_like(k) if need_k else None
        d_v = torch.zeros_like(v) if need_v else None
        v_t = v.transpose(1, 2)
        for i, p in enumerate(probs):
            block = slice(i * ctx.extra, (i + 1) * ctx.extra)
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


def _apply(function, q, key, value, bias, mask, scale, is_causal):
    problem = _Attention(q, key, bias, mask, scale, is_causal)
    key, value = problem.heads_of(key), problem.heads_of(value)
    return problem.output(function.apply(problem.query, key, value, *problem.tensors(), problem))


def native_attention(q, key, value, bias, mask, scale, is_causal, cap):
    """`attention_kernel`'s output by torch's fused attention, or None
    where it does not compute ours (`_usable`). `q` `(B, T, K, G, H)`,
    `key`/`value` `(B, S, K, H)`, rank-5 `bias`/`mask`."""
    if not _usable(q, key, bias, cap):
        return None
    return _apply(_Fused, q, key, value, bias, mask, scale, is_causal)


def native_materialised_attention(q, key, value, bias, mask, scale, is_causal, cap):
    """The materialised formulation's output (`attention._materialised`)
    by exact blocks of query rows, or None where it does not apply
    (`_usable`). The arguments of `native_attention`."""
    if not _usable(q, key, bias, cap):
        return None
    return _apply(_RowBlocks, q, key, value, bias, mask, scale, is_causal)
