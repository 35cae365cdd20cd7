"""PyTorch: torch's own fused losses where they give the portable
formulation's values (`native_sparse_cross_entropy`,
`native_sigmoid_cross_entropy`, `native_ctc_loss`,
`native_ctc_loss_over_frames`), named in the table `OPS` of this package,
which `dispatch.native_op` reads. Each returns None where it does not
apply, and the portable formulation runs instead.
"""

import torch


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
