"""Triplet losses with mining (TF Addons' algorithms), with static shapes.

The public functions (`triplet_semihard_loss`, `triplet_hard_loss`) are
the functional twins of the loss classes in `keras_stable.losses`; the
`*_triplet_terms` functions return the unreduced terms and which of them
count, for the classes' reductions (internal shared API: not in
`ops.__all__`).
"""

from keras import ops

from keras_stable.common.checks import check_bool
from keras_stable.common.checks import check_distance_metric
from keras_stable.common.checks import check_margin
from keras_stable.common.dtypes import axis_length
from keras_stable.common.dtypes import dtype_of
from keras_stable.common.dtypes import highest_like
from keras_stable.common.dtypes import is_float
from keras_stable.common.dtypes import lowest_like
from keras_stable.common.dtypes import maximum
from keras_stable.common.dtypes import minimum
from keras_stable.common.dtypes import result_float_dtype
from keras_stable.common.dtypes import static_shape
from keras_stable.common.dtypes import to_float32
from keras_stable.ops.geometry import pairwise_distance
from keras_stable.ops.norms import l2_normalize
from keras_stable.ops.norms import rescaled


def prepare_labels_and_embeddings(labels, embeddings):
    """Checks `(batch,)` labels against `(batch, dim)` embeddings.

    Returns the labels (a `(batch, 1)` label tensor is squeezed) and the
    embeddings in float32 (float64 stays). Integer labels are used as
    they are; float labels (Keras's data adapters may hand integer targets
    over as floats) are compared exactly, as TF Addons compares them.
    """
    labels = ops.convert_to_tensor(labels)
    embeddings = ops.convert_to_tensor(embeddings)
    e_shape = static_shape(embeddings)
    if len(e_shape) != 2 or e_shape[1] is None:
        raise ValueError(
            "`y_pred` must hold embeddings of shape (batch, dim) with a "
            f"static dim, got y_pred.shape={e_shape}."
        )
    if not is_float(dtype_of(embeddings)):
        raise ValueError(f"`y_pred` must hold float embeddings, got dtype {dtype_of(embeddings)}.")
    l_shape = static_shape(labels)
    if len(l_shape) == 2 and l_shape[1] == 1:
        labels = ops.squeeze(labels, axis=1)
    dtype = dtype_of(labels)
    numeric = dtype.startswith(("int", "uint")) or is_float(dtype)
    if len(static_shape(labels)) != 1 or not numeric:
        raise ValueError(
            "`y_true` must hold integer class labels of shape (batch,), got "
            f"y_true.shape={l_shape} with dtype {dtype}."
        )
    n_labels, n_rows = static_shape(labels)[0], e_shape[0]
    if None not in (n_labels, n_rows) and n_labels != n_rows:
        raise ValueError(
            "`y_true` must hold one label per embedding: got "
            f"y_true.shape={l_shape} and y_pred.shape={e_shape}."
        )
    return labels, to_float32(embeddings)


def _present(present, embeddings):
    """Zeroes the rows of absent samples (a NaN there never reaches the
    arithmetic, nor the gradient) and returns `(embeddings, present)`."""
    if present is None:
        return embeddings, None
    present = ops.cast(present, "bool")
    rows = ops.expand_dims(present, -1)
    embeddings = ops.where(rows, embeddings, ops.zeros_like(embeddings))
    return embeddings, present


def embedding_distances(embeddings, distance_metric="L2"):
    """The `[batch, batch]` distances of TF Addons' `distance_metric`.

    `"L2"`: Euclidean, `"squared-L2"`: squared Euclidean (both
    `pairwise_distance`: exact, 0 with a zero gradient for coincident
    embeddings); `"angular"`: `1 - cos` of the l2-normalised embeddings,
    computed as `||u_i - u_j||**2 / 2` of the unit vectors (exact for small
    angles, 0 with a zero gradient for parallel embeddings), and 1 where
    either embedding is the zero vector (TF Addons' value there).
    """
    distance_metric = check_distance_metric(distance_metric)
    if distance_metric == "L2":
        return pairwise_distance(embeddings)
    if distance_metric == "squared-L2":
        return pairwise_distance(embeddings, squared=True)
    unit = l2_normalize(rescaled(embeddings), axis=-1)
    half_sq = 0.5 * pairwise_distance(unit, squared=True)
    nonzero = ops.any(ops.not_equal(embeddings, 0), axis=-1)
    both = ops.logical_and(ops.expand_dims(nonzero, 1), ops.expand_dims(nonzero, 0))
    return ops.where(both, half_sq, ops.ones_like(half_sq))


