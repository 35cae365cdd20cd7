"""Batch-hard triplet loss (TF Addons' algorithm)."""

from keras_stable.common.arguments import Arg
from keras_stable.common.arguments import flag
from keras_stable.common.checks import check_distance_metric
from keras_stable.common.checks import check_margin
from keras_stable.common.serialization import register
from keras_stable.losses._batch_level import BatchLevelLoss
from keras_stable.ops.triplet import hard_triplet_terms


@register
class TripletHardLoss(BatchLevelLoss):
    """Batch-hard triplet loss, NaN-free.

    The counterpart of `tfa.losses.TripletHardLoss` (same arguments, same
    value on every batch where each anchor has a positive and a negative).
    For every anchor `a`, the hardest positive `p*` (the farthest sample
    with its label) and the hardest negative `n*` (the closest sample with
    another label); the anchor's loss is `max(d(a, p*) - d(a, n*) +
    margin, 0)`, or `softplus(d(a, p*) - d(a, n*))` with `soft=True` (the
    margin is then unused, as in TF Addons), and the loss is the mean over
    the anchors.

    This is the thin class over `keras_stable.ops.triplet_hard_loss`.

    Args:
        margin: float, the margin (default 1.0).
        soft: use the soft-margin (softplus) version.
        distance_metric: `"L2"` (default), `"squared-L2"` or `"angular"`
            (a callable is rejected: it cannot be serialized).
        reduction: a Keras reduction over the anchors:
            `"sum_over_batch_size"` (default) and `"mean"` give the mean
            over the anchors that have a positive and a negative, `"sum"`
            the sum, `"mean_with_sample_weight"` the weighted mean, and
            `"none"` the `(batch,)` anchor losses (0 for an anchor without
            a positive or a negative).
        name: optional name of the loss.
        dtype: dtype of the result, float32 by default.

    Call arguments:
        y_true: integer class labels of shape `(batch,)` (or `(batch, 1)`).
        y_pred: embeddings of shape `(batch, dim)`.
        sample_weight: optional `(batch,)` weights of the anchors. A sample
            with weight 0 - or masked by the Keras mask of `y_pred` - takes
            no part at all (neither as an anchor nor as a positive or
            negative).

    Numerical stability:
        Distances as in `TripletSemiHardLoss` (exact; 0 with a zero
        gradient for coincident embeddings). Only anchors with a positive
        and a negative count, and a batch without any gives 0. TF Addons
        also averages over anchors without a positive, as if each were its
        own positive (`d(a, p*) = 0`), and gives `margin` for a batch with
        a single label. Computed in float32, with static shapes.

    Examples:
        >>> import numpy as np
        >>> import keras_stable
        >>> loss = keras_stable.losses.TripletHardLoss(margin=1.0)
        >>> labels = np.array([0, 0, 1], "int32")
        >>> embeddings = np.array([[0.0, 0.0], [3.0, 4.0], [3.0, 4.0]], "float32")
        >>> float(loss(labels, embeddings))  # anchors 0: 5-5+1, 1: 5-0+1
        3.5

        References:
            Hermans et al., In Defense of the Triplet Loss for Person
            Re-Identification (2017), arXiv:1703.07737.
    """

    args = (
        Arg("margin", 1.0, check_margin),
        flag("soft", False),
        Arg("distance_metric", "L2", check_distance_metric),
    )

    def terms(self, y_true, y_pred, present=None):
        return hard_triplet_terms(
            y_true, y_pred, self.margin, self.soft, self.distance_metric, present
        )
