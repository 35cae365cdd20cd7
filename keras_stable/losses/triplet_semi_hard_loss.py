"""Triplet loss with semi-hard negative mining (TF Addons' algorithm)."""

from keras_stable.common.arguments import Arg
from keras_stable.common.checks import check_distance_metric
from keras_stable.common.checks import check_margin
from keras_stable.common.serialization import register
from keras_stable.losses._batch_level import BatchLevelLoss
from keras_stable.ops.triplet import semihard_triplet_terms


@register
class TripletSemiHardLoss(BatchLevelLoss):
    """Triplet loss with semi-hard negative mining, NaN-free.

    The counterpart of `tfa.losses.TripletSemiHardLoss` (same arguments,
    same value on every batch with a positive pair and a negative). For
    every pair of an anchor `a` and a positive `p` (same label, `a != p`),
    the semi-hard negative `n` is the closest negative (other label) with
    `d(a, n) > d(a, p)`, or the farthest negative if there is none; the
    pair's loss is `max(d(a, p) - d(a, n) + margin, 0)`, and the loss is
    the mean over the pairs.

    This is the thin class over `keras_stable.ops.triplet_semihard_loss`.

    Args:
        margin: float, the margin (default 1.0).
        distance_metric: `"L2"` (default), `"squared-L2"` or `"angular"`
            (`1 - cos` of the l2-normalised embeddings). TF Addons also
            takes a callable; a callable cannot be serialized, so it is
            rejected here (`ValueError`).
        reduction: a Keras reduction over the (anchor, positive) pairs:
            `"sum_over_batch_size"` (default) and `"mean"` give the mean
            over the pairs (TF Addons' value), `"sum"` their sum,
            `"mean_with_sample_weight"` the weighted mean, and `"none"` the
            `(batch, batch)` matrix of pair losses (0 where `[a, p]` is not
            a pair).
        name: optional name of the loss.
        dtype: dtype of the result, float32 by default (also under a
            mixed-precision policy).

    Call arguments:
        y_true: integer class labels of shape `(batch,)` (or `(batch, 1)`).
        y_pred: embeddings of shape `(batch, dim)`.
        sample_weight: optional `(batch,)` weights. The loss is one number
            per batch, so a weight is the weight of its sample *as an
            anchor*: each pair `(a, p)` is weighted by `sample_weight[a]`.
            A sample with weight 0 - or masked by the Keras mask of `y_pred`
            - takes no part at all (neither as an anchor nor as a positive
            or negative): the loss is then that of the other samples alone.

    Numerical stability:
        The distances are `keras_stable.ops.pairwise_distance`: exact, and
        0 with a gradient of exactly 0 for coincident embeddings
        (duplicated points, a collapsed or all-zero model output), where
        TF Addons' `sqrt(d2 + 1e-16)` gives `1e8`-sized gradients or NaN.
        A batch without a positive pair (all labels distinct) gives 0
        where TF Addons gives NaN (0/0); a batch with a single label gives
        0 (TF Addons: `margin + mean d(a, p)`). Computed in float32, with
        static shapes (XLA-safe); the mining sorts each anchor's distances
        (memory `O(batch**2)`, gradient included) where TF Addons builds a
        `[batch, batch, batch]` mask.

    Examples:
        >>> import numpy as np
        >>> import keras_stable
        >>> loss = keras_stable.losses.TripletSemiHardLoss(margin=1.0)
        >>> labels = np.array([0, 0, 1], "int32")
        >>> embeddings = np.array([[0.0, 0.0], [3.0, 4.0], [3.0, 4.0]], "float32")
        >>> float(loss(labels, embeddings))  # pairs (0, 1): 5-5+1, (1, 0): 5-0+1
        3.5

        References:
            Schroff et al., FaceNet (2015), arXiv:1503.03832.
    """

    args = (
        Arg("margin", 1.0, check_margin),
        Arg("distance_metric", "L2", check_distance_metric),
    )

    def terms(self, y_true, y_pred, present=None):
        return semihard_triplet_terms(y_true, y_pred, self.margin, self.distance_metric, present)
