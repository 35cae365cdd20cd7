"""Streaming weighted means and (co)moments, exact across batches (private).

`StablePearsonCorrelation` and `StableR2Score` need sums of squared
deviations from the mean of *all* data seen. The textbook streaming sums
`sum(y**2) - sum(y)**2 / n` (Keras's `R2Score`) cancel catastrophically
when the mean is large next to the spread (targets around 1e3 with unit
noise lose every digit in float32), and a constant target comes out with a
variance of `+-1e-9` instead of 0, so `0/0` conventions cannot be applied.

Here each batch is reduced exactly (a two-pass mean and centred moments
around the batch's midrange, so a constant batch has moments of exactly 0)
and merged into the state with Chan et al.'s update

    M2 = M2_a + M2_b + (W_a W_b / W) (mean_b - mean_a)**2

(and the same with two variables for the co-moment), which keeps every
digit and keeps a constant stream's moments at exactly 0.

Replicas: metric variables are summed across replicas (`tf.distribute`
reads them with `aggregation="sum"`). The merged moments of each replica
add up, and the between-replica term is recovered from the additive
variables `sum = W * mean` and `q = sum**2 / W` (assigned, not
accumulated) as `sum(q) - sum(sum)**2 / sum(W)`: exactly 0 on one device,
and the textbook (float32-accurate) formula for the spread of the
replicas' means otherwise. The running means themselves are only read
inside `update_state` (replica context: each replica reads its own).
"""

from keras import ops

from keras_stable.common.checks import align_ranks
from keras_stable.common.dtypes import to_float32
from keras_stable.common.reduction import align_weights
from keras_stable.ops import safe_divide

# float32 machine epsilon: the relative rounding of one operation.
EPS = 2.0**-23


def prepare(y_true, y_pred, sample_weight=None, mask=None):
    """`(t, p, w)` in float32: values, predictions and entry weights.

    `w` is `sample_weight` (aligned on the leading axes, as Keras's mean
    metrics do) times the Keras mask of `y_pred`, broadcast to the values'
    shape (1 by default). Where `w == 0` the values are replaced by 0, so a
    NaN or `inf` there counts for nothing, exactly.
    """
    y_pred = to_float32(y_pred)
    y_true = ops.cast(ops.convert_to_tensor(y_true), y_pred.dtype)
    t, p = align_ranks(y_true, y_pred)
    w = ops.ones_like(t)
    if sample_weight is not None:
        w = w * ops.cast(align_weights(sample_weight, t), t.dtype)
    if mask is not None:
        mask = align_weights(mask, t, name="mask")
        w = ops.where(ops.cast(mask, "bool"), w, ops.zeros_like(w))
    used = ops.not_equal(w, 0)
    t = ops.where(used, t, ops.zeros_like(t))
    p = ops.where(used, p, ops.zeros_like(p))
    return t, p, w


def _mean_and_deviation(x, w, used, axes):
    """The weighted mean over `axes` and the deviations from it.

    Two passes around the midrange of the used entries: a constant slice
    has mean equal to its value and deviations of exactly 0.
    """
    inf = ops.full_like(x, float("inf"))
    hi = ops.max(ops.where(used, x, -inf), axis=axes, keepdims=True)
    lo = ops.min(ops.where(used, x, inf), axis=axes, keepdims=True)
    shift = ops.where(ops.greater_equal(hi, lo), 0.5 * hi + 0.5 * lo, 0.0)
    total = ops.sum(w, axis=axes, keepdims=True)
    offset = safe_divide(ops.sum(w * (x - shift), axis=axes, keepdims=True), total)
    mean = shift + offset
    deviation = ops.where(used, x - mean, ops.zeros_like(x))
    return ops.squeeze(mean, axis=axes), deviation


def batch_moments(t, p, w, axes, residuals=False):
    """The weighted moments of one batch over `axes` (a tuple of ints).

    Returns a dict of tensors (the shape of the axes not reduced): `weight`
    (sum of weights), `count` (entries with a nonzero weight), `mean_t`,
    `mean_p`, `m_tt`, `m_pp`, `m_tp` (weighted sums of products of
    deviations), and with `residuals=True` `res` (`sum(w (t - p)**2)`).
    """
    used = ops.not_equal(w, 0)
    mean_t, dev_t = _mean_and_deviation(t, w, used, axes)
    mean_p, dev_p = _mean_and_deviation(p, w, used, axes)
    out = {
        "weight": ops.sum(w, axis=axes),
        "count": ops.sum(ops.cast(used, w.dtype), axis=axes),
        "mean_t": mean_t,
        "mean_p": mean_p,
        "m_tt": ops.sum(w * ops.square(dev_t), axis=axes),
        "m_pp": ops.sum(w * ops.square(dev_p), axis=axes),
        "m_tp": ops.sum(w * dev_t * dev_p, axis=axes),
    }
    if residuals:
        out["res"] = ops.sum(w * ops.square(t - p), axis=axes)
    return out


