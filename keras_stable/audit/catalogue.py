"""The trap catalogue: every trap the audit can name (`TRAPS`).

A leaf of the audit: `report.py` (the findings), `pages.py` (the page of a
trap) and the command line read it, and it imports none of them.
"""

# One entry per trap the audit can name: what it is, the keras_stable
# replacement for a layer, for a loss, and the page that explains it (a
# file of `docs/traps/` or `docs/symptoms.md`, shipped with the package:
# `pages.py`).
TRAPS = {
    "norm_at_zero": {
        "title": "norm or sqrt at zero: the gradient x / ||x|| is 0/0",
        "fix": "keras_stable.ops.safe_norm / layers.SafeNorm",
        "loss_fix": "keras_stable.losses.MaskedMultiTaskDistance / ops.safe_norm",
        "doc": "norm-at-zero.md",
    },
    "exp_overflow": {
        "title": "exp of a large input overflows to inf",
        "fix": "keras_stable.ops.logsumexp / ops.softmax / layers.StableSoftmax",
        "loss_fix": "keras_stable.losses.StableSoftmaxCrossEntropy (on the logits)",
        "doc": "softmax-overflow.md",
    },
    "unshifted_softmax": {
        "title": "hand-written exp(s) / sum(exp(s)): inf / inf",
        "fix": "keras_stable.ops.softmax / layers.StableSoftmax",
        "loss_fix": "keras_stable.losses.StableSoftmaxCrossEntropy (on the logits)",
        "doc": "softmax-overflow.md",
    },
    "log_of_zero": {
        "title": "log of an exact 0 (a probability that underflowed): -inf, and 0 x -inf = NaN",
        "fix": "keras_stable.ops.softmax_cross_entropy(from_logits=False), or the loss on logits",
        "loss_fix": "keras_stable.losses.StableSoftmaxCrossEntropy(from_logits=False) on the "
        "probabilities, or on the logits (drop the softmax)",
        "doc": "saturated-probabilities.md",
    },
    "zero_times_inf": {
        "title": "masking by multiplication: 0 x NaN and 0 x inf are NaN",
        "fix": "keras_stable.ops.masked_task_distance (double where)",
        "loss_fix": "keras_stable.losses.MaskedMultiTaskDistance (NaN labels are missing)",
        "doc": "masking.md",
    },
    "fully_masked_row": {
        "title": "a fully masked row: softmax of all -inf is 0/0",
        "fix": "keras_stable.ops.softmax(mask=...) / layers.StableSoftmax",
        "loss_fix": "keras_stable.losses.StableSoftmaxCrossEntropy",
        "doc": "masking.md",
    },
    "epsilon_underflow": {
        "title": "an epsilon that rounds to 0 in half precision",
        "fix": "keras_stable.ops.safe_norm / ops.safe_sqrt (no epsilon, float32 inside)",
        "loss_fix": "keras_stable.losses (computed in float32)",
        "doc": "half-precision.md",
    },
    "label_out_of_range": {
        "title": "a label or an index outside the range: silently 0 on JAX, NaN on a GPU",
        "fix": "keep indices in [0, input_dim): map padding to 0 (mask_zero=True), grow input_dim",
        "loss_fix": "drop or remap the labels, or keras_stable.losses."
        "StableSparseSoftmaxCrossEntropy(ignore_class=...)",
        "doc": "masking.md",
    },
    "ctc_infeasible": {
        "title": "a CTC label with no alignment in its frames: probability 0",
        "fix": "keras_stable.ops.ctc_loss in the layer (0 with a zero gradient there), "
        "or the layer's loss as the compiled keras_stable.losses.StableCTC; and more "
        "frames (less downsampling) or shorter labels for those rows",
        "loss_fix": "keras_stable.losses.StableCTC (0 with a zero gradient there; "
        "metrics.CTCInfeasibleLabels counts them in fit's logs), and more "
        "frames (less downsampling) or shorter labels for those rows",
        "doc": "sequences-and-segmentation.md",
    },
    "half_overflow": {
        "title": "a value or a gradient beyond the float16 range",
        "fix": 'dtype="float32" for this layer (or the keras_stable layer, computed in float32)',
        "loss_fix": "keras_stable.losses (computed in float32)",
        "doc": "half-precision.md",
    },
    "half_underflow": {
        "title": "a layer output whose nonzero entries are all below the smallest normal",
        "fix": 'dtype="float32" for this layer (or rescale its inputs)',
        "loss_fix": "keras_stable.losses (computed in float32)",
        "doc": "half-precision.md",
    },
    "unknown": {
        "title": "not one of the known traps",
        "fix": "see docs/symptoms.md",
        "loss_fix": "see docs/symptoms.md",
        "doc": "symptoms.md",
    },
}
