"""The closed-form backward pass of the dense softmax cross-entropy
(`softmax_cross_entropy`, float32/float64 labels and logits).

Nothing of the size of the logits is kept for the backward pass, which
recomputes `exp(x - max)`. On PyTorch, `dispatch.fused` runs the native
pass of `torch/passes.py` for finite, unmasked logits.
"""

from keras import ops

from keras_stable.ops._kernels.dispatch import fused
from keras_stable.ops._kernels.dispatch import native_pass
from keras_stable.ops._kernels.softmax import keepdims_sum
from keras_stable.ops._kernels.softmax import shift
from keras_stable.ops._kernels.softmax import valid_entries


def softmax_cross_entropy_kernel(labels, x, axis, mask=None):
    """Per-example `-sum(labels * log_softmax(x, axis, mask), axis)` (`axis`
    an int, reduced) of float32/float64 `labels` and `x` of one shape: the
    value of `softmax_cross_entropy` (0 with a zero label on a dead entry -
    masked or `-inf` -, `+inf` with a nonzero one, 0 for a row with nothing
    left). Gradients, over the live entries (0 on dead ones and for rows
    with nothing left): `g * (p * sum(live labels) - labels)` for `x`, as
    `tf.nn.softmax_cross_entropy_with_logits`, and `-g * log_softmax(x)`
    for the labels.

    Nothing of the size of `x` is kept for the backward pass, which
    recomputes `exp(x - max)` (one read of `x`) rather than reading a
    stored copy (a write and a read): the memory of the built-ins.
    """

    def forward(labels, x):
        valid, z, _, total, nonempty, row_max = shift(x, axis, mask)
        log_total = ops.log(ops.where(nonempty, total, ops.ones_like(total)))
        # labels * -log p on the live entries; on a dead one 0 for a zero
        # label, +inf (the true value) for a nonzero one - never 0 * inf -,
        # as -log(0): no infinite constant, nothing infinite elsewhere.
        harmless = ops.logical_or(valid, ops.equal(labels, 0))
        dead = -ops.log(ops.cast(harmless, x.dtype))
        loss = keepdims_sum(ops.where(valid, labels * (log_total - z), dead), axis)
        loss = ops.where(nonempty, loss, ops.zeros_like(loss))
        return ops.squeeze(loss, axis), (total, row_max, log_total)

    def backward(inputs, saved, loss, upstream):
        labels, x = inputs
        total, row_max, log_total = saved
        valid = valid_entries(x, mask)
        nonempty = ops.not_equal(total, 0)
        g = ops.expand_dims(ops.cast(upstream, x.dtype), axis)
        # Rows with nothing left are selected out whole, an infinite or NaN
        # upstream gradient there included.
        g = ops.where(nonempty, g, ops.zeros_like(g))
        zeros = ops.zeros_like(x)
        live_labels = ops.where(valid, labels, zeros)
        factor = keepdims_sum(live_labels, axis) * (
            g / ops.where(nonempty, total, ops.ones_like(total))
        )
        z = x - row_max
        d_x = ops.where(valid, ops.exp(z) * factor - g * labels, zeros)
        d_labels = ops.where(valid, g * (log_total - z), zeros)
        return [d_labels, d_x]

    return fused(
        forward, backward, labels, x, native=native_pass("softmax_cross_entropy", axis, mask)
    )
