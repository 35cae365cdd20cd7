"""Contrastive losses of pairs and views: `contrastive_loss` (TF Addons'
formula) and InfoNCE / NT-Xent (`info_nce_loss`).

The public functions are the functional twins of the loss classes in
`keras_stable.losses`; `info_nce_terms` returns the unreduced terms and
which of them count, for the class's reduction (internal shared API: not
in `ops.__all__`).
"""

from keras import ops

from keras_stable.common.checks import check_margin
from keras_stable.common.checks import check_similar_label
from keras_stable.common.checks import check_temperature
from keras_stable.common.dtypes import dtype_of
from keras_stable.common.dtypes import is_float
from keras_stable.common.dtypes import maximum
from keras_stable.common.dtypes import mean
from keras_stable.common.dtypes import result_float_dtype
from keras_stable.common.dtypes import static_shape
from keras_stable.common.dtypes import to_float32
from keras_stable.ops.norms import l2_normalize
from keras_stable.ops.norms import rescaled
from keras_stable.ops.softmax import logsumexp


def contrastive_loss(labels, distances, margin=1.0, *, similar_label=1):
    """Contrastive loss of pairs given their distance (TF Addons' formula).

    `s * d**2 + (1 - s) * max(margin - d, 0)**2`, elementwise, with `s` 1
    for a similar pair and 0 for a dissimilar one: similar pairs are pulled
    together, dissimilar pairs pushed at least `margin` apart. By default
    (`similar_label=1`, TF Addons' convention) `s = labels`; with
    `similar_label=0` (the keras-io siamese tutorial's convention, label 0
    = similar) `s = 1 - labels`. Feeding labels of one convention to the
    other silently trains the inverse objective: say which one you use.

    Args:
        labels: 0/1 similarity labels (integers, booleans or floats), of
            the shape of `distances` (a trailing size-1 axis on either
            side is matched, as Keras does).
        distances: float distances between the two embeddings of each pair.
        margin: float, the margin.
        similar_label: 1 (default: label 1 = similar pair) or 0 (label 0 =
            similar pair).

    Returns:
        The elementwise losses, in the float dtype of `distances`.

    Numerical stability:
        The formula itself is finite for any finite distance (an infinite
        distance gives 0 for a dissimilar pair, `inf` for a similar one).
        The trap is upstream: the distance of two identical embeddings,
        `norm(a - b)`, has a NaN gradient. Compute it with
        `keras_stable.ops.safe_norm(a - b, axis=-1)` (0 with a zero
        gradient) rather than `keras.ops.norm` or `tf.norm`.
        float16/bfloat16 are computed in float32.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> np.asarray(ops.contrastive_loss(np.array([1, 0, 0]), np.array([0.5, 0.5, 2.0], "float32")))
        array([0.25, 0.25, 0.  ], dtype=float32)

        References:
            Hadsell, Chopra and LeCun, Dimensionality Reduction by Learning an
            Invariant Mapping (2006); TF Addons, `tfa.losses.contrastive_loss`.
    """
    margin = check_margin(margin)
    similar_label = check_similar_label(similar_label)
    distances = ops.convert_to_tensor(distances)
    labels = ops.convert_to_tensor(labels)
    out_dtype = result_float_dtype(dtype_of(distances))
    distances = to_float32(distances)
    labels = ops.cast(labels, distances.dtype)
    t, p = static_shape(labels), static_shape(distances)
    if len(p) == len(t) + 1 and p[-1] == 1:
        distances = ops.squeeze(distances, axis=-1)
    elif len(t) == len(p) + 1 and t[-1] == 1:
        labels = ops.squeeze(labels, axis=-1)
    if static_shape(labels) != static_shape(distances):
        raise ValueError(
            "`y_true` (labels) and `y_pred` (distances) must have the same "
            f"shape, got y_true.shape={t} and y_pred.shape={p}."
        )
    similar = labels if similar_label == 1 else 1.0 - labels
    gap = maximum(margin - distances, 0.0)
    loss = similar * ops.square(distances) + (1.0 - similar) * ops.square(gap)
    return ops.cast(loss, out_dtype)


