"""Which call went non-finite first, and which trap the evidence points to.

Forward (only when the loss, or the output, is not finite): the first call
that turns finite inputs into NaN or +inf; else the first that turns
infinite inputs into NaN (a row of -inf, inf - inf); else NaN inputs
multiplied by the zeros of a mask; else a -inf made from finite inputs.
Gradient (only when every value is finite): walking back from the loss,
the first call where the gradient reaching an input is non-finite while
the gradient reaching its output is finite.

The trap is named from the evidence around that call (`evidence.py`): its
inputs, its output, its compute dtype, and the `keras.ops` functions it
ran: a trap about an operation (the log of 0, a norm at 0) is named only
where the call ran that operation, or where what it ran is not known (a
built-in layer, backend code). Each rule is a heuristic; when none fits,
the trap is `"unknown"` and the finding still names the call.
"""

import dataclasses

import keras
import numpy as np

from keras_stable.audit.evidence import HALF_MAX
from keras_stable.audit.evidence import Evidence
from keras_stable.audit.evidence import _finite
from keras_stable.audit.evidence import _has_nan
from keras_stable.audit.evidence import _has_pos_inf
from keras_stable.audit.evidence import _is_floating
from keras_stable.audit.execution import LOSS
from keras_stable.audit.execution import TOP
from keras_stable.audit.report import Finding
from keras_stable.audit.report import fix_for

_ENTROPY_DETAIL = (
    "it multiplies a softmax by its log (an entropy): a class masked to -inf has "
    "probability 0 and log-probability -inf, and 0 x -inf = NaN"
)


def _entropy_masked(e):  # noqa: N802 - read as a constant predicate
    """A mask among its inputs, or -inf logits."""
    return bool(e.masks()) or any(np.any(np.isneginf(a)) for _, a in e.floats())


def recognize_forward(evidence):
    """`(trap, detail)` for a call whose output went NaN or inf."""
    e = evidence
    nan_out = _has_nan(e.outputs)
    if nan_out and e.is_entropy() and _entropy_masked(e):
        return "zero_times_inf", _ENTROPY_DETAIL
    rows = e.neg_inf_rows()
    if nan_out and rows:
        return "fully_masked_row", rows + ": softmax/logsumexp of it is 0/0"
    masked = e.masked_non_finite()
    if nan_out and masked and masked[1]:
        what, zero_holders = masked
        return "zero_times_inf", f"{what}, multiplied by the zeros of {zero_holders[0]}"
    large = e.large()
    if large:
        if nan_out:
            return "unshifted_softmax", large + ": exp overflows and inf / inf is NaN"
        if e.huge():
            return "unknown", e.huge()
        return "exp_overflow", large
    # A half-precision call that is finite in float32 overflowed inside:
    # rows of NaN there are exp's inf / inf, not rows with nothing left
    # (those are NaN in float32 too).
    half = e.finite_in_float32("forward")
    if nan_out:
        empty = None if half else e.empty_mask_rows()
        if empty:
            return "fully_masked_row", empty + ": the softmax over it is 0/0"
        rows = None if half else e.softmax_without_rows("forward")
        if rows:
            return "fully_masked_row", rows
    spread = e.spread()
    if spread:
        return "unshifted_softmax", spread
    log_zero = e.log_of_zero("forward")
    if log_zero:
        return "log_of_zero", log_zero
    zeros = e.zeros() if e.may_take_norm() else None
    if zeros and half:
        return "epsilon_underflow", (
            f"{zeros}; finite when computed in float32: an epsilon that rounds to 0 in {e.dtype}"
        )
    if nan_out and zeros:
        return "norm_at_zero", zeros + ": x / ||x|| is 0/0 there"
    if half:
        detail = (
            f"finite when computed in float32: a value inside its call leaves the {e.dtype} "
            "range (an exp, a sum or a product past its max)"
        )
        if e.masks():
            detail += (
                f"; it takes a mask ({e.masks()[0][0]}): a mask constant such as -1e9 "
                f"overflows {e.dtype} (max {HALF_MAX[e.dtype]:.5g}) to -inf, and 0 x -inf = NaN"
            )
        if e.has_sublayers():
            detail += (
                "; its sublayers take the global policy unless created with "
                "dtype=self.dtype_policy: a float32 layer needs float32 sublayers too"
            )
        return "half_overflow", detail
    return "unknown", ""


