"""PyTorch: the native pass of each `keras.ops` kernel (the norms, the
softmax family, the dense softmax cross-entropy), named in the table
`PASSES` of this package, which `dispatch.native_pass` reads.

Eager PyTorch runs each `keras.ops` call as a pass over memory, and
`keras.ops.custom_gradient` runs the forward pass without autograd, so
the `keras.ops` kernels (norms.py, softmax.py, cross_entropy.py) would
recompute it in the backward pass. Here each
kernel has a native pass, which `TorchFused` (`fused.py`) runs, written
with torch's own fused ops (`vector_norm`, `softmax`, `log_softmax`, in-place updates of fresh
temporaries), and the rare cases take Python branches, which cost a
host sync and nothing else in eager mode: the overflow/underflow rescue
of a norm only for the slices that left the range, the general softmax
only for slices without a finite maximum. A native pass returns None
where it does not apply; the `keras.ops` kernel then runs instead (in
the backward pass: recomputing its forward pass from the saved inputs).
A backward pass that autograd differentiates again (`create_graph=True`,
the only case where grad mode is on inside it) also runs the `keras.ops`
kernel, with autograd: second order works as on the other backends.

Each native pass is `(forward, backward)`: `forward(*inputs) -> None or
(output, saved)`, `saved` a tuple of tensors and Python values;
`backward(inputs, saved, upstream, needs) -> None or [gradients]`,
`needs[i]` whether input `i` wants one (None for those that do not).
"""

import torch

from keras_stable.common.dtypes import dtype_of
from keras_stable.ops._kernels.shared import RESCUE

_INF = float("inf")
_NEG_INF = float("-inf")


def _torch_any(t):
    """`bool(t.any())`: a host sync."""
    return bool(torch.any(t))


def _torch_dim(axis):
    """The one axis of `axis` (an int or a tuple), or None for several."""
    if isinstance(axis, int):
        return axis
    return axis[0] if len(axis) == 1 else None


def _torch_masked(x, mask):
    """`x` with the masked entries `-inf` (x itself without a mask)."""
    return x if mask is None else torch.where(mask, x, _NEG_INF)


def _torch_norm_parts(x, axes, rescue):
    """`(y, c, n, ok)` per slice (keepdims), as `_square_sum`: `y = c x`
    (`x` itself where `c` is None), `n = ||y||`, `ok` the slices with a
    derivative (not the zero vector, no infinite entry; NaN included).

    One `vector_norm` (no temporary); the rescue by a power of two `c`
    only when a slice overflowed or underflowed (a zero vector did not:
    its largest magnitude is 0), then for those slices only.
    """
    n = torch.linalg.vector_norm(x, dim=axes, keepdim=True)
    c = None
    if rescue:
        hi, lo, low = RESCUE[dtype_of(x)]
        small = n < 2.0 ** (low / 2)
        big = n == _INF  # an infinite entry too: rescued, it stays inf
        if _torch_any(small):
            small &= torch.linalg.vector_norm(x, ord=_INF, dim=axes, keepdim=True) != 0
        if _torch_any(small | big):
            c = torch.ones_like(n).masked_fill_(small, 2.0**lo).masked_fill_(big, 2.0**-hi)
            x = x * c
            n = torch.linalg.vector_norm(x, dim=axes, keepdim=True)
    return x, c, n, (n != 0) & (n != _INF)


def _torch_inverse(n, ok):
    """`1 / n` where `ok`, else 0."""
    return torch.where(ok, 1.0 / n, 0.0)


def _torch_select(grad, ok):
    """`grad`, 0 on the slices that are not `ok` (in place)."""
    return grad.masked_fill_(~ok, 0.0) if not bool(torch.all(ok)) else grad


def norm_pass(axes, rescue):
    """`norm_kernel`: `n / c`; gradient `(y * g) / n`."""

    def forward(x):
        y, c, n, ok = _torch_norm_parts(x, axes, rescue)
        return (n if c is None else n / c), (c, n, ok)

    def backward(inputs, saved, g, needs):
        (x,) = inputs
        c, n, ok = saved
        factor = torch.where(ok, g / n, 0.0)
        grad = x * factor if c is None else (x * c).mul_(factor)
        return [_torch_select(grad, ok)]

    return forward, backward


def l2_normalize_pass(axes, rescue):
    """`l2_normalize_kernel`: `u = y / n`; gradient
    `g / ||x|| - y * (sum(g * y) / n**2 / ||x||)`."""

    def forward(x):
        y, c, n, ok = _torch_norm_parts(x, axes, rescue)
        inv = _torch_inverse(n, ok)
        return y * inv, (c, n, ok, inv)

    def backward(inputs, saved, g, needs):
        (x,) = inputs
        c, n, ok, inv = saved
        y = x if c is None else x * c
        scale = inv if c is None else inv * c  # 1 / ||x||
        dot = torch.sum(g * y, dim=axes, keepdim=True) * inv  # sum(g * u)
        grad = (g * scale).addcmul_(y, (inv * dot) * scale, value=-1.0)
        return [_torch_select(grad, ok)]

    return forward, backward


