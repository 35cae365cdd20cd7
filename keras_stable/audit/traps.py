"""Which call went non-finite first, and which trap the evidence points to.

Forward (only when the loss, or the output, is not finite): the first call
that turns finite inputs into NaN or +inf; else the first that turns
infinite inputs into NaN (a row of -inf, inf - inf); else NaN inputs
multiplied by the zeros of a mask; else a -inf made from finite inputs.
Gradient (only when every value is finite): walking back from the loss,
the first call where the gradient reaching an input is non-finite while
the gradient reaching its output is finite.

The trap is named from the numbers around that call: its inputs, its
output, its compute dtype. Each rule is a heuristic; when none fits, the
trap is `"unknown"` and the finding still names the call.
"""

import math

import keras
import numpy as np

from keras_stable.audit.execution import LOSS
from keras_stable.audit.execution import TOP
from keras_stable.audit.report import Finding
from keras_stable.audit.report import fix_for
from keras_stable.audit.rows import distribution_rows
from keras_stable.audit.rows import nan_row_shape
from keras_stable.common.keras_internals import sublayers

HALF = ("float16", "bfloat16")

# log of the largest finite value: exp(x) is inf above it.
EXP_LIMIT = {
    "float16": math.log(65504.0),
    "bfloat16": math.log(3.3895e38),
    "float32": math.log(3.4028235e38),
    "float64": math.log(1.7976931348623157e308),
}


# -log of the smallest positive (subnormal) value: exp(x) is 0 below -limit.
UNDERFLOW_LIMIT = {
    "float16": -math.log(5.9604645e-08),
    "bfloat16": -math.log(9.1835e-41),
    "float32": -math.log(1.4e-45),
    "float64": -math.log(5e-324),
}


def _finite(arrays):
    return all(np.all(np.isfinite(a)) for a in arrays if _is_floating(a))


def _is_floating(a):
    return np.issubdtype(np.asarray(a).dtype, np.floating)


def _has_nan(arrays):
    return any(_is_floating(a) and np.any(np.isnan(a)) for a in arrays)


def _has_pos_inf(arrays):
    return any(_is_floating(a) and np.any(np.isposinf(a)) for a in arrays)


def _count(a, predicate):
    return int(np.sum(predicate(a))) if _is_floating(a) else 0


def _is_mask(a, dtype):
    """A boolean tensor, or one holding only 0 and 1 (a 0/1 mask)."""
    a = np.asarray(a)
    if dtype == "bool":
        return True
    return a.ndim >= 1 and a.size > 1 and bool(np.all((a == 0) | (a == 1)))


def _empty_rows(a):
    """How many rows (slices along the last axis) are all zero/False."""
    a = np.asarray(a)
    if a.ndim == 0 or a.shape[-1] == 0:
        return 0
    return int(np.sum(np.all(a == 0, axis=-1)))


def _neg_inf_rows(a):
    """How many rows (along the last axis) are entirely -inf."""
    if not _is_floating(a) or np.ndim(a) == 0:
        return 0
    return int(np.sum(np.all(np.isneginf(a), axis=-1)))


def _zero_slices(a):
    """`(count, axis)`: the all-zero vectors along the axis where they are
    the largest share (the last axis on a tie).

    The vectors along axis `k` are those a norm over axis `k` reduces
    (`norm(a, axis=k)` has one entry per vector).
    """
    a = np.asarray(a)
    if not _is_floating(a) or a.ndim == 0 or a.size == 0:
        return 0, None
    best = (0.0, 0, None)
    for axis in range(a.ndim):
        if a.shape[axis] < 2 and a.ndim > 1:
            continue
        zero = np.all(a == 0, axis=axis)
        count = int(np.sum(zero))
        share = count / zero.size
        if count and share >= best[0]:
            best = (share, count, axis)
    return best[1], best[2]


def _largest_finite(arrays):
    values = [
        np.max(a[np.isfinite(a)]) for a in arrays if _is_floating(a) and np.any(np.isfinite(a))
    ]
    return max(values) if values else -np.inf


