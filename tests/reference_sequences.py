"""Float64 NumPy references of the sequence and segmentation losses.

CTC by the textbook forward-backward recursion in log space with true
`-inf` (Graves et al., 2006), one sample at a time; the gradient with
respect to the logits is `softmax - occupancy` (the posterior of each class
at each frame). Dice and Tversky as written in the papers, empty against
empty a perfect match.
"""

import numpy as np


def _log_softmax(x):
    x = np.asarray(x, "float64")
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def _lse(*terms):
    return np.logaddexp.reduce(np.stack(terms), axis=0)


def ctc_sample(labels, logits, blank=0):
    """`(loss, grad)` of one sample: labels `(U,)`, logits `(T, C)`."""
    labels = [int(v) for v in labels]
    logits = np.asarray(logits, "float64")
    frames, classes = logits.shape
    logp = _log_softmax(logits)
    ext = [blank]
    for label in labels:
        ext += [label, blank]
    states = len(ext)

    def can_skip(s):
        return s >= 2 and ext[s] != blank and ext[s] != ext[s - 2]

    if frames == 0:
        loss = 0.0 if not labels else np.inf
        return loss, np.zeros((0, classes))
    alpha = np.full((frames, states), -np.inf)
    alpha[0, 0] = logp[0, ext[0]]
    if states > 1:
        alpha[0, 1] = logp[0, ext[1]]
    for t in range(1, frames):
        for s in range(states):
            terms = [alpha[t - 1, s]]
            if s >= 1:
                terms.append(alpha[t - 1, s - 1])
            if can_skip(s):
                terms.append(alpha[t - 1, s - 2])
            alpha[t, s] = _lse(*terms) + logp[t, ext[s]]
    ends = [alpha[-1, -1]] + ([alpha[-1, -2]] if states > 1 else [])
    ll = _lse(*ends)
    if not np.isfinite(ll):
        return np.inf, np.zeros_like(logits)
    beta = np.full((frames, states), -np.inf)  # includes frame t's emission
    beta[-1, -1] = logp[-1, ext[-1]]
    if states > 1:
        beta[-1, -2] = logp[-1, ext[-2]]
    for t in range(frames - 2, -1, -1):
        for s in range(states):
            terms = [beta[t + 1, s]]
            if s + 1 < states:
                terms.append(beta[t + 1, s + 1])
            if s + 2 < states and can_skip(s + 2):
                terms.append(beta[t + 1, s + 2])
            beta[t, s] = _lse(*terms) + logp[t, ext[s]]
    occupancy = np.zeros_like(logits)
    posterior = np.exp(alpha + beta - logp[:, ext] - ll)  # (T, S)
    for s in range(states):
        occupancy[:, ext[s]] += posterior[:, s]
    return -ll, np.exp(logp) - occupancy


def ctc_loss(target, logits, target_length, output_length, blank=0, zero_infinity=True):
    """`(losses (B,), grads (B, T, C))` of a batch, frames past
    `output_length` not input; an infeasible sample 0 (or inf), gradient 0."""
    logits = np.asarray(logits, "float64")
    losses = np.zeros(logits.shape[0])
    grads = np.zeros_like(logits)
    for b in range(logits.shape[0]):
        u, t = int(target_length[b]), int(output_length[b])
        loss, grad = ctc_sample(np.asarray(target[b])[:u], logits[b, :t], blank)
        if np.isinf(loss):
            losses[b] = 0.0 if zero_infinity else np.inf
            continue
        losses[b] = loss
        grads[b, :t] = grad
    return losses, grads


def ctc_feasible(target, target_length, output_length):
    out = []
    for labels, u, t in zip(np.asarray(target), target_length, output_length):
        labels = labels[: int(u)]
        repeats = int(np.sum(labels[1:] == labels[:-1])) if len(labels) > 1 else 0
        out.append(int(u) + repeats <= int(t))
    return np.array(out)


def _sums(y_true, y_pred, axis):
    t = np.asarray(y_true, "float64")
    p = np.asarray(y_pred, "float64")
    tp = np.sum(t * p, axis=axis)
    fp = np.sum((1 - t) * p, axis=axis)
    fn = np.sum(t * (1 - p), axis=axis)
    return tp, fp, fn


def tversky_loss(y_true, y_pred, alpha=0.5, beta=0.5, axis=None):
    """`1 - TP / (TP + alpha FP + beta FN)`, 0 where the denominator is 0."""
    tp, fp, fn = _sums(y_true, y_pred, axis)
    den = tp + alpha * fp + beta * fn
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den == 0, 0.0, 1.0 - tp / np.where(den == 0, 1.0, den))


def dice_loss(y_true, y_pred, axis=None):
    """`1 - 2 TP / (sum(y_true) + sum(y_pred))`, 0 for empty against empty."""
    t = np.asarray(y_true, "float64")
    p = np.asarray(y_pred, "float64")
    tp = np.sum(t * p, axis=axis)
    den = np.sum(t, axis=axis) + np.sum(p, axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den == 0, 0.0, 1.0 - 2 * tp / np.where(den == 0, 1.0, den))
