"""Contrastive loss of pairs given their distance (TF Addons' formula)."""

from keras_stable.common.arguments import Arg
from keras_stable.common.checks import check_margin
from keras_stable.common.checks import check_similar_label
from keras_stable.common.dtypes import to_float32
from keras_stable.common.serialization import register
from keras_stable.losses._base import StableLoss
from keras_stable.ops import contrastive_loss


@register
class ContrastiveLoss(StableLoss):
    """Contrastive loss of pairs, given the distance between their embeddings.

    Elementwise `s * d**2 + (1 - s) * max(margin - d, 0)**2` with `s` 1 for
    a similar pair, 0 for a dissimilar one, and `d` the distance: similar
    pairs are pulled together, dissimilar ones pushed at least `margin`
    apart; then the Keras `reduction`. The counterpart of
    `tfa.losses.ContrastiveLoss` (same formula, argument and default).

    Which label means "similar" is a convention, and the two in use are
    opposite: TF Addons' (label 1 = similar, the default here) and the
    keras-io siamese tutorial's (label 0 = similar: pass
    `similar_label=0`). Labels of one convention fed to the other train
    the inverse objective without any error.

    This is the thin class over `keras_stable.ops.contrastive_loss`.

    Args:
        margin: float, the margin (default 1.0).
        similar_label: 1 (default: label 1 = similar pair, TF Addons) or 0
            (label 0 = similar pair, the keras-io siamese tutorial).
        reduction: a Keras reduction: `"sum_over_batch_size"` (default),
            `"sum"`, `"mean"`, `"mean_with_sample_weight"` or `"none"`.
        name: optional name of the loss.
        dtype: dtype of the result, float32 by default.

    Call arguments:
        y_true: 0/1 labels of shape `(batch,)` (`similar_label` marks the
            similar pairs).
        y_pred: distances of shape `(batch,)` (or `(batch, 1)`).
        sample_weight: optional `(batch,)` weights.

    Numerical stability:
        The formula is finite for every finite distance. The trap is the
        distance fed to it: `norm(a - b)` of two identical embeddings has a
        NaN gradient (`x / ||x||` at 0). Compute `y_pred` with
        `keras_stable.ops.safe_norm(a - b, axis=-1)` (0 with a zero
        gradient) or `keras_stable.layers.SafeNorm`. Computed in float32.

    Examples:
        >>> import numpy as np
        >>> import keras_stable
        >>> loss = keras_stable.losses.ContrastiveLoss(margin=1.0, reduction="none")
        >>> np.asarray(loss(np.array([1, 0, 0]), np.array([0.5, 0.5, 2.0], "float32")))
        array([0.25, 0.25, 0.  ], dtype=float32)

        References:
            Hadsell, Chopra and LeCun, Dimensionality Reduction by Learning an
            Invariant Mapping (2006).
    """

    args = (Arg("margin", 1.0, check_margin), Arg("similar_label", 1, check_similar_label))

    def losses_and_valid(self, y_true, y_pred):
        # float32 in, float32 out: the per-example losses are not rounded
        # to the half-precision dtype of a mixed-precision model's output.
        losses = contrastive_loss(
            y_true, to_float32(y_pred), self.margin, similar_label=self.similar_label
        )
        return losses, None