def recognize_gradient(evidence):
    """`(trap, detail)` for a call whose input gradient went non-finite."""
    e = evidence
    if e.is_entropy() and _entropy_masked(e):
        return "zero_times_inf", _ENTROPY_DETAIL
    rows = e.neg_inf_rows()
    if rows:
        return "fully_masked_row", rows + ": the gradient of its softmax/logsumexp is 0/0"
    rows = e.softmax_without_rows("gradient")
    if rows:
        return "fully_masked_row", rows
    masked = e.masked_non_finite()
    if masked:
        what, zero_holders = masked
        where = f" (masked by {zero_holders[0]})" if zero_holders else ""
        return "zero_times_inf", (
            f"{what}{where}: the value is masked but the gradient still multiplies 0 by NaN/inf"
        )
    log_zero = e.log_of_zero("gradient")
    if log_zero:
        return "log_of_zero", log_zero
    zeros = e.zeros() if e.may_take_norm() else None
    if zeros and e.finite_in_float32("gradient"):
        return "epsilon_underflow", (
            f"{zeros}; the gradient is finite in float32: an epsilon that rounds to 0 in {e.dtype}"
        )
    if zeros:
        return "norm_at_zero", zeros + ": the gradient of a norm/sqrt there is 0/0"
    large = e.large()
    if large:
        return "exp_overflow", large + ": the derivative overflows"
    if e.finite_in_float32("gradient"):
        return "unknown", f"finite in float32: a {e.dtype} overflow or underflow"
    return "unknown", ""


def _leaves(run):
    """Calls that compute (layers, operations, the loss), in call order."""
    return [i for i, info in enumerate(run.calls) if info.node.kind in ("layer", "op", LOSS)]


def _nested_models(run):
    """Nested models, innermost first: code in their own `call()`."""
    nested = [i for i, info in enumerate(run.calls) if info.node.kind == "model"]
    return sorted(nested, key=lambda i: -run.calls[i].depth)


def _final(run):
    """The values training sees: the loss when there is one, else the outputs."""
    for i, info in enumerate(run.calls):
        if info.node.kind == LOSS:
            return run.outputs[i]
    return run.outputs[0] if run.calls else []


def _finding(run, index, stage, trap, detail, probe):
    info = run.calls[index]
    name = info.node.name
    if info.node.kind in (TOP, "model"):
        detail = "; ".join(
            p for p in ("in the model's own call(), outside its layers", detail) if p
        )
    kind = "loss" if info.node.kind == LOSS else "layer"
    return Finding(
        layer=name,
        stage=stage,
        trap=trap,
        fix=fix_for(trap, kind),
        mode=run.mode,
        probe=probe,
        detail=detail,
    )


def _non_finite_weights(info):
    weights = getattr(info.node.op, "weights", None) or []
    bad = []
    for w in weights:
        try:
            value = np.asarray(keras.ops.convert_to_numpy(w.value))
        except Exception:  # noqa: BLE001 - a weight that cannot be read is not evidence
            continue
        if _is_floating(value) and not np.all(np.isfinite(value)):
            bad.append(w.path)
    return bad


def _recognized(run, index, probe, rerun):
    trap, detail = recognize_forward(Evidence(run, index, rerun))
    return _finding(run, index, "forward", trap, detail, probe)


def find_forward(run, probe=None, rerun=None):
    """The forward finding of `run`, or `None` when the values are finite."""
    if _finite(_final(run)):
        return None
    leaves = _leaves(run)
    for i in leaves:
        bad = _non_finite_weights(run.calls[i])
        if bad and not _finite(run.outputs[i]):
            detail = f"its weights are not finite ({', '.join(bad[:3])}): a previous update made them NaN/inf"
            return _finding(run, i, "forward", "unknown", detail, probe)
    # 1. NaN or +inf made from finite inputs: where the trouble starts (in
    # a layer, else in a nested model's own call, innermost first).
    for i in leaves + _nested_models(run):
        out = run.outputs[i]
        if (_has_nan(out) or _has_pos_inf(out)) and _finite(run.inputs[i]):
            return _recognized(run, i, probe, rerun)
    # 2. NaN made from infinite inputs: a row of -inf (a mask), inf - inf.
    for i in leaves:
        if _has_nan(run.outputs[i]) and not _has_nan(run.inputs[i]):
            return _recognized(run, i, probe, rerun)
    # 3. NaN inputs (missing labels) multiplied by the zeros of a mask.
    for i in leaves:
        if _has_nan(run.outputs[i]):
            masked = Evidence(run, i, rerun).masked_non_finite()
            if masked and masked[1]:
                return _recognized(run, i, probe, rerun)
    # 4. -inf made from finite inputs (log(0)) that reaches the loss.
    for i in leaves:
        if not _finite(run.outputs[i]) and _finite(run.inputs[i]):
            return _recognized(run, i, probe, rerun)
    # Nothing turned finite inputs into NaN/inf: the batch itself is not
    # finite, or the non-finite value is made in a model's own call().
    for i in leaves:
        if not _finite(run.outputs[i]):
            bad = [
                lbl for lbl, a in zip(run.calls[i].input_labels, run.inputs[i]) if not _finite([a])
            ]
            if bad:
                if run.calls[i].node.kind == LOSS:
                    trap, detail = recognize_forward(Evidence(run, i, rerun))
                    if trap == "unknown":
                        trap = "zero_times_inf"
                        detail = (
                            "the labels hold NaN/inf: missing labels masked by multiplication "
                            "(0 x NaN) are still NaN"
                        )
                    return _finding(run, i, "forward", trap, detail, probe)
                return _finding(
                    run,
                    i,
                    "forward",
                    "unknown",
                    f"{bad[0]} is already NaN/inf: the batch or a weight is not finite",
                    probe,
                )
    return _finding(run, 0, "forward", "unknown", "", probe)


