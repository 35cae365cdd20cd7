"""InfoNCE / NT-Xent contrastive loss of two views (SimCLR)."""

from keras_stable.common.arguments import Arg
from keras_stable.common.checks import check_temperature
from keras_stable.common.serialization import register
from keras_stable.losses._batch_level import BatchLevelLoss
from keras_stable.ops.contrastive import info_nce_terms


@register
class InfoNCELoss(BatchLevelLoss):
    """InfoNCE (NT-Xent) loss of two views of each example, NaN-free.

    `y_pred[0, i]` and `y_pred[1, i]` are two views of example `i` (two
    augmentations, or an image and its caption). Each of the `2 * batch`
    embeddings is l2-normalised and scored against the `2 * batch - 1`
    others by `cos / temperature`; its loss is the cross-entropy of
    picking its partner view. Example `i`'s loss is the mean of its two
    views' losses, and the loss is the mean over the examples (SimCLR's
    NT-Xent; the positives are the pairs, so `y_true` is not read).

    This is the thin class over `keras_stable.ops.info_nce_loss`.

    Args:
        temperature: float > 0 (default 0.1); `ValueError` otherwise.
        reduction: a Keras reduction over the examples (pairs of views):
            `"sum_over_batch_size"` (default), `"sum"`, `"mean"`,
            `"mean_with_sample_weight"` or `"none"` (`(batch,)` losses).
        name: optional name of the loss.
        dtype: dtype of the result, float32 by default.

    Call arguments:
        y_true: ignored (pass anything with a batch axis, e.g.
            `np.zeros(batch)`, for `fit`).
        y_pred: the two views stacked as `(2, batch, dim)`; `ValueError`
            for any other shape.
        sample_weight: optional `(batch,)` weights of the examples. An
            example with weight 0 - or masked by a `(batch,)` or
            `(2, batch)` Keras mask of `y_pred` - takes no part at all (its
            views are not candidates for the others either).

    Numerical stability:
        Built on `keras_stable.ops.log_softmax` with a mask that removes
        each embedding's similarity to itself, instead of subtracting
        `1e9` (which overflows float16 to `-inf`, and gives NaN for an
        all-masked row): finite for every temperature, float16 and
        bfloat16 included (computed in float32). A zero embedding has
        similarity 0 to everything and a finite gradient
        (`keras_stable.ops.l2_normalize`).

    Examples:
        >>> import numpy as np
        >>> import keras_stable
        >>> loss = keras_stable.losses.InfoNCELoss(temperature=1.0)
        >>> views = np.array([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]]], "float32")
        >>> round(float(loss(np.zeros(2), views)), 6)  # log(1 + 2 / e)
        0.551445

        References:
            Chen et al., SimCLR (2020), arXiv:2002.05709; van den Oord et al.,
            CPC (2018), arXiv:1807.03748.
    """

    args = (Arg("temperature", 0.1, check_temperature),)
    batch_axis = 1  # y_pred: (2, batch, dim)
    views = True

    def terms(self, y_true, y_pred, present=None):
        return info_nce_terms(y_pred, self.temperature, present)