def cosine_pass(axis, rescue):
    """`cosine_kernel`: `sum(y1 * y2) / (n1 n2)`, clipped; gradients
    `g (u2 - cos u1) / ||x1||` and symmetrically."""
    axes = (axis,)

    def forward(x1, x2):
        y1, c1, n1, ok1 = _torch_norm_parts(x1, axes, rescue)
        y2, c2, n2, ok2 = _torch_norm_parts(x2, axes, rescue)
        inv1, inv2 = _torch_inverse(n1, ok1), _torch_inverse(n2, ok2)
        # |sum(y1 * y2)| <= n1 n2 <= max(n1, n2)**2: in range, as both.
        raw = torch.sum(y1 * y2, dim=axis, keepdim=True) * inv1 * inv2
        cos = torch.clamp(raw, -1.0, 1.0)
        unclipped = ~((raw > 1.0) | (raw < -1.0))  # NaN passes
        return cos, (c1, ok1, inv1, c2, ok2, inv2, cos, unclipped)

    def backward(inputs, saved, g, needs):
        x1, x2 = inputs
        c1, ok1, inv1, c2, ok2, inv2, cos, unclipped = saved
        g = torch.where(unclipped, g, 0.0)
        y1 = x1 if c1 is None else x1 * c1
        y2 = x2 if c2 is None else x2 * c2
        grads = []
        for need, (ya, ca, oka, inva), (yb, invb) in (
            (needs[0], (y1, c1, ok1, inv1), (y2, inv2)),
            (needs[1], (y2, c2, ok2, inv2), (y1, inv1)),
        ):
            if not need:
                grads.append(None)
                continue
            # g / ||xa|| (0 where `a` has no derivative) times ub - cos ua.
            ga = torch.where(oka, g * (inva if ca is None else inva * ca), 0.0)
            grad = (yb * (invb * ga)).addcmul_(ya, inva * (ga * cos), value=-1.0)
            grads.append(_torch_select(grad, oka))
        return grads

    return forward, backward


def softmax_pass(axis, mask):
    """`softmax_kernel` as `torch.softmax`, which it is wherever each slice
    has a finite maximum (elsewhere torch gives NaN); gradient
    `p g - p sum(p g)`, which is the kernel's wherever it is finite (a
    non-finite upstream gradient at `p == 0` makes its slice NaN)."""
    dim = _torch_dim(axis)

    def forward(x):
        if dim is None:
            return None
        probs = torch.softmax(_torch_masked(x, mask), dim)
        if bool(torch.isnan(torch.sum(probs))):
            return None
        return probs, (probs,)

    def backward(inputs, saved, g, needs):
        (probs,) = saved
        gp = g * probs
        grad = gp.addcmul_(probs, torch.sum(gp, dim=dim, keepdim=True), value=-1.0)
        return [grad] if bool(torch.isfinite(torch.sum(grad))) else None

    return forward, backward


def log_softmax_pass(axis, mask):
    """`log_softmax_kernel` as `torch.log_softmax` (the kernel wherever
    each slice has a finite maximum); gradient `g - exp(out) sum(g)` over
    the entries that are not `-inf`."""
    dim = _torch_dim(axis)

    def forward(x):
        if dim is None:
            return None
        out = torch.log_softmax(_torch_masked(x, mask), dim)
        lowest = torch.amin(out)  # NaN: a slice without a finite maximum
        if bool(torch.isnan(lowest)):
            return None
        return out, (out, bool(lowest == _NEG_INF))

    def backward(inputs, saved, g, needs):
        out, dead = saved
        if dead:  # masked or -inf entries: their upstream gradient is dropped
            g = torch.where(out != _NEG_INF, g, 0.0)
        return [torch.exp(out).mul_(-torch.sum(g, dim=dim, keepdim=True)).add_(g)]

    return forward, backward


def logsumexp_pass(axis, mask):
    """`logsumexp_kernel`, keeping `exp(x - max)` and its sum; gradient
    `g exp(x - max) / total`, 0 for the rows whose value is infinite."""

    def forward(x):
        x = _torch_masked(x, mask)
        shift = torch.amax(x, dim=axis, keepdim=True)
        shift = torch.where(torch.isfinite(shift), shift, 0.0)
        e = torch.exp(x - shift)
        total = torch.sum(e, dim=axis, keepdim=True)
        # log(0) = -inf for a row with nothing left (its shift is 0).
        lse = torch.log(total).add_(shift)
        return lse, (e, total, ~torch.isinf(lse))

    def backward(inputs, saved, g, needs):
        e, total, ok = saved
        return [_torch_select(e * torch.where(ok, g / total, 0.0), ok)]

    return forward, backward


def softmax_cross_entropy_pass(axis, mask):
    """`softmax_cross_entropy_kernel` for logits that are all finite and
    unmasked (the `keras.ops` kernel otherwise): `sum(labels * (log_total
    - z))`, `z = x - max`; gradients `exp(z) sum(labels) g / total - g
    labels` and `g (log_total - z)`, `z` recomputed from `x`."""

    def forward(labels, x):
        if mask is not None:
            return None
        lowest, shift = torch.aminmax(x, dim=axis, keepdim=True)
        if not bool(torch.all(torch.isfinite(lowest) & torch.isfinite(shift))):
            return None
        z = x - shift
        total = torch.sum(torch.exp(z), dim=axis, keepdim=True)
        log_total = torch.log(total)
        loss = torch.sum(z.neg_().add_(log_total).mul_(labels), dim=axis)
        return loss, (shift, total, log_total)

    def backward(inputs, saved, g, needs):
        labels, x = inputs
        shift, total, log_total = saved
        g = torch.unsqueeze(g, axis)
        z = x - shift
        d_labels = torch.sub(log_total, z).mul_(g) if needs[0] else None
        d_x = None
        if needs[1]:
            factor = torch.sum(labels, dim=axis, keepdim=True) * (g / total)
            d_x = z.exp_().mul_(factor).addcmul_(labels, g, value=-1.0)
        return [d_labels, d_x]

    return forward, backward