def _compute_dtype(info):
    dtype = info.node.compute_dtype
    floats = [d for d in info.input_dtypes if d.startswith(("float", "bfloat"))]
    if dtype is None or info.node.kind in (LOSS, TOP):
        dtype = floats[0] if floats else "float32"
    return dtype


class _Evidence:
    """The numbers around one call, with the questions the rules ask."""

    def __init__(self, run, index, rerun=None):
        self.info = run.calls[index]
        self.inputs = run.inputs[index]
        self.outputs = run.outputs[index]
        self.labels = self.info.input_labels
        self.dtypes = self.info.input_dtypes
        self.dtype = _compute_dtype(self.info)
        self.grad_out = run.grads_out[index] if run.grads_out else None
        self._rerun = rerun

    def floats(self):
        return [(lbl, a) for lbl, a in zip(self.labels, self.inputs) if _is_floating(a)]

    def masks(self):
        return [
            (lbl, a) for lbl, a, d in zip(self.labels, self.inputs, self.dtypes) if _is_mask(a, d)
        ]

    def data(self):
        """Floating inputs that are not 0/1 masks."""
        masks = {id(a) for _, a in self.masks()}
        return [(lbl, a) for lbl, a in self.floats() if id(a) not in masks]

    def neg_inf_rows(self):
        for lbl, a in self.floats():
            rows = _neg_inf_rows(a)
            if rows:
                return f"{lbl} has {rows} row(s) that are entirely -inf"
        return None

    def empty_mask_rows(self):
        for lbl, a in self.masks():
            rows = _empty_rows(a)
            if rows and np.ndim(a) >= 1:
                return f"{lbl} masks out {rows} entire row(s)"
        return None

    def softmax_without_rows(self, stage):
        """A softmax output whose rows with nothing left are NaN (forward)
        or 0 with a NaN gradient (gradient): whatever layer computes it,
        however the mask was made (an input, a mask built from the tokens
        inside the layer, left padding under a causal mask)."""
        for out in self.outputs:
            empty, rows = distribution_rows(out, "nan" if stage == "forward" else "zero")
            if empty:
                return (
                    f"{empty} of the {rows} rows of its softmax output are "
                    f"{'NaN' if stage == 'forward' else '0'}: a softmax over a row with "
                    "nothing left (every entry masked to -inf) is 0/0"
                )
        if stage == "forward" and any(nan_row_shape(out) for out in self.outputs):
            # Whole rows of NaN after a masked softmax (attention @ values).
            selectors = [
                lbl
                for lbl, a, d in zip(self.labels, self.inputs, self.dtypes)
                if d == "bool" or np.issubdtype(np.asarray(a).dtype, np.integer)
            ]
            if selectors or self.masks():
                name = selectors[0] if selectors else self.masks()[0][0]
                return (
                    f"whole rows of its output are NaN and it takes the mask {name}: "
                    "a softmax over a row with nothing left is 0/0"
                )
        return None

    def masked_non_finite(self):
        """A NaN/inf input next to another input holding zeros (a mask)."""
        bad = [(lbl, a) for lbl, a in self.floats() if not np.all(np.isfinite(a))]
        if not bad:
            return None
        zero_holders = [
            lbl
            for lbl, a in zip(self.labels, self.inputs)
            if all(a is not b for _, b in bad) and np.ndim(a) >= 1 and np.any(np.asarray(a) == 0)
        ]
        lbl, a = bad[0]
        what = f"{lbl} holds {_count(a, np.isnan)} NaN and {_count(a, np.isinf)} inf"
        return what, zero_holders

    def large(self):
        limit = EXP_LIMIT.get(self.dtype, EXP_LIMIT["float32"])
        largest = _largest_finite([a for _, a in self.floats()])
        if largest > limit:
            return f"inputs reach {largest:.4g}, above log(max {self.dtype}) = {limit:.4g}"
        return None

    def huge(self):
        """Inputs whose square overflows: an inf that is not exp's."""
        largest = max(
            (
                float(np.max(np.abs(a[np.isfinite(a)])))
                for _, a in self.floats()
                if np.any(np.isfinite(a))
            ),
            default=0.0,
        )
        limit = math.sqrt(math.exp(EXP_LIMIT.get(self.dtype, EXP_LIMIT["float32"])))
        if largest > limit:
            return f"inputs reach {largest:.4g}: their square overflows {self.dtype}"
        return None

    def spread(self):
        """Logits so far apart within a row that exp of the smallest, over
        the sum, underflows to 0 (and log of it is -inf)."""
        limit = UNDERFLOW_LIMIT.get(self.dtype, UNDERFLOW_LIMIT["float32"])
        widest = 0.0
        for _, a in self.data():
            if np.ndim(a) == 0 or np.shape(a)[-1] < 2 or not np.all(np.isfinite(a)):
                continue
            widest = max(widest, float(np.max(np.max(a, axis=-1) - np.min(a, axis=-1))))
        if widest > limit:
            return (
                f"inputs differ by {widest:.4g} within a row: exp(s) / sum(exp(s)) "
                f"underflows to 0 and log(0) = -inf (0 x -inf = NaN)"
            )
        return None

    def _vectors(self):
        """The floating inputs a norm could be taken of: each input (for the
        loss, `y_pred` but not the labels alone) and the difference of two
        inputs of one shape (a distance between coincident points)."""
        floats = self.floats()
        if self.info.node.kind == LOSS:
            candidates = [(lbl, a) for lbl, a in floats if not lbl.startswith("y_true")]
        else:
            candidates = list(floats)
        for n, (lbl_a, a) in enumerate(floats):
            for lbl_b, b in floats[n + 1 :]:
                if np.shape(a) == np.shape(b) and np.all(np.isfinite(a)) and np.all(np.isfinite(b)):
                    candidates.append((f"{lbl_a} - {lbl_b}", a - b))
        return candidates

    def zeros(self):
        """An all-zero vector (or an exact zero) where a norm or a sqrt
        would have its singular point."""
        vectors = self._vectors()
        for lbl, a in vectors:
            count, axis = _zero_slices(a)
            if count:
                return f"{lbl} holds {count} all-zero vector(s) along axis {axis}"
        for lbl, a in vectors:
            if np.any(a == 0):
                return f"{lbl} holds {int(np.sum(a == 0))} exact zero(s)"
        return None

    def has_sublayers(self):
        op = self.info.node.op
        return isinstance(op, keras.layers.Layer) and bool(sublayers(op))

    def finite_in_float32(self, stage):
        """Whether computing this call in float32 removes the NaN/inf."""
        if self.dtype not in HALF or self._rerun is None:
            return False
        result = self._rerun(self.info, self.inputs, self.grad_out)
        if result is None:
            return False
        value_finite, grad_finite = result
        return value_finite and (grad_finite or stage == "forward")


