"""PyTorch: the native passes of the kernels, and torch's own fused
cross-entropies (`native_sparse_cross_entropy`,
`native_sigmoid_cross_entropy`), CTC (`native_ctc_loss`,
`native_ctc_loss_over_frames`) and attention
(`native_attention`, `native_materialised_attention`, written in
`torch_attention.py` and named here, where `dispatch.native_op` finds them).

With `torch_attention.py`, the only module of keras_stable that imports
torch at module load; `dispatch.py`, the one backend switch, imports it
only when the backend is torch. A `<name>_pass(*static_args)` returns the `(forward, backward)` pair
that `dispatch.fused` runs through `TorchFused` for the kernel `<name>`.
"""

import torch

from keras_stable.common.dtypes import dtype_of
from keras_stable.ops._kernels.shared import RESCUE
from keras_stable.ops._kernels.torch_attention import native_attention  # noqa: F401
from keras_stable.ops._kernels.torch_attention import native_materialised_attention  # noqa: F401

_INF = float("inf")
_NEG_INF = float("-inf")

# Eager PyTorch runs each `keras.ops` call as a pass over memory, and
# `keras.ops.custom_gradient` runs the forward pass without autograd, so
# the `keras.ops` kernels (norms.py, softmax.py, cross_entropy.py) would
# recompute it in the backward pass. Here each
# kernel is a `torch.autograd.Function` written with torch's own fused
# ops (`vector_norm`, `softmax`, `log_softmax`, in-place updates of fresh
# temporaries), and the rare cases take Python branches, which cost a
# host sync and nothing else in eager mode: the overflow/underflow rescue
# of a norm only for the slices that left the range, the general softmax
# only for slices without a finite maximum. A native pass returns None
# where it does not apply; the `keras.ops` kernel then runs instead (in
# the backward pass: recomputing its forward pass from the saved inputs).
# A backward pass that autograd differentiates again (`create_graph=True`,
# the only case where grad mode is on inside it) also runs the `keras.ops`
# kernel, with autograd: second order works as on the other backends.
#
# Each native pass is `(forward, backward)`: `forward(*inputs) -> None or
# (output, saved)`, `saved` a tuple of tensors and Python values;
# `backward(inputs, saved, upstream, needs) -> None or [gradients]`,
# `needs[i]` whether input `i` wants one (None for those that do not).


def torch_fused(forward, backward, native, inputs):
    """The `dispatch.fused` of PyTorch: `native` where it applies, else the
    `keras.ops` kernel `(forward, backward)`."""
    return TorchFused.apply((forward, backward, native), *inputs)


class TorchFused(torch.autograd.Function):
    @staticmethod
    def forward(ctx, kernel, *inputs):
        forward, _, native = kernel
        # Symbolic shapes (meta tensors) and tracing by torch.compile or
        # torch.export (no data-dependent branches there) take the
        # `keras.ops` kernel.
        traced = inputs[0].is_meta or torch.compiler.is_compiling()
        result = None if native is None or traced else native[0](*inputs)
        ctx.kernel, ctx.native = kernel, result is not None
        output, saved = result if ctx.native else (forward(*inputs)[0], ())
        tensors = [isinstance(v, torch.Tensor) for v in saved]
        ctx.layout = tensors
        ctx.values = [v for v, t in zip(saved, tensors) if not t]
        ctx.save_for_backward(*inputs, *(v for v, t in zip(saved, tensors) if t))
        ctx.n_inputs = len(inputs)
        return output

    @staticmethod
    def backward(ctx, upstream):
        forward, backward, native = ctx.kernel
        stored = ctx.saved_tensors
        inputs, tensors = stored[: ctx.n_inputs], iter(stored[ctx.n_inputs :])
        values = iter(ctx.values)
        saved = [next(tensors) if t else next(values) for t in ctx.layout]
        grads = None
        if ctx.native and not torch.is_grad_enabled() and not torch.compiler.is_compiling():
            needs = ctx.needs_input_grad[1:]
            grads = native[1](inputs, saved, upstream.to(inputs[-1].dtype), needs)
        if grads is None:
            output, saved = forward(*inputs)
            grads = backward(inputs, saved, output, upstream)
        return (None, *grads)


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


def native_sparse_cross_entropy(labels, x, axis, ignore_class):
    """`sparse_softmax_cross_entropy`'s value (`logsumexp(x) - x[label]`, 0
    for `ignore_class`) by `torch.nn.functional.cross_entropy`, torch's
    fused forward and backward, where it gives exactly that: PyTorch
    eager, float32/float64 logits all finite (no mask: the caller checks),
    every label in range or `ignore_class`. None otherwise (other
    backends, tracing, `-inf` logits, out-of-range labels), and the
    portable formulation runs instead. Two host syncs (the checks)."""
    if x.is_meta or torch.compiler.is_compiling():
        return None
    if x.dtype not in (torch.float32, torch.float64) or x.ndim == 0:
        return None
    lowest, highest = torch.aminmax(x)
    if not bool(torch.isfinite(lowest) & torch.isfinite(highest)):
        return None
    labels = labels.long()
    ok = (labels >= 0) & (labels < x.shape[axis])
    if ignore_class is not None:
        ok |= labels == ignore_class
    if not bool(torch.all(ok)):
        return None
    # Labels in range are never negative: -100 matches none of them.
    ignore_index = -100 if ignore_class is None else int(ignore_class)
    if x.ndim > 1:
        x = torch.movedim(x, axis, 1)
    return torch.nn.functional.cross_entropy(x, labels, reduction="none", ignore_index=ignore_index)


