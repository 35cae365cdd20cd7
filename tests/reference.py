"""float64 NumPy references for every op in `keras_stable.ops`.

Written directly from the mathematical definitions (no shifting tricks beyond
what float64 needs), so they are an independent check of the library.
"""

import math

import numpy as np

NEG_INF = -np.inf


def _f64(x):
    return np.asarray(x, dtype="float64")


def safe_sqrt(x):
    x = _f64(x)
    with np.errstate(invalid="ignore"):
        return np.where(np.isnan(x), x, np.sqrt(np.maximum(x, 0.0)))


def safe_norm(x, axis=None, keepdims=False):
    x = _f64(x)
    # float64 has the range for every float32/float16/bfloat16 input.
    return np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims))


def l2_normalize(x, axis=-1):
    x = _f64(x)
    n = np.sqrt(np.sum(x * x, axis=axis, keepdims=True))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, x / np.where(n > 0, n, 1.0), 0.0)


def cosine_similarity(x1, x2, axis=-1):
    x1, x2 = np.broadcast_arrays(_f64(x1), _f64(x2))
    return np.clip(
        np.sum(l2_normalize(x1, axis) * l2_normalize(x2, axis), axis=axis),
        -1.0,
        1.0,
    )


def safe_divide(x, y):
    x, y = np.broadcast_arrays(_f64(x), _f64(y))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(y != 0, x / np.where(y != 0, y, 1.0), 0.0)


def _valid(x, mask):
    valid = x != NEG_INF
    if mask is not None:
        valid = valid & np.broadcast_to(np.asarray(mask) > 0, x.shape)
    return valid


def logsumexp(x, axis=-1, keepdims=False, mask=None):
    x = _f64(x)
    valid = _valid(x, mask)
    xm = np.where(valid, x, NEG_INF)
    m = np.max(xm, axis=axis, keepdims=True)
    m_safe = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log(np.sum(np.exp(xm - m_safe), axis=axis, keepdims=True)) + m_safe
    return out if keepdims else np.squeeze(out, axis=axis)


def softmax(x, axis=-1, mask=None):
    x = _f64(x)
    valid = _valid(x, mask)
    lse = logsumexp(x, axis=axis, keepdims=True, mask=mask)
    with np.errstate(invalid="ignore"):
        p = np.exp(np.where(valid, x, NEG_INF) - np.where(np.isfinite(lse), lse, 0.0))
    return np.where(valid & np.isfinite(lse), p, 0.0)


def log_softmax(x, axis=-1, mask=None):
    x = _f64(x)
    valid = _valid(x, mask)
    lse = logsumexp(x, axis=axis, keepdims=True, mask=mask)
    with np.errstate(invalid="ignore"):
        return np.where(valid & np.isfinite(lse), x - lse, NEG_INF)


def softmax_cross_entropy(labels, logits, axis=-1, mask=None, label_smoothing=0.0):
    logits = _f64(logits)
    labels = _f64(labels)
    valid = _valid(logits, mask)
    if label_smoothing:
        n = np.maximum(np.sum(valid, axis=axis, keepdims=True), 1)
        labels = labels * (1 - label_smoothing) + np.where(valid, label_smoothing / n, 0.0)
    logp = log_softmax(logits, axis=axis, mask=mask)
    terms = np.where(
        valid, labels * np.where(valid, logp, 0.0), np.where(labels == 0, 0.0, NEG_INF)
    )
    loss = -np.sum(terms, axis=axis)
    nonempty = np.any(valid, axis=axis)
    return np.where(nonempty, loss, 0.0)


def sparse_softmax_cross_entropy(labels, logits, axis=-1, mask=None, ignore_class=None):
    logits = _f64(logits)
    labels = np.asarray(labels)
    axis = axis % logits.ndim
    num_classes = logits.shape[axis]
    logits_last = np.moveaxis(logits, axis, -1)
    mask_last = None
    if mask is not None:
        mask_last = np.moveaxis(np.broadcast_to(np.asarray(mask) > 0, logits.shape), axis, -1)
    logp = log_softmax(logits_last, axis=-1, mask=mask_last)
    nonempty = np.any(_valid(logits_last, mask_last), axis=-1)
    out = np.empty(labels.shape, "float64")
    for idx in np.ndindex(labels.shape):
        label = int(labels[idx])
        if ignore_class is not None and label == ignore_class:
            out[idx] = 0.0
        elif not nonempty[idx]:
            out[idx] = 0.0
        elif not 0 <= label < num_classes:
            out[idx] = np.nan
        else:
            out[idx] = -logp[idx + (label,)]
    return out


