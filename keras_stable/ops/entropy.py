"""The entropy of a softmax, with masked and impossible classes."""

from keras import ops

from keras_stable.common.dtypes import is_pos_inf
from keras_stable.common.dtypes import nan_where
from keras_stable.ops.softmax import _prepare
from keras_stable.ops.softmax import shifted_logits


def entropy(logits, axis=-1, mask=None, keepdims=False):
    """The entropy `-sum(p * log(p))` of `p = softmax(logits, axis)`.

    Args:
        logits: tensor of logits.
        axis: int (default -1), a tuple/list of ints normalised over
            together, or `None` (all axes).
        mask: optional boolean tensor broadcastable to `logits`; `False`
            entries are left out (probability 0).
        keepdims: keep the reduced axes with size 1.

    Returns:
        The entropy in nats, the shape of `logits` without `axis` (with
        size-1 axes there under `keepdims`), in the (float) dtype of
        `logits`.

    Numerical stability:
        Computed as `H = log(s) - sum(p * z)` with `z = x - m` the logits
        shifted by their largest valid value `m`, `s = sum(exp(z))` and
        `p = exp(z) / s`: nothing overflows, and `log(s)` is
        `log(c) + log1p(r / c)` (`c` the number of entries at the maximum,
        `r` the sum of the others) so a nearly one-hot row keeps its small
        entropy to the last digits (`[0, -30]` gives 2.9e-12, not 0 or
        round-off). Masked and `-inf` entries contribute exactly 0 with a
        zero gradient, NaN under the mask included (`[0, -inf]` gives 0 and
        `[0, 0, -inf]` gives `log 2`), where the hand-written
        `-sum(softmax(x) * log_softmax(x))` is NaN (`0 * -inf`). A row with
        nothing left (all masked or all `-inf`) gives 0 with a zero
        gradient. Half precision is computed in float32 (`[65504, -65504]`
        in float16 gives 0). A `+inf` logit gives NaN, as `softmax` gives
        NaN there; a NaN logit gives NaN.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> x = np.array([[0.0, -np.inf], [0.0, 0.0], [-np.inf, -np.inf]], "float32")
        >>> np.asarray(ops.entropy(x))
        array([0.       , 0.6931472, 0.       ], dtype=float32)
        >>> np.asarray(ops.entropy(np.zeros((2, 4), "float32"), mask=[True, True, True, False]))
        array([1.0986123, 1.0986123], dtype=float32)
    """
    x, out_dtype, axis, mask, added = _prepare(logits, axis, mask)
    valid, z, total, _ = shifted_logits(x, axis, mask)
    zero = ops.zeros_like(z)
    # The entries at the maximum (z == 0: exp gives exactly 1) and the
    # others: log(total) = log(c) + log1p(r / c), exact where total is
    # 1 + tiny. `c` is summed from exp(z) (each exactly 1) so that the
    # gradient of the top entries flows through it.
    top = ops.logical_and(valid, ops.equal(z, 0))
    e = ops.exp(z)
    count = ops.sum(ops.where(top, e, zero), axis=axis, keepdims=True)
    rest = ops.sum(ops.where(top, zero, e), axis=axis, keepdims=True)
    nonempty = ops.greater(count, 0)
    one = ops.ones_like(count)
    safe_count = ops.where(nonempty, count, one)
    log_total = ops.log(safe_count) + ops.log1p(rest / safe_count)
    safe_total = ops.where(nonempty, total, one)
    # `z` is -inf or a finite sentinel off `valid`: the double where keeps
    # it out of the product, its value and its gradient (p is 0 there).
    p = ops.where(valid, e / safe_total, zero)
    pz = ops.where(valid, p * ops.where(valid, z, zero), zero)
    out = log_total - ops.sum(pz, axis=axis, keepdims=True)
    out = ops.where(nonempty, out, ops.zeros_like(out))
    # A +inf logit: NaN, as softmax gives NaN there.
    bad = ops.any(ops.logical_and(valid, is_pos_inf(x)), axis=axis, keepdims=True)
    out = ops.where(bad, nan_where(bad, out), out)
    if added or not keepdims:
        out = ops.squeeze(out, axis=axis)
    return ops.cast(out, out_dtype)