def _pair_masks(labels, present):
    """`(positive, negative)` `[batch, batch]` masks over present samples."""
    same = ops.equal(ops.expand_dims(labels, 1), ops.expand_dims(labels, 0))
    # Positions counted from the labels themselves, not their (possibly
    # unknown, symbolic) length.
    index = ops.cumsum(ops.ones_like(labels, dtype="int32"))
    diagonal = ops.equal(ops.expand_dims(index, 1), ops.expand_dims(index, 0))
    positive = ops.logical_and(same, ops.logical_not(diagonal))
    negative = ops.logical_not(same)
    if present is not None:
        both = ops.logical_and(ops.expand_dims(present, 1), ops.expand_dims(present, 0))
        positive = ops.logical_and(positive, both)
        negative = ops.logical_and(negative, both)
    return positive, negative


def _semihard_negatives(fixed, negative):
    """The column of the semi-hard negative of each (anchor, positive) pair.

    `fixed` holds the `[batch, batch]` distances (no gradient), `negative`
    the negative mask. For the pair `(a, p)`: the closest negative `n` with
    `d(a, n) > d(a, p)`, the lowest column among tied ones (as `argmin`),
    or, if there is none, the farthest negative, the lowest column among
    tied ones (as `argmax`). TF Addons compares every pair with every
    negative, an `[anchor, positive, negative]` mask; here each anchor's
    row is sorted once and each positive finds its place in it by a running
    count, so nothing larger than `[batch, batch]` is built:

    1. Each row is ordered by `(distance, kind, column)`, `kind` 0 for a
       negative and 1 otherwise: a negative tied with a positive sorts
       before it (it is not farther), tied negatives in column order. The
       distances are sorted first, then the order is refined by a sort of
       unique integer keys (tie run, kind, column), so that it does not
       depend on the backend's sort being stable.
    2. The negatives sorted before `p` are those with `d(a, n) <= d(a, p)`:
       a running count along the sorted row, read back at `p`'s rank.
    3. The negatives of the row in that order (a last sort): the semi-hard
       negative of `(a, p)` is the one at that count, if the count is below
       the number of negatives.
    """
    batch = axis_length(fixed, 1)
    is_negative = ops.cast(negative, "int32")
    by_value = ops.cast(ops.argsort(fixed, axis=1), "int32")
    sorted_values = ops.take_along_axis(fixed, by_value, axis=1)
    # Tie runs along each sorted row: 0, 0, 1, 2, 2, ...
    changed = ops.cast(ops.not_equal(sorted_values[:, 1:], sorted_values[:, :-1]), "int32")
    run = ops.cumsum(ops.concatenate([ops.zeros_like(changed[:, :1]), changed], axis=1), axis=1)
    kind = ops.take_along_axis(1 - is_negative, by_value, axis=1)
    # Unique keys below 2 * batch**2 (int32: batch <= 32768).
    key = (ops.cast(run, "int32") * 2 + kind) * batch + by_value
    order = ops.take_along_axis(by_value, ops.cast(ops.argsort(key, axis=1), "int32"), axis=1)
    rank = ops.cast(ops.argsort(order, axis=1), "int32")  # the inverse permutation
    negative_sorted = ops.take_along_axis(is_negative, order, axis=1)
    before = ops.cast(ops.cumsum(negative_sorted, axis=1), "int32") - negative_sorted
    count = ops.take_along_axis(before, rank, axis=1)  # #{n: d(a, n) <= d(a, p)}
    negatives = ops.argsort(ops.where(negative, rank, rank + batch), axis=1)
    closest_outside = ops.take_along_axis(
        ops.cast(negatives, "int32"), minimum(count, batch - 1), axis=1
    )
    has_outside = ops.less(count, ops.sum(is_negative, axis=1, keepdims=True))
    farthest = ops.cast(ops.argmax(ops.where(negative, fixed, lowest_like(fixed)), axis=1), "int32")
    return ops.where(has_outside, closest_outside, ops.expand_dims(farthest, 1))