def sigmoid_cross_entropy(labels, logits):
    labels = _f64(labels)
    x = _f64(logits)
    # -y log σ(x) - (1-y) log(1-σ(x)) = softplus(x) - x*y, written so that a
    # confident correct logit (label 1, logit 30) is log1p(exp(-30)), not
    # the round-off of logaddexp(0, 30) - 30.
    with np.errstate(invalid="ignore"):
        return np.maximum(x, 0.0) - x * labels + np.log1p(np.exp(-np.abs(x)))


def masked_task_distance(y_true, y_pred, mask=None, axis=-1, squared=False):
    y_true = _f64(y_true)
    y_pred = _f64(y_pred)
    w = np.ones_like(y_true)
    if mask is not None:
        m = np.asarray(mask)
        w = np.broadcast_to(
            m.astype("float64") if m.dtype != bool else m.astype("float64"), y_true.shape
        )
        w = np.where(w > 0, w, 0.0)
    w = np.where(np.isnan(y_true), 0.0, w)
    d = np.where(w > 0, np.nan_to_num(y_true) - y_pred, 0.0)
    sq = np.sum(w * d * d, axis=axis)
    return sq if squared else np.sqrt(sq)


def poisson_nll(labels, log_rate, full=False, log_input=True):
    labels = _f64(labels)
    x = _f64(log_rate)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate, log_x = (np.exp(x), x) if log_input else (x, np.log(x))
        loss = rate - np.where(labels == 0, 0.0, labels * log_x)
    if full:
        loss = loss + np.vectorize(math.lgamma, otypes=["float64"])(labels + 1.0)
    return loss


def gaussian_nll(labels, mean, log_variance, full=False):
    diff = _f64(labels) - _f64(mean)
    log_variance = _f64(log_variance)
    # diff**2 * exp(-log_variance) as exp(2 log|diff| - log_variance): float64
    # then holds it for every float32 input (exp(1000) alone overflows).
    with np.errstate(divide="ignore", over="ignore"):
        scaled = np.exp(2.0 * np.log(np.abs(diff)) - log_variance)
    loss = 0.5 * (log_variance + np.where(diff == 0, 0.0, scaled))
    return loss + 0.5 * np.log(2 * np.pi) if full else loss


def _observed_error(labels, predictions):
    labels = _f64(labels)
    return np.where(np.isnan(labels), 0.0, _f64(predictions) - np.nan_to_num(labels))


def masked_squared_error(labels, predictions):
    return _observed_error(labels, predictions) ** 2


def masked_absolute_error(labels, predictions):
    return np.abs(_observed_error(labels, predictions))


def masked_huber(labels, predictions, delta=1.0):
    e = np.abs(_observed_error(labels, predictions))
    return np.where(e <= delta, 0.5 * e * e, delta * e - 0.5 * delta * delta)


def mean_over_observed(values, labels):
    """Per-example mean over the observed (non-NaN) labels of the last axis,
    and which examples have one."""
    observed = ~np.isnan(_f64(labels))
    count = observed.sum(-1)
    total = np.where(observed, values, 0.0).sum(-1)
    return np.where(count > 0, total / np.maximum(count, 1), 0.0), count > 0


# --- classification catalogue: probabilities, focal losses, KL -------------

FLOAT32_TINY = float(np.finfo(np.float32).tiny)  # 1.1754944e-38


def saturated_log(p, tiny=FLOAT32_TINY):
    """`log(max(p, tiny))`: how the cross-entropies read probabilities."""
    p = _f64(p)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(p >= 0, np.log(np.maximum(p, tiny)), np.nan)


def log_sigmoid(x):
    return -np.logaddexp(0.0, -_f64(x))


def sigmoid_cross_entropy_from_probabilities(labels, probs):
    labels, probs = _f64(labels), _f64(probs)
    return -(labels * saturated_log(probs) + (1 - labels) * saturated_log(1 - probs))


def sigmoid_focal_cross_entropy(labels, logits, gamma=2.0, alpha=None):
    y, x = _f64(labels), _f64(logits)
    log_p, log_q = log_sigmoid(x), log_sigmoid(-x)
    ce = -(y * log_p + (1 - y) * log_q)
    one_minus_pt = y * np.exp(log_q) + (1 - y) * np.exp(log_p)
    loss = one_minus_pt**gamma * ce
    if alpha is not None:
        loss = (y * alpha + (1 - y) * (1 - alpha)) * loss
    return loss


