"""The fused linear cross-entropy with the vocabulary sharded over devices
(JAX, `keras.distribution.ModelParallel`). Imported only on JAX.

Under a `ModelParallel` distribution whose mesh has the batch axis and one
model axis, the head runs as a `jax.shard_map` over that mesh: each device
holds `tokens / batch` rows of the hidden states and `vocab / model`
columns of the kernel, runs the same block loops as on one device over its
shard (`head.py`), and the devices of a model row combine
their partial log-sum-exps with one `pmax` and one `psum` (the online
softmax across devices instead of across blocks). The label's logit lives
on one shard (a `psum` of the others' zeros). The backward sums the
hidden-state gradient over the model axis and the kernel's over the batch
axis. No device ever holds the whole kernel, its gradient or a
`[tokens, vocab]` block: its memory for the head is about `1 / model` of
the unsharded one (and `1 / batch` for the activations).
"""

import jax
import keras
from jax import lax
from jax.sharding import PartitionSpec as P
from keras import ops

from keras_stable.ops._kernels import head


class VocabularySharding:
    """Where the head runs: a JAX mesh, its batch axis and its model axis."""

    def __init__(self, mesh, batch_axis, model_axis):
        self.mesh = mesh
        self.batch_axis = batch_axis
        self.model_axis = model_axis


def plan(tokens, vocab):
    """The `VocabularySharding` of the active distribution, or None where
    the head runs as on one device: no `ModelParallel` distribution, a mesh
    without exactly one model axis (of size > 1) beside the batch axis, a
    vocabulary the model axis does not divide, or a token count (unknown,
    or not divisible by the batch axis) it cannot split."""
    distribution = keras.distribution.distribution()
    if not isinstance(distribution, keras.distribution.ModelParallel):
        return None
    mesh = distribution.device_mesh
    sizes = dict(zip(mesh.axis_names, mesh.shape))
    batch_axis = distribution.batch_dim_name
    model_axes = [name for name in mesh.axis_names if name != batch_axis]
    if len(model_axes) != 1 or sizes[model_axes[0]] == 1:
        return None
    model_axis = model_axes[0]
    if vocab % sizes[model_axis] or tokens is None or tokens % sizes.get(batch_axis, 1):
        return None
    return VocabularySharding(mesh.backend_mesh, batch_axis, model_axis)


def _combine_logsumexp(running_max, total, axis):
    """The devices' partial `(max, shifted sum)` → the row's `(max, sum)`."""
    row_max = lax.pmax(running_max, axis)
    shift = head.finite_shift(row_max)
    # A shard with nothing finite (sum 0, max still the sentinel) adds 0.
    return row_max, lax.psum(head.rescale(total, running_max, shift), axis)


def sharded_linear_cross_entropy(hidden, kernel, bias, labels, counted, chunk_size, options, where):
    """`linear_cross_entropy_kernel` over the mesh of `where` (the same
    arguments; `labels` in `[0, vocab)` wherever `counted`)."""
    vocab = options.vocab(kernel)
    batch, model = where.batch_axis, where.model_axis
    kernel_spec = P(model, None) if options.transpose_kernel else P(None, model)
    rows, matrix_rows = P(batch), P(batch, None)

    def shard(fn, in_specs, out_specs):
        # check_vma=False: the block loops start from fresh zeros (replicated
        # values) and carry per-device ones; the collectives are explicit.
        return jax.shard_map(
            fn, mesh=where.mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False
        )

    def local_labels(kernel, labels):
        # This shard's columns are [offset, offset + local vocab).
        local_vocab = options.vocab(kernel)
        return labels - lax.axis_index(model) * local_vocab, local_vocab

    def forward(hidden, kernel, bias, labels, counted):
        running_max, total, logit_sum = head.partial_stats(
            hidden, kernel, bias, chunk_size, options
        )
        running_max, total = _combine_logsumexp(running_max, total, model)
        lse, nonempty = head.finish_logsumexp(running_max, total)
        take_part = ops.logical_and(counted, nonempty)
        picked = None
        if options.label_smoothing < 1:
            mine, local_vocab = local_labels(kernel, labels)
            here = ops.logical_and(ops.greater_equal(mine, 0), ops.less(mine, local_vocab))
            safe = ops.where(here, mine, ops.zeros_like(mine))
            picked = head.label_logit(hidden, kernel, bias, safe, options)
            picked = lax.psum(ops.where(here, picked, ops.zeros_like(picked)), model)
        if options.label_smoothing > 0:
            logit_sum = lax.psum(logit_sum, model)
        loss = head.assemble_loss(lse, take_part, picked, logit_sum, vocab, options)
        return loss, lse, take_part

    def backward(hidden, kernel, bias, labels, take_part, lse, g):
        mine, _ = local_labels(kernel, labels)
        d_hidden, d_kernel, d_bias = head.backward_blocks(
            hidden, kernel, bias, mine, take_part, lse, g, chunk_size, vocab, options
        )
        return lax.psum(d_hidden, model), lax.psum(d_kernel, batch), lax.psum(d_bias, batch)

    forward = shard(forward, (matrix_rows, kernel_spec, P(model), rows, rows), (rows, rows, rows))
    backward = shard(
        backward,
        (matrix_rows, kernel_spec, P(model), rows, rows, rows, rows),
        (matrix_rows, kernel_spec, P(model)),
    )

    @jax.custom_vjp
    def fused(hidden, kernel, bias):
        return forward(hidden, kernel, bias, labels, counted)[0]

    def fused_forward(hidden, kernel, bias):
        loss, lse, take_part = forward(hidden, kernel, bias, labels, counted)
        return loss, (hidden, kernel, bias, lse, take_part)

    def fused_backward(saved, upstream):
        hidden, kernel, bias, lse, take_part = saved
        g = ops.where(take_part, ops.cast(upstream, "float32"), ops.zeros_like(lse))
        return backward(hidden, kernel, bias, labels, take_part, lse, g)

    fused.defvjp(fused_forward, fused_backward)
    return fused(hidden, kernel, bias)