def recognize_forward(evidence):
    """`(trap, detail)` for a call whose output went NaN or inf."""
    e = evidence
    nan_out = _has_nan(e.outputs)
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
        empty = e.empty_mask_rows()
        if empty:
            return "fully_masked_row", empty + ": the softmax over it is 0/0"
        rows = None if half else e.softmax_without_rows("forward")
        if rows:
            return "fully_masked_row", rows
    spread = e.spread()
    if spread:
        return "unshifted_softmax", spread
    zeros = e.zeros()
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
    zeros = e.zeros()
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
    trap, detail = recognize_forward(_Evidence(run, index, rerun))
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
            masked = _Evidence(run, i, rerun).masked_non_finite()
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
                    trap, detail = recognize_forward(_Evidence(run, i, rerun))
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
        trap, detail = recognize_gradient(_Evidence(run, i, rerun))
        bad = sum(int(np.sum(~np.isfinite(g))) for g in grads_in)
        detail = "; ".join(p for p in (detail, f"{bad} non-finite gradient entries") if p)
        return _finding(run, i, "gradient", trap, detail, probe)
    return None


def find(run, probe=None, rerun=None):
    """The finding of one run: forward first; the gradient only when the
    values are finite (a NaN value makes every gradient NaN)."""
    return find_forward(run, probe, rerun) or find_gradient(run, probe, rerun)