def prepare_views(views):
    """Checks `(2, batch, dim)` views; returns them in float32."""
    views = ops.convert_to_tensor(views)
    shape = static_shape(views)
    if len(shape) != 3 or shape[0] != 2 or shape[2] is None:
        raise ValueError(
            "`y_pred` must hold two views stacked as (2, batch, dim) with a "
            f"static dim, got y_pred.shape={shape}."
        )
    if not is_float(dtype_of(views)):
        raise ValueError(f"`y_pred` must hold float embeddings, got dtype {dtype_of(views)}.")
    return to_float32(views)


def info_nce_terms(views, temperature=0.1, present=None):
    """The NT-Xent loss of each pair of views.

    Returns `(values, valid)`, both `[batch]`: `values[i]` is the mean of
    the two directions' cross-entropies `-log softmax(s / temperature)` at
    the other view of example `i`, over the `2 * batch - 1` candidates
    other than itself; `valid` is `present` (or None).
    """
    temperature = check_temperature(temperature)
    views = prepare_views(views)
    dim = static_shape(views)[2]
    if present is not None:
        present = ops.cast(present, "bool")
        views = ops.where(ops.reshape(present, (1, -1, 1)), views, ops.zeros_like(views))
    # Rows 0..B-1 are the first views, B..2B-1 the second ones.
    unit = l2_normalize(rescaled(ops.reshape(views, (-1, dim))), axis=-1)
    logits = ops.einsum("id,jd->ij", unit, unit) / temperature
    # Row positions and each row's other view, counted without the batch
    # size (unknown in a symbolic call).
    index = ops.cumsum(ops.ones_like(unit[:, 0], dtype="int32")) - 1
    not_self = ops.not_equal(ops.expand_dims(index, 1), ops.expand_dims(index, 0))
    mask = not_self
    if present is not None:
        candidates = ops.concatenate([present, present], axis=0)
        mask = ops.logical_and(mask, ops.expand_dims(candidates, 0))
    # The self-similarity (and absent candidates) leave the softmax through
    # its mask, not through `-1e9` or `-inf` logits: nothing overflows in
    # float16 and the masked entries get a zero gradient. The log-softmax
    # at the partner alone, `logit - logsumexp`: no `-inf` at the masked
    # entries for the NaN tools to flag.
    partner = ops.reshape(ops.flip(ops.reshape(index, (2, -1)), axis=0), (-1,))
    partner_logit = ops.take_along_axis(logits, ops.expand_dims(partner, 1), axis=1)[:, 0]
    picked = partner_logit - logsumexp(logits, axis=-1, mask=mask)
    per_view = -ops.reshape(picked, (2, -1))
    values = 0.5 * (per_view[0] + per_view[1])
    if present is None:
        return values, None
    return ops.where(present, values, ops.zeros_like(values)), present


def info_nce_loss(views, temperature=0.1):
    """InfoNCE / NT-Xent loss of two views of a batch (SimCLR).

    `views[0, i]` and `views[1, i]` are two views (augmentations, or an
    image and its caption) of example `i`. Each of the `2 * batch`
    embeddings is l2-normalised and scored against the `2 * batch - 1`
    others by cosine similarity over `temperature`; its loss is the
    cross-entropy of picking its partner view. The result is the mean over
    the `2 * batch` embeddings (Chen et al.'s NT-Xent).

    Args:
        views: float tensor of shape `(2, batch, dim)`.
        temperature: float > 0 (default 0.1).

    Returns:
        A scalar in the float dtype of `views` (computed in float32).

    Numerical stability:
        Built on `keras_stable.ops.logsumexp` with a mask that removes the
        self-similarity: no `-1e9` (which is `-inf` in float16 and NaN
        after `-inf - (-inf)`) and no `exp` overflow, whatever the
        temperature. The normalisation is `l2_normalize`: a zero embedding
        has similarity 0 to everything and a finite (zero) gradient.
        float16/bfloat16 are computed in float32. A batch of one pair gives
        0 (its only candidate is the partner).

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> views = np.array([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]]], "float32")
        >>> round(float(ops.info_nce_loss(views, temperature=1.0)), 6)
        0.551445

        References:
            Chen et al., A Simple Framework for Contrastive Learning of Visual
            Representations (SimCLR, 2020), arXiv:2002.05709; van den Oord et
            al., Representation Learning with Contrastive Predictive Coding
            (2018), arXiv:1807.03748.
    """
    views_t = ops.convert_to_tensor(views)
    values, _ = info_nce_terms(views_t, temperature)
    out_dtype = result_float_dtype(dtype_of(views_t))
    return ops.cast(mean(values), out_dtype)