def _log_softmax_pair(x, axis=-1, mask=None):
    """`(log(p), log(1 - p))` of `p = softmax(x)` per class, from the
    log-sum-exp `s` of the other classes: `log(p) = -logaddexp(0, s - x)`
    and `log(1 - p) = -logaddexp(0, x - s)` (no rounding of p near 1)."""
    x = _f64(x)
    valid = _valid(x, mask)
    xm = np.moveaxis(np.where(valid, x, NEG_INF), axis, -1)
    others = np.empty_like(xm)
    for c in range(xm.shape[-1]):
        rest = xm.copy()
        rest[..., c] = NEG_INF
        others[..., c] = logsumexp(rest, axis=-1)
    with np.errstate(invalid="ignore"):
        logp = -np.logaddexp(0.0, others - xm)
        log1m = -np.logaddexp(0.0, xm - others)
    return np.moveaxis(logp, -1, axis), np.moveaxis(log1m, -1, axis)


def softmax_focal_cross_entropy(
    labels, logits, gamma=2.0, alpha=None, axis=-1, mask=None, label_smoothing=0.0
):
    logits, labels = _f64(logits), _f64(labels)
    valid = _valid(logits, mask)
    if label_smoothing:
        n = np.maximum(np.sum(valid, axis=axis, keepdims=True), 1)
        labels = labels * (1 - label_smoothing) + np.where(valid, label_smoothing / n, 0.0)
    w = 1.0
    if alpha is not None:
        w = np.asarray(alpha, "float64")
        if w.ndim:
            shape = [1] * logits.ndim
            shape[axis] = -1
            w = w.reshape(shape)
    logp, log1m = _log_softmax_pair(logits, axis=axis, mask=mask)
    logp = np.where(valid, logp, 0.0)
    factor = 1.0 if gamma == 0 else np.exp(gamma * np.where(valid, log1m, 0.0))
    weight = labels * w
    with np.errstate(invalid="ignore"):
        terms = np.where(valid, weight * factor * -logp, np.where(weight == 0, 0.0, np.inf))
    loss = np.sum(terms, axis=axis)
    return np.where(np.any(valid, axis=axis), loss, 0.0)