def find_gradient(run, probe=None, rerun=None):
    """The gradient finding of `run`, or `None` when the gradients are finite."""
    if run.grads_in is None:
        return None
    candidates = list(reversed(_leaves(run))) + [0]
    for i in candidates:
        grads_in = run.grads_in[i]
        grads_out = run.grads_out[i]
        if run.calls[i].node.kind == LOSS:
            grads_in = run.grads_out[0]  # the gradient reaching the outputs
            grads_out = []
        if not grads_in or _finite(grads_in) or not _finite(grads_out):
            continue
        trap, detail = recognize_gradient(Evidence(run, i, rerun))
        bad = sum(int(np.sum(~np.isfinite(g))) for g in grads_in)
        detail = "; ".join(p for p in (detail, f"{bad} non-finite gradient entries") if p)
        return _finding(run, i, "gradient", trap, detail, probe)
    return None


def _feeds_a_log_loss(run, layer):
    """Whether the layer `layer` (a call index) returns a model output that
    a loss takes the log of (it ran `log`, or it is a cross-entropy)."""
    if all(p is None or p[0] != layer for p in run.producers):
        return False
    for info in run.calls:
        if info.node.kind == LOSS:
            name = getattr(info.node.op, "__name__", "").lower().replace("_", "")
            return "log" in info.operations or "crossentropy" in name
    return False


_ATTENTION_FIX = (
    "keras_stable.ops.dot_product_attention(mask=...) / layers.StableMultiHeadAttention"
)

_ENTROPY_FIX = "keras_stable.ops.entropy(logits, mask=...)"
_MIXTURE_FIX = (
    "keras_stable.losses.MixtureDensityNLL(num_components) / ops.mixture_nll "
    "(the log-density through logsumexp)"
)

_LOGITS_FIX = (
    "the loss on the logits: drop the softmax, keras_stable.losses."
    "StableSoftmaxCrossEntropy() (or from_logits=True); keeping it: layers.StableSoftmax "
    "with StableSoftmaxCrossEntropy(from_logits=False)"
)


def find(run, probe=None, rerun=None):
    """The finding of one run: forward first; the gradient only when the
    values are finite (a NaN value makes every gradient NaN)."""
    finding = find_forward(run, probe, rerun) or find_gradient(run, probe, rerun)
    if finding is None:
        return None
    index = next((i for i, c in enumerate(run.calls) if c.node.name == finding.layer), None)
    if index is None:
        return finding
    if finding.trap in ("unshifted_softmax", "exp_overflow") and _feeds_a_log_loss(run, index):
        # A softmax output that a log loss reads: swapping the softmax
        # alone leaves log(0) in the loss (the probabilities underflow).
        return dataclasses.replace(finding, fix=_LOGITS_FIX)
    evidence = Evidence(run, index)
    if finding.trap in ("fully_masked_row", "half_overflow") and evidence.is_attention():
        return dataclasses.replace(finding, fix=_ATTENTION_FIX, page="attention")
    if finding.trap == "zero_times_inf" and evidence.is_entropy():
        return dataclasses.replace(finding, fix=_ENTROPY_FIX, page="entropy")
    if finding.trap == "log_of_zero" and evidence.is_gaussian_density():
        return dataclasses.replace(finding, fix=_MIXTURE_FIX, page="mixture-densities")
    return finding