STATE = (
    "weight",
    "count",
    "mean_t",
    "mean_p",
    "sum_t",
    "sum_p",
    "m_tt",
    "m_pp",
    "m_tp",
    "q_tt",
    "q_pp",
    "q_tp",
)


class Moments:
    """The streaming state of `batch_moments`, as metric variables.

    `metric.add_variable` creates the variables (float32, shape `shape`,
    summed across replicas); `update` merges one batch; `totals` returns
    the moments of everything seen (all replicas).
    """

    def __init__(self, metric, shape, residuals=False):
        names = STATE + (("res",) if residuals else ())
        self.residuals = residuals
        self.vars = {
            name: metric.add_variable(
                shape=shape, initializer="zeros", dtype=metric.dtype, name=name
            )
            for name in names
        }

    def update(self, batch):
        v = self.vars
        w_a, w_b = v["weight"].value, batch["weight"]
        w = w_a + w_b
        share = safe_divide(w_b, w)  # W_b / W
        f = w_a * share  # W_a W_b / W
        d_t = batch["mean_t"] - v["mean_t"].value
        d_p = batch["mean_p"] - v["mean_p"].value
        mean_t = v["mean_t"].value + d_t * share
        mean_p = v["mean_p"].value + d_p * share
        v["m_tt"].assign(v["m_tt"].value + batch["m_tt"] + f * ops.square(d_t))
        v["m_pp"].assign(v["m_pp"].value + batch["m_pp"] + f * ops.square(d_p))
        v["m_tp"].assign(v["m_tp"].value + batch["m_tp"] + f * d_t * d_p)
        v["mean_t"].assign(mean_t)
        v["mean_p"].assign(mean_p)
        v["weight"].assign(w)
        v["count"].assign(v["count"].value + batch["count"])
        # The additive forms of the means, for the sum across replicas.
        sum_t, sum_p = w * mean_t, w * mean_p
        v["sum_t"].assign(sum_t)
        v["sum_p"].assign(sum_p)
        v["q_tt"].assign(sum_t * safe_divide(sum_t, w))
        v["q_pp"].assign(sum_p * safe_divide(sum_p, w))
        v["q_tp"].assign(sum_t * safe_divide(sum_p, w))
        if self.residuals:
            v["res"].assign(v["res"].value + batch["res"])

    def totals(self):
        """`(weight, count, m_tt, m_pp, m_tp, res)` over all replicas."""
        v = {name: var.value for name, var in self.vars.items()}
        w = v["weight"]

        def between(q, s1, s2):
            # sum_r S1_r S2_r / W_r - S1 S2 / W: 0 on one device (the same
            # float operations as q), the replicas' spread otherwise, where
            # round-off below eps * |q| is not signal.
            gap = q - s1 * safe_divide(s2, w)
            noise = ops.less_equal(ops.abs(gap), 4.0 * EPS * ops.abs(q))
            return ops.where(noise, ops.zeros_like(gap), gap)

        m_tt = v["m_tt"] + ops.maximum(between(v["q_tt"], v["sum_t"], v["sum_t"]), 0.0)
        m_pp = v["m_pp"] + ops.maximum(between(v["q_pp"], v["sum_p"], v["sum_p"]), 0.0)
        m_tp = v["m_tp"] + between(v["q_tp"], v["sum_t"], v["sum_p"])
        res = v.get("res")
        return w, v["count"], m_tt, m_pp, m_tp, res


def correlation(m_tt, m_pp, m_tp):
    """Pearson's `r = m_tp / sqrt(m_tt m_pp)`, and 0 where a variance is 0.

    scikit-learn's `force_finite` convention (`r_regression`): a constant
    input has no linear relationship to report. The square roots are taken
    separately (no overflow of the product); `r` is clipped to [-1, 1].
    """
    defined = ops.logical_and(ops.greater(m_tt, 0), ops.greater(m_pp, 0))
    one = ops.ones_like(m_tt)
    denom = ops.sqrt(ops.where(defined, m_tt, one)) * ops.sqrt(ops.where(defined, m_pp, one))
    r = ops.clip(m_tp / denom, -1.0, 1.0)
    return ops.where(defined, r, ops.zeros_like(r))