def semihard_triplet_terms(labels, embeddings, margin=1.0, distance_metric="L2", present=None):
    """The semi-hard triplet loss of each (anchor, positive) pair.

    Returns `(values, valid)`, both `[batch, batch]`: `values[a, p] =
    max(d(a, p) - d(a, n) + margin, 0)` with `n` the semi-hard negative of
    the pair (TF Addons: the closest negative farther than `d(a, p)`, else
    the farthest negative), and `valid[a, p]` true for the pairs that count
    (same label, `a != p`, both present, `a` has a negative). `values` is 0
    where not valid. Memory is `O(batch**2)`, in the gradient too.
    """
    margin = check_margin(margin)
    labels, embeddings = prepare_labels_and_embeddings(labels, embeddings)
    embeddings, present = _present(present, embeddings)
    dist = embedding_distances(embeddings, distance_metric)
    positive, negative = _pair_masks(labels, present)
    # The choice of the negative carries no gradient (the gradient flows
    # into the chosen distance through `take_along_axis`).
    chosen = _semihard_negatives(ops.stop_gradient(dist), negative)
    d_neg = ops.take_along_axis(dist, chosen, axis=1)
    loss = maximum(dist - d_neg + margin, 0.0)
    has_negative = ops.any(negative, axis=1, keepdims=True)
    valid = ops.logical_and(positive, has_negative)
    return ops.where(valid, loss, ops.zeros_like(loss)), valid


def hard_triplet_terms(
    labels,
    embeddings,
    margin=1.0,
    soft=False,
    distance_metric="L2",
    present=None,
):
    """The batch-hard triplet loss of each anchor.

    Returns `(values, valid)`, both `[batch]`: `values[a] = max(d(a, p*) -
    d(a, n*) + margin, 0)` (`softplus(d(a, p*) - d(a, n*))` with
    `soft=True`) with `p*` the farthest positive and `n*` the closest
    negative of `a`, and `valid[a]` true for the present anchors with at
    least one positive and one negative. `values` is 0 where not valid.
    """
    margin = check_margin(margin)
    soft = check_bool(soft, "soft")
    labels, embeddings = prepare_labels_and_embeddings(labels, embeddings)
    embeddings, present = _present(present, embeddings)
    dist = embedding_distances(embeddings, distance_metric)
    positive, negative = _pair_masks(labels, present)
    has_positive = ops.any(positive, axis=1)
    has_negative = ops.any(negative, axis=1)
    # Finite sentinels, and a double where: an anchor without positives (or
    # negatives) has its term replaced by 0 before the subtraction.
    hardest_positive = ops.max(ops.where(positive, dist, lowest_like(dist)), axis=1)
    hardest_negative = ops.min(ops.where(negative, dist, highest_like(dist)), axis=1)
    valid = ops.logical_and(has_positive, has_negative)
    zero = ops.zeros_like(hardest_positive)
    gap = ops.where(valid, hardest_positive, zero) - ops.where(valid, hardest_negative, zero)
    if soft:
        loss = ops.softplus(gap)
    else:
        loss = maximum(gap + margin, 0.0)
    return ops.where(valid, loss, ops.zeros_like(loss)), valid


def _mean_over_valid(values, valid, like):
    total = ops.sum(values)
    count = ops.sum(ops.cast(valid, values.dtype))
    out_dtype = result_float_dtype(dtype_of(like))
    # 0 without a valid entry (`ops.divide_no_nan` is float32 on torch).
    some = ops.greater(count, 0)
    return ops.cast(ops.where(some, total / ops.where(some, count, 1.0), 0.0), out_dtype)


