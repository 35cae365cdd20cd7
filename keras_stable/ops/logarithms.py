"""The logarithms of keras_stable: one home for `log` at 0.

- `safe_log`: the exact `log`, `-inf` with a zero gradient at 0 (a row
  with nothing left in the softmax family, a Poisson rate of 0);
- `saturated_log`: `log` of a probability, exact down to the smallest
  normal number and saturated below it (the reading of `from_logits=False`).

Internal shared API of `keras_stable.ops` (not in `ops.__all__`).
"""

from keras import ops

from keras_stable.common.dtypes import dtype_of
from keras_stable.common.dtypes import nan_where

# The smallest normal number of each compute dtype: a probability below it
# is read as this number (a loss term of at most 87.34 in float32).
SMALLEST_NORMAL = {
    "float32": 1.1754943508222875e-38,
    "float64": 2.2250738585072014e-308,
}


def safe_log(x):
    """`log(x)`, and `-inf` with a zero gradient where `x == 0`.

    The double where keeps `1/x = inf` out of the gradient at 0 (an empty
    row's `sum(exp(z))`, a class or rate of probability 0). A negative `x`
    gives NaN with a zero gradient. NaN is not read as 0: it goes through
    `log`, so a NaN logit makes its row's value and gradient NaN. Callers
    that need to know where `x == 0` compare themselves (`x != 0`, NaN
    included).
    """
    # Positive or NaN: through `log` (NaN flows on, value and gradient).
    through_log = ops.logical_not(ops.less_equal(x, 0))
    log_x = ops.log(ops.where(through_log, x, ops.ones_like(x)))
    # 0 and negative: `log` itself gives -inf and NaN there (and only
    # there: no infinite or NaN constant for the NaN tools to flag), with
    # no gradient.
    log_other = ops.log(ops.stop_gradient(ops.where(through_log, ops.ones_like(x), x)))
    return ops.where(through_log, log_x, log_other)


def saturated_log(p):
    """`log(p)` for probabilities, exact down to the smallest normal number.

    Below it (a denormal, or 0) `p` is read as the smallest normal number
    `tiny` (1.1754944e-38 in float32): `log(p)` saturates at `log(tiny)`
    (-87.34 in float32) with a zero gradient, so the gradient `1/p` is at
    most `1/tiny` and never `inf`. Backends disagree on denormals (XLA
    flushes them to 0, torch keeps them); both are read alike. A negative
    or NaN probability gives NaN.
    """
    # A tensor, not a Python float: a float32 scalar would round the
    # float64 threshold to 0.
    tiny = ops.full_like(p, SMALLEST_NORMAL[dtype_of(p)])
    normal = ops.greater_equal(p, tiny)
    # The argument of `log` is never below `tiny`: one where suffices.
    log_p = ops.log(ops.where(normal, p, tiny))
    invalid = ops.logical_not(ops.greater_equal(p, 0))
    return ops.where(invalid, nan_where(invalid, p), log_p)
