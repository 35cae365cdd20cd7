"""The evidence around one recorded call: its numbers (inputs, outputs,
compute dtype), the `keras.ops` functions it ran, and the questions the
trap rules of `traps.py` ask of them."""

import math

import keras
import numpy as np

from keras_stable.audit.execution import LOSS
from keras_stable.audit.execution import TOP
from keras_stable.audit.rows import distribution_rows
from keras_stable.audit.rows import nan_row_shape
from keras_stable.common.keras_internals import sublayers

HALF = ("float16", "bfloat16")
HALF_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38}

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


ATTENTION_LAYERS = (
    keras.layers.MultiHeadAttention,
    keras.layers.GroupQueryAttention,
    keras.layers.Attention,
    keras.layers.AdditiveAttention,
)

# The operations with a singular point at the zero vector (norm_at_zero).
_NORM_OPS = {"norm", "sqrt", "rsqrt", "power", "normalize", "safe_norm", "l2_normalize"}


def _snake(name):
    return "".join("_" + c.lower() if c.isupper() else c for c in name).lstrip("_")


def _compute_dtype(info):
    dtype = info.node.compute_dtype
    floats = [d for d in info.input_dtypes if d.startswith(("float", "bfloat"))]
    if dtype is None or info.node.kind in (LOSS, TOP):
        dtype = floats[0] if floats else "float32"
    return dtype


class Evidence:
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
                    f"whole rows of its output are NaN and it takes a mask ({name}): "
                    "where the mask leaves a row (a query) nothing, its softmax is 0/0"
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

    def operations(self):
        """The `keras.ops` functions the call ran (empty: not known, e.g. a
        built-in layer or backend code); a functional operation is its own."""
        ops = set(self.info.operations)
        if self.info.node.kind == "op":
            ops.add(_snake(type(self.info.node.op).__name__))
        return ops

    def may_take_norm(self):
        """Whether the call can take a norm or a square root: it ran one,
        or what it ran is not known."""
        ops = self.operations()
        return not ops or bool(ops & _NORM_OPS)

    def log_of_zero(self, stage):
        n = self.info.log_zeros
        if not n:
            return None
        what = "log(0) = -inf, and 0 x -inf = NaN" if stage == "forward" else "d log(p) = 1/0"
        return f"it takes the log of {n} exact zero(s) (probabilities that underflowed): {what}"

    def is_attention(self):
        """A Keras attention layer, or a call that ran
        `keras.ops.dot_product_attention` or a softmax between products."""
        if isinstance(self.info.node.op, ATTENTION_LAYERS):
            return True
        ops = self.operations()
        products = {"matmul", "einsum", "dot"}
        return "dot_product_attention" in ops or ("softmax" in ops and bool(ops & products))

    def is_entropy(self):
        """A layer that multiplies a softmax by its log (an entropy bonus):
        it ran `softmax` and `log_softmax` or `log`."""
        ops = self.operations()
        return (
            self.info.node.kind != LOSS and "softmax" in ops and bool(ops & {"log_softmax", "log"})
        )

    def is_gaussian_density(self):
        """A call that evaluates a Gaussian density: `exp` of a square."""
        ops = self.operations()
        return "exp" in ops and bool(ops & {"square", "power"})

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
