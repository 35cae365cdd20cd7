"""float64 NumPy references for every op in `keras_stable.ops`.

Written directly from the mathematical definitions (no shifting tricks beyond
what float64 needs), so they are an independent check of the library.
"""

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
    terms = np.where(valid, labels * np.where(valid, logp, 0.0), np.where(labels == 0, 0.0, NEG_INF))
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
    # -y log σ(x) - (1-y) log(1-σ(x)) = softplus(x) - x*y, softplus in float64.
    return np.logaddexp(0.0, x) - x * labels


def masked_task_distance(y_true, y_pred, mask=None, axis=-1, squared=False):
    y_true = _f64(y_true)
    y_pred = _f64(y_pred)
    w = np.ones_like(y_true)
    if mask is not None:
        m = np.asarray(mask)
        w = np.broadcast_to(m.astype("float64") if m.dtype != bool else m.astype("float64"), y_true.shape)
        w = np.where(w > 0, w, 0.0)
    w = np.where(np.isnan(y_true), 0.0, w)
    d = np.where(w > 0, np.nan_to_num(y_true) - y_pred, 0.0)
    sq = np.sum(w * d * d, axis=axis)
    return sq if squared else np.sqrt(sq)