def kl_divergence(labels, logits, axis=-1, mask=None):
    logits, labels = _f64(logits), _f64(labels)
    valid = _valid(logits, mask)
    logq = np.where(valid, log_softmax(logits, axis=axis, mask=mask), 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        log_labels = np.log(np.where(labels > 0, labels, 1.0))
        terms = np.where(labels > 0, labels * (log_labels - logq), 0.0)
        terms = np.where(valid, terms, np.where(labels > 0, np.inf, 0.0))
        terms = np.where(labels >= 0, terms, np.nan)
    loss = np.sum(terms, axis=axis)
    return np.where(np.any(valid, axis=axis), loss, 0.0)


# --- geometry and metric learning (issue "Geometry and metric learning") ---


def pairwise_distance(x, y=None, squared=False):
    x = _f64(x)
    y = x if y is None else _f64(y)
    d2 = np.sum((x[:, None, :] - y[None, :, :]) ** 2, axis=-1)
    return d2 if squared else np.sqrt(d2)


def safe_std(x, axis=None, keepdims=False):
    return np.std(_f64(x), axis=axis, keepdims=keepdims)


def embedding_distances(embeddings, distance_metric="L2"):
    """TF Addons' `distance_metric`s in float64 ("angular": 1 - cos of the
    l2-normalised embeddings; a zero embedding normalises to zeros)."""
    e = _f64(embeddings)
    if distance_metric == "angular":
        u = l2_normalize(e, axis=-1)
        return 1.0 - u @ u.T
    return pairwise_distance(e, squared=distance_metric == "squared-L2")


def triplet_semihard_loss(labels, embeddings, margin=1.0, distance_metric="L2", weights=None):
    """TF Addons' semi-hard triplet loss, one (anchor, positive) pair at a
    time. For each pair: the smallest negative distance greater than
    d(a, p), else the largest negative distance; loss = weighted mean over
    the pairs of max(d(a, p) - d(a, n) + margin, 0), pair (a, p) weighted by
    weights[a]; samples with weight 0 take no part. keras_stable's
    conventions where TF Addons is undefined: no pair, or no negative -> 0."""
    labels = np.asarray(labels).reshape(-1)
    d = embedding_distances(embeddings, distance_metric)
    n = len(labels)
    w = np.ones(n) if weights is None else _f64(weights)
    total, count = 0.0, 0
    for a in range(n):
        if w[a] == 0:
            continue
        negatives = [d[a, k] for k in range(n) if labels[k] != labels[a] and w[k] != 0]
        if not negatives:
            continue
        for p in range(n):
            if p == a or labels[p] != labels[a] or w[p] == 0:
                continue
            farther = [dn for dn in negatives if dn > d[a, p]]
            d_an = min(farther) if farther else max(negatives)
            total += w[a] * max(d[a, p] - d_an + margin, 0.0)
            count += 1
    return total / count if count else 0.0


def triplet_hard_loss(
    labels, embeddings, margin=1.0, soft=False, distance_metric="L2", weights=None
):
    """TF Addons' batch-hard triplet loss, one anchor at a time: the farthest
    positive and the closest negative; max(gap + margin, 0) or softplus(gap);
    weighted mean over the anchors with a positive and a negative (0 if
    none; TF Addons also counts anchors without a positive, with d(a, p) = 0)."""
    labels = np.asarray(labels).reshape(-1)
    d = embedding_distances(embeddings, distance_metric)
    n = len(labels)
    w = np.ones(n) if weights is None else _f64(weights)
    total, count = 0.0, 0
    for a in range(n):
        if w[a] == 0:
            continue
        pos = [d[a, k] for k in range(n) if k != a and labels[k] == labels[a] and w[k] != 0]
        neg = [d[a, k] for k in range(n) if labels[k] != labels[a] and w[k] != 0]
        if not pos or not neg:
            continue
        gap = max(pos) - min(neg)
        total += w[a] * (np.logaddexp(0.0, gap) if soft else max(gap + margin, 0.0))
        count += 1
    return total / count if count else 0.0


def contrastive_loss(labels, distances, margin=1.0):
    y, d = _f64(labels), _f64(distances)
    return y * d**2 + (1 - y) * np.maximum(margin - d, 0.0) ** 2


def info_nce_loss(views, temperature=0.1, weights=None):
    """SimCLR's NT-Xent in float64: each of the 2B embeddings against the
    2B - 1 others (cosine / temperature), cross-entropy at its partner;
    per example the mean of its two views; weighted mean over examples
    (weight 0: the example takes no part, not even as a candidate)."""
    v = _f64(views)
    b = v.shape[1]
    w = np.ones(b) if weights is None else _f64(weights)
    keep = np.flatnonzero(w != 0)
    if keep.size == 0:
        return 0.0
    z = l2_normalize(np.concatenate([v[0, keep], v[1, keep]]), axis=-1)
    k = keep.size
    logits = z @ z.T / temperature
    np.fill_diagonal(logits, -np.inf)
    logp = log_softmax(logits, axis=-1)
    partner = np.concatenate([np.arange(k, 2 * k), np.arange(k)])
    per_view = -logp[np.arange(2 * k), partner]
    per_example = 0.5 * (per_view[:k] + per_view[k:])
    return float(np.sum(w[keep] * per_example) / k)


def pearson_correlation(y_true, y_pred, axis=0, weights=None):
    """Weighted Pearson r along `axis`, 0 where a variance is 0 (scikit-learn's
    force_finite)."""
    t, p = np.broadcast_arrays(_f64(y_true), _f64(y_pred))
    w = np.ones_like(t) if weights is None else np.broadcast_to(_f64(weights), t.shape)
    wsum = np.sum(w, axis=axis, keepdims=True)
    mt = np.sum(w * t, axis=axis, keepdims=True) / wsum
    mp = np.sum(w * p, axis=axis, keepdims=True) / wsum
    ctt = np.sum(w * (t - mt) ** 2, axis=axis)
    cpp = np.sum(w * (p - mp) ** 2, axis=axis)
    ctp = np.sum(w * (t - mt) * (p - mp), axis=axis)
    ok = (ctt > 0) & (cpp > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(ok, ctp / np.sqrt(np.where(ok, ctt * cpp, 1.0)), 0.0)


def r2_score(y_true, y_pred, weights=None, multioutput="uniform_average"):
    """scikit-learn's `r2_score(..., force_finite=True)` in float64, for
    `(n, outputs)` inputs and `(n,)` weights."""
    t, p = _f64(y_true), _f64(y_pred)
    w = np.ones(t.shape[0]) if weights is None else _f64(weights)
    w = w[:, None]
    numerator = np.sum(w * (t - p) ** 2, axis=0)
    mean = np.sum(w * t, axis=0) / np.sum(w, axis=0)
    denominator = np.sum(w * (t - mean) ** 2, axis=0)
    scores = np.ones(t.shape[1])
    valid = (denominator != 0) & (numerator != 0)
    scores[valid] = 1 - numerator[valid] / denominator[valid]
    scores[(numerator != 0) & (denominator == 0)] = 0.0
    if multioutput == "raw_values":
        return scores
    if multioutput == "variance_weighted" and np.any(denominator != 0):
        return float(np.average(scores, weights=denominator))
    return float(np.mean(scores))


# --- float64 gradients (vector-Jacobian products) of the geometry ops ---------


def safe_norm_grad(x, g, axis=-1):
    """`g * x / ||x||` (0 at the zero vector), `g` of the reduced shape."""
    x = _f64(x)
    n = safe_norm(x, axis=axis, keepdims=True)
    g = np.expand_dims(_f64(g), axis)
    return np.where(n > 0, g * x / np.where(n > 0, n, 1.0), 0.0)


def l2_normalize_grad(x, g, axis=-1):
    """`(g - u sum(g u)) / ||x||` (0 at the zero vector)."""
    x, g = _f64(x), _f64(g)
    n = safe_norm(x, axis=axis, keepdims=True)
    u = l2_normalize(x, axis)
    safe = np.where(n > 0, n, 1.0)
    return np.where(n > 0, (g - u * np.sum(g * u, axis=axis, keepdims=True)) / safe, 0.0)


def cosine_similarity_grad(x1, x2, g, axis=-1):
    """`g (u2 - cos u1) / ||x1||` and symmetrically (0 for a zero vector)."""
    x1, x2 = _f64(x1), _f64(x2)
    cos = np.expand_dims(cosine_similarity(x1, x2, axis), axis)
    g = np.expand_dims(_f64(g), axis)
    u1, u2 = l2_normalize(x1, axis), l2_normalize(x2, axis)
    n1 = safe_norm(x1, axis=axis, keepdims=True)
    n2 = safe_norm(x2, axis=axis, keepdims=True)
    d1 = np.where(n1 > 0, g * (u2 - cos * u1) / np.where(n1 > 0, n1, 1.0), 0.0)
    d2 = np.where(n2 > 0, g * (u1 - cos * u2) / np.where(n2 > 0, n2, 1.0), 0.0)
    return d1, d2


def safe_std_grad(x, g, axis=-1):
    """`g (x - mean) / (n std)` (0 for a constant slice)."""
    x = _f64(x)
    dev = x - np.mean(x, axis=axis, keepdims=True)
    std = np.std(x, axis=axis, keepdims=True)
    g = np.expand_dims(_f64(g), axis)
    count = x.shape[axis]
    return np.where(std > 0, g * dev / (count * np.where(std > 0, std, 1.0)), 0.0)


def pairwise_distance_grad(x, y, g, squared=False):
    """The gradients of `sum(g * pairwise_distance(x, y, squared))` for `x`
    and `y` (`y=None`: one gradient, for `x`); 0 for coincident rows."""
    same = y is None
    x = _f64(x)
    y = x if same else _f64(y)
    diff = x[:, None, :] - y[None, :, :]
    g = _f64(g)
    if squared:
        weighted = 2.0 * g[..., None] * diff
    else:
        dist = np.sqrt(np.sum(diff**2, axis=-1))
        unit = np.where(dist[..., None] > 0, diff / np.where(dist > 0, dist, 1.0)[..., None], 0.0)
        weighted = g[..., None] * unit
    gx, gy = weighted.sum(axis=1), -weighted.sum(axis=0)
    return gx + gy if same else (gx, gy)


def dot_product_attention(
    q, k, v, bias=None, mask=None, scale=None, is_causal=False, soft_cap=None
):
    """float64 attention from the definition: `(B, T, N, H)` queries,
    `(B, S, K, H)` keys and values, query head `n` reads key head
    `n // (N // K)`; a row with no allowed key gives 0."""
    q, k, v = _f64(q), _f64(k), _f64(v)
    b, t, n, h = q.shape
    s, kv = k.shape[1], k.shape[2]
    heads = np.arange(n) // (n // kv)
    k, v = k[:, :, heads], v[:, :, heads]  # (B, S, N, H)
    scale = 1.0 / math.sqrt(h) if scale is None else scale
    logits = np.einsum("btnh,bsnh->bnts", q, k) * scale
    if soft_cap is not None:
        logits = soft_cap * np.tanh(logits / soft_cap)
    allowed = np.ones(logits.shape, bool)
    if bias is not None:
        logits = logits + _f64(bias)
        allowed = allowed & (logits != NEG_INF)
    if mask is not None:
        allowed = allowed & np.broadcast_to(np.asarray(mask, bool), logits.shape)
    if is_causal:
        allowed = allowed & np.tril(np.ones((t, s), bool))
    masked = np.where(allowed, logits, NEG_INF)
    m = masked.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.where(allowed, np.exp(np.where(allowed, logits - m, 0.0)), 0.0)
    total = e.sum(-1, keepdims=True)
    p = e / np.where(total > 0, total, 1.0)
    return np.einsum("bnts,bsnh->btnh", p, v)