def triplet_semihard_loss(labels, embeddings, margin=1.0, distance_metric="L2"):
    """Triplet loss with semi-hard negative mining (TF Addons' algorithm).

    For every pair of an anchor `a` and a positive `p` (same label,
    `a != p`), the semi-hard negative `n` is the closest negative with
    `d(a, n) > d(a, p)`, or, if there is none, the farthest negative; the
    loss is the mean over those pairs of `max(d(a, p) - d(a, n) + margin,
    0)`. This is `tfa.losses.triplet_semihard_loss`, re-implemented with
    static shapes (`keras.ops`, XLA-safe, no `boolean_mask`).

    Args:
        labels: `(batch,)` integer class labels.
        embeddings: `(batch, dim)` float embeddings (TF Addons expects
            them l2-normalised; nothing here requires it).
        margin: float, the margin.
        distance_metric: `"L2"` (default), `"squared-L2"` or `"angular"`
            (`1 - cos` of the l2-normalised embeddings).

    Returns:
        A scalar in the float dtype of `embeddings` (computed in float32).

    Numerical stability:
        The distances are `pairwise_distance`: exact, and 0 with a zero
        gradient for coincident embeddings (duplicated points, collapsed
        or all-zero embeddings), where TF Addons' `sqrt(d2 + 1e-16)` gives
        finite but `1e8`-sized gradients, or NaN under XLA for a zero
        vector. A batch without any positive pair gives 0 (TF Addons:
        `0/0 = NaN`); a batch without negatives (a single label) gives 0
        (TF Addons: `margin + mean d(a, p)`, an artefact of its masked
        maximum). Memory is `O(batch**2)`, value and gradient: each
        anchor's distances are sorted once, where TF Addons builds an
        `O(batch**3)` mask.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> labels = np.array([0, 0], "int32")
        >>> embeddings = np.array([[0.0, 1.0], [1.0, 0.0]], "float32")
        >>> round(float(ops.triplet_semihard_loss(labels, embeddings)), 6)
        0.0

        References:
            Schroff et al., FaceNet (2015), arXiv:1503.03832; TF Addons,
            `tfa.losses.triplet_semihard_loss`.
    """
    values, valid = semihard_triplet_terms(labels, embeddings, margin, distance_metric)
    return _mean_over_valid(values, valid, ops.convert_to_tensor(embeddings))


def triplet_hard_loss(labels, embeddings, margin=1.0, soft=False, distance_metric="L2"):
    """Batch-hard triplet loss (TF Addons' algorithm).

    For every anchor, the hardest positive (farthest, same label) and the
    hardest negative (closest, other label); the loss is the mean over
    anchors of `max(d(a, p*) - d(a, n*) + margin, 0)`, or of
    `softplus(d(a, p*) - d(a, n*))` with `soft=True` (the margin is then
    unused, as in TF Addons). This is `tfa.losses.triplet_hard_loss`
    with static shapes.

    Args:
        labels: `(batch,)` integer class labels.
        embeddings: `(batch, dim)` float embeddings.
        margin: float, the margin.
        soft: use the soft-margin (softplus) version.
        distance_metric: `"L2"` (default), `"squared-L2"` or `"angular"`.

    Returns:
        A scalar in the float dtype of `embeddings` (computed in float32).

    Numerical stability:
        Distances as in `triplet_semihard_loss` (exact, zero gradient at
        coincident embeddings). Only anchors with at least one positive and
        one negative count; a batch with none gives 0. TF Addons also
        averages over anchors without a positive, as if the anchor were its
        own positive (`d(a, p*) = 0`), and gives `margin` for a batch with
        a single label.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> labels = np.array([0, 0, 1], "int32")
        >>> embeddings = np.array([[0.0, 0.0], [3.0, 4.0], [3.0, 4.0]], "float32")
        >>> float(ops.triplet_hard_loss(labels, embeddings))
        3.5

        References:
            Hermans et al., In Defense of the Triplet Loss for Person
            Re-Identification (2017), arXiv:1703.07737; TF Addons,
            `tfa.losses.triplet_hard_loss`.
    """
    values, valid = hard_triplet_terms(labels, embeddings, margin, soft, distance_metric)
    return _mean_over_valid(values, valid, ops.convert_to_tensor(embeddings))