class SigmoidCrossEntropy(torch.autograd.Function):
    """`max(x, 0) - x y + log1p(exp(-|x|))` in torch's ops, with the closed
    form backward `sigmoid(x) - y` (and `-x` for the labels) from the saved
    inputs. Not torch's `binary_cross_entropy_with_logits`: it computes
    `(1 - y) x - log_sigmoid(x)`, which for a confident correct logit (label
    0, logit -30) cancels to round-off instead of `log1p(exp(-30))` = 9.4e-14."""

    @staticmethod
    def forward(ctx, labels, x):
        ctx.save_for_backward(labels, x)
        loss = torch.clamp_min(x, 0).sub_(x * labels)
        return loss.add_(torch.log1p(torch.exp(-torch.abs(x))))

    @staticmethod
    def backward(ctx, upstream):
        labels, x = ctx.saved_tensors
        d_labels = -x * upstream if ctx.needs_input_grad[0] else None
        d_x = (torch.sigmoid(x) - labels) * upstream if ctx.needs_input_grad[1] else None
        return d_labels, d_x


def native_sigmoid_cross_entropy(labels, x):
    """`sigmoid_cross_entropy`'s value from logits (`max(x, 0) - x y +
    log1p(exp(-|x|))`, gradient `sigmoid(x) - y`) by `SigmoidCrossEntropy`
    (one autograd node instead of the portable formulation's wheres):
    PyTorch eager, float32/float64, every logit finite (one host sync).
    None otherwise, and the portable formulation runs instead."""
    if x.is_meta or torch.compiler.is_compiling():
        return None
    if x.dtype not in (torch.float32, torch.float64) or labels.dtype != x.dtype:
        return None
    if not bool(torch.all(torch.isfinite(x))):
        return None
    return SigmoidCrossEntropy.apply(labels, x)


# Beyond this magnitude a log-probability may fall below the portable
# formulation's floor for an unreachable class (-1e30 in the CTC kernel),
# and the two would differ: the native CTC then stands aside.
_CTC_LOGIT_LIMIT = 1e6


def native_ctc_loss(target, logits, target_length, output_length, mask_index):
    """`-log p(target | logits)` per sample by `torch.nn.functional.ctc_loss`
    (torch's C++ forward-backward), where it gives the portable
    formulation's values: PyTorch eager, float32/float64 logits of
    magnitude below 1e6, every label within its length a class other than
    the blank, lengths within the padding. Infeasible samples come back 0
    with a zero gradient (`zero_infinity=True`): the caller applies its
    own feasibility rule and the sign clamp, as for the portable loss.
    None otherwise, and the portable formulation runs. One host sync (the
    checks)."""
    if logits.is_meta or torch.compiler.is_compiling():
        return None
    if logits.dtype not in (torch.float32, torch.float64) or logits.numel() == 0:
        return None
    batch, max_label = target.shape
    time, classes = logits.shape[1], logits.shape[2]
    lengths, frames = target_length.long(), output_length.long()
    within = torch.arange(max_label, device=target.device) < lengths[:, None]
    labels_ok = (target >= 0) & (target < classes) & (target != mask_index)
    lowest, highest = torch.aminmax(logits)
    ok = (
        (lowest > -_CTC_LOGIT_LIMIT)
        & (highest < _CTC_LOGIT_LIMIT)
        & torch.all(labels_ok | ~within)
        & torch.all((lengths >= 0) & (lengths <= max_label))
        & torch.all((frames >= 0) & (frames <= time))
    )
    if not bool(ok):
        return None
    log_probs = torch.log_softmax(logits, dim=-1).transpose(0, 1)
    # Entries past a label's length are never read; any class will do.
    labels = torch.where(within, target.long(), torch.zeros_like(target, dtype=torch.long))
    return torch.nn.functional.ctc_loss(
        log_probs, labels, frames, lengths, blank=mask_index, reduction="none", zero_infinity=True
    )


def native_ctc_loss_over_frames(target, logits, target_length, frames, mask_index):
    """`native_ctc_loss` over the frames that the boolean `(batch, time)`
    `frames` marks as input (the Keras mask of `y_pred`, a prefix or not):
    those frames gathered to the front of each sample in their order, the
    others after them and past the sample's length, so torch's CTC reads
    exactly the frames the portable recursion reads; a frame that is not
    input gets a zero gradient, as there. None where `native_ctc_loss`
    declines."""
    if logits.is_meta or torch.compiler.is_compiling():
        return None
    output_length = torch.sum(frames, dim=1, dtype=torch.int32)
    prefix = torch.arange(frames.shape[1], device=frames.device) < output_length[:, None]
    # Padding after each sample's frames (a prefix) needs no gather.
    if not bool(torch.equal(prefix, frames)):
        order = torch.argsort((~frames).to(torch.uint8), dim=1, stable=True)
        logits = torch.take_along_dim(logits, order[:, :, None], dim=1)
    return native_ctc_loss(target, logits, target_length, output_length, mask_index)
