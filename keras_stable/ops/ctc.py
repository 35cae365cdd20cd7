"""Connectionist temporal classification: the forward algorithm in log space.

A sample whose label cannot be aligned to its frames has probability 0 and
a loss of `+inf`; here it is 0 (or `+inf`) with an exactly zero gradient,
decided from the lengths alone, never from an overflowing sum.
"""

import numbers

import keras
import numpy as np
from keras import ops

from keras_stable.common.checks import check_bool
from keras_stable.common.dtypes import compute_dtype_of
from keras_stable.common.dtypes import dtype_of
from keras_stable.common.dtypes import static_shape
from keras_stable.ops import _kernels
from keras_stable.ops._kernels import UNREACHABLE
from keras_stable.ops._kernels import ctc_log_likelihood


def _is_host(x):
    return isinstance(x, (np.ndarray, np.generic, numbers.Number, list, tuple))


def _check_host_lengths(lengths, name, limit, limit_name):
    """Lengths given as host data lie in `[0, limit]`; tensors are not read
    (a device synchronisation per eager step; a compiled function cannot
    raise on values)."""
    if not _is_host(lengths):
        return
    values = np.asarray(lengths)
    if values.size and (values.min() < 0 or (limit is not None and values.max() > limit)):
        raise ValueError(
            f"`{name}` must lie in [0, {limit_name}={limit}], got values in "
            f"[{values.min()}, {values.max()}] (shape {values.shape})."
        )


def _check_shapes(target, output, target_length, output_length):
    t_shape, o_shape = static_shape(target), static_shape(output)
    if len(t_shape) != 2:
        raise ValueError(
            f"`target` must have shape (batch, max_label_length) of integer "
            f"labels, got target.shape={t_shape}."
        )
    if len(o_shape) != 3:
        raise ValueError(
            f"`output` must have shape (batch, max_time, num_classes) of "
            f"logits, got output.shape={o_shape}."
        )
    shapes = {
        "target": t_shape,
        "output": o_shape,
        "target_length": static_shape(target_length),
        "output_length": static_shape(output_length),
    }
    for name in ("target_length", "output_length"):
        if len(shapes[name]) != 1:
            raise ValueError(f"`{name}` must have shape (batch,), got {name}.shape={shapes[name]}.")
    batches = {name: shape[0] for name, shape in shapes.items() if shape[0] is not None}
    if len(set(batches.values())) > 1:
        raise ValueError(
            "`target`, `output`, `target_length` and `output_length` must "
            f"have the same batch size, got shapes {shapes}."
        )


def check_mask_index(mask_index, num_classes):
    if isinstance(mask_index, bool) or not isinstance(mask_index, numbers.Integral):
        raise ValueError(
            f"`mask_index` must be an int (the blank class), got {mask_index!r} "
            f"of type {type(mask_index).__name__}."
        )
    if num_classes is not None and not 0 <= mask_index < num_classes:
        raise ValueError(
            f"`mask_index`={mask_index} is not a class of `output` with "
            f"num_classes={num_classes}: expected an int in [0, {num_classes - 1}]."
        )
    return int(mask_index)


def _dim(x, axis):
    """The size of `x` along `axis`: static where known, else a scalar
    tensor (a label or frame count padded per batch, on TensorFlow)."""
    size = static_shape(x)[axis]
    return ops.shape(x)[axis] if size is None else size


def _symbolic(logits, *tensors):
    """The `(batch,)` KerasTensor of the losses when an input is symbolic
    (`keras.Input`), else None: only the shape and dtype are asked for."""
    if not any(isinstance(t, keras.KerasTensor) for t in (logits, *tensors)):
        return None
    batches = [static_shape(t)[0] for t in (logits, *tensors) if t is not None]
    batch = next((b for b in batches if b is not None), None)
    return keras.KerasTensor((batch,), dtype=dtype_of(logits))


def ctc_loss_over_frames(
    target, logits, target_length, frames, mask_index, zero_infinity, output_length=None
):
    """The CTC loss of each sample over the frames `frames` marks.

    `frames` (boolean, `(batch, time)`) says which frames are input: the
    recursion passes over the others unchanged, so a padded frame anywhere
    (the Keras mask of a model output) is not read. `logits` is float32 or
    float64; `target` int32; `target_length` int32. Shapes are checked by
    the caller; `max_label_length` and `time` may be unknown until run time.
    On PyTorch torch's own CTC runs where it gives the same values
    (`ops/_kernels/torch/losses.py`, `native_ctc_loss`): over the first
    `output_length` frames (int32 `(batch,)`) when given, else over the
    marked frames gathered to the front (`native_ctc_loss_over_frames`).
    """
    symbolic = _symbolic(logits, target, target_length, frames, output_length)
    if symbolic is not None:
        return symbolic
    # Entries past a label's length are ignored, whatever they hold (-1, a
    # class out of range): the blank stands in for them, so the gather of
    # the emissions reads only classes of `logits`.
    position = ops.expand_dims(ops.arange(_dim(target, 1), dtype="int32"), 0)
    in_label = ops.less(position, ops.expand_dims(target_length, 1))  # (B, L)
    target = ops.where(in_label, target, ops.full_like(target, mask_index))
    # A label may follow the previous label directly (skipping the blank
    # between them) unless the two are equal: `[1, 1]` needs a blank. The
    # first label has no previous one (compared with itself: no skip).
    previous = ops.concatenate([target[:, :1], target[:, :-1]], axis=1)
    skips = ops.not_equal(target, previous)  # (B, L)

    log_likelihood = None
    if _kernels.kernels_enabled():
        if output_length is not None:
            loss = _kernels.native_op(
                "ctc_loss", target, logits, target_length, output_length, mask_index
            )
        else:
            loss = _kernels.native_op(
                "ctc_loss_over_frames", target, logits, target_length, frames, mask_index
            )
        log_likelihood = None if loss is None else -loss
    if log_likelihood is None:
        log_likelihood = _log_likelihood(target, logits, target_length, frames, mask_index, skips)
    # Rounding can put a near-certain alignment a few ulp above log(1).
    loss = ops.where(ops.less(log_likelihood, 0), -log_likelihood, ops.zeros_like(log_likelihood))

    feasible = ctc_feasible_over_frames(target, target_length, frames)
    if zero_infinity:
        return ops.where(feasible, loss, ops.zeros_like(loss))
    # `+inf` made where a sample is infeasible only (`1 / 0`), not a
    # tensor of infinities for every sample: on feasible samples no
    # intermediate is inf (`jax.debug_infs`, TF's `enable_check_numerics`).
    # The select keeps the gradient of an infeasible sample exactly 0.
    return ops.divide(
        ops.where(feasible, loss, ops.ones_like(loss)), ops.cast(feasible, dtype_of(loss))
    )


def ctc_feasible_over_frames(target, target_length, frames):
    """Whether each sample's label has an alignment to its frames (bool
    `(batch,)`): the frames `frames` marks (boolean `(batch, time)`) cover
    the first `target_length` labels of `target` plus one blank between
    each pair of equal neighbours (`[1, 1]` needs 3 frames). The entries
    past a label's length are not read."""
    position = ops.expand_dims(ops.arange(_dim(target, 1), dtype="int32"), 0)
    in_label = ops.less(position, ops.expand_dims(target_length, 1))  # (B, L)
    previous = ops.concatenate([target[:, :1], target[:, :-1]], axis=1)
    repeated = ops.logical_and(
        ops.logical_and(ops.equal(target, previous), ops.greater(position, 0)), in_label
    )
    repeats = ops.sum(ops.cast(repeated, "int32"), axis=1)
    n_frames = ops.sum(ops.cast(frames, "int32"), axis=1)
    return ops.less_equal(target_length + repeats, n_frames)


def _log_likelihood(target, logits, target_length, frames, mask_index, skips):
    """The portable formulation: the forward recursion over the extended
    label (`_kernels.ctc_log_likelihood`), `(batch,)` log-likelihoods."""
    dtype = dtype_of(logits)
    batch, max_label = _dim(target, 0), _dim(target, 1)
    time, classes = _dim(logits, 1), _dim(logits, 2)
    states = 2 * max_label + 1
    unreachable = ops.cast(UNREACHABLE, dtype)

    # An infinite logit would make a log-probability -inf and the
    # recursion -inf - (-inf); a class that can never be emitted is read as
    # unreachable instead (its gradient is 0 either way). A select, not
    # `maximum`: JAX's gradient of `maximum` keeps two float32 masks the
    # size of the logits for the backward pass (1.13x optax's memory). A
    # NaN stays NaN, as through `maximum` (`NaN < x` is False).
    log_probs = ops.log_softmax(logits, axis=-1)
    log_probs = ops.where(ops.less(log_probs, unreachable), unreachable, log_probs)

    # The extended label: blank, l1, blank, l2, ..., lL, blank.
    blanks = ops.full_like(target, mask_index)
    extended = ops.reshape(ops.stack([blanks, target], axis=-1), (batch, 2 * max_label))
    last_blank = ops.expand_dims(ops.full_like(target_length, mask_index), 1)
    extended = ops.concatenate([extended, last_blank], axis=1)
    # The emissions, time-major `(T, B, S)`: whole rows of the frames of
    # each (sample, class) gathered, whose gradient is a scatter of `B * S`
    # rows (an elementwise `take_along_axis` scatters `B * T * S` numbers:
    # 3x slower under XLA on a CPU).
    rows = ops.reshape(ops.transpose(log_probs, (0, 2, 1)), (-1, time))  # (B * C, T)
    first_row = ops.expand_dims(ops.arange(batch, dtype="int32") * classes, 1)
    emissions = ops.take(rows, ops.reshape(first_row + extended, (-1,)), axis=0)
    emissions = ops.transpose(ops.reshape(emissions, (-1, states, time)), (2, 0, 1))

    # The state of label i (2i + 1) may be entered from two states back
    # where `skips[i]`; blanks never skip.
    skip = ops.reshape(ops.stack([ops.zeros_like(skips), skips], axis=-1), (batch, 2 * max_label))
    no_skip = ops.expand_dims(ops.zeros_like(target_length, dtype="bool"), 1)
    skip = ops.concatenate([skip, no_skip], axis=1)
    skip_bias = ops.where(skip, ops.zeros((), dtype), unreachable)
    return ctc_log_likelihood(emissions, frames, skip_bias, target_length)


def ctc_loss(target, output, target_length, output_length, mask_index=0, *, zero_infinity=True):
    """CTC loss of logits, exact in log space, never negative, never NaN.

    The signature of `keras.ops.ctc_loss`, plus `zero_infinity`. The loss of
    a sample is `-log p(target | output)`, the probability summed over every
    alignment of the `target_length` labels to the first `output_length`
    frames (labels repeated, blanks `mask_index` in between), computed by
    the forward recursion over the extended label `(blank, l1, blank, ...,
    lU, blank)`: `alpha_t(s) = logsumexp(alpha_{t-1}(s), alpha_{t-1}(s-1),
    alpha_{t-1}(s-2) if l_s != l_{s-2}) + log_softmax(output_t)[l_s]`.

    Args:
        target: integer labels of shape `(batch, max_label_length)`; entries
            past `target_length` are ignored.
        output: logits of shape `(batch, max_time, num_classes)` (not
            normalized).
        target_length: `(batch,)` label lengths, in `[0, max_label_length]`.
        output_length: `(batch,)` input lengths, in `[0, max_time]`.
        mask_index: the blank class. Defaults to 0.
        zero_infinity: a sample without a valid alignment gives 0 (True,
            default) or `+inf` (False), with a zero gradient either way.

    Returns:
        The per-sample losses, `(batch,)`, float32 (float64 for float64
        logits), `>= 0`.

    Numerical stability:
        The recursion is a three-way logsumexp of finite numbers (an
        unreachable state holds -1e30, never `-inf`), so values and
        gradients are exact for logits of any finite magnitude (float32 to
        1e-5 relative against a float64 reference at logits of 1e3, where
        TF's native kernel is 32% off); float16/bfloat16 logits are
        computed in float32. The gradient is the backward recursion
        (the posterior of each state at each frame, minus the softmax),
        written by hand: it keeps the forward variables only, and its loops
        compile under XLA on TF and JAX (not JAX's forward-mode
        differentiation). A sample is infeasible when `target_length`
        plus the number of equal adjacent labels exceeds `output_length`
        (`[1, 1]` needs three frames): its loss is 0 or `+inf` and its
        gradient exactly 0, where Keras gives a finite loss with a
        gradient on TF and JAX and NaN on torch. An empty label over no
        frames is 0. A log-likelihood rounded above 0 gives 0 (JAX's
        Keras loss goes negative). Lengths given as host data are checked
        (`ValueError`); tensor lengths are not read.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> logits = np.zeros((2, 2, 3), "float32")  # uniform over 3 classes
        >>> target = np.array([[1, 2], [1, 1]], "int32")  # [1, 1] needs 3 frames
        >>> lengths = np.array([2, 2], "int32")
        >>> loss = ops.ctc_loss(target, logits, lengths, lengths)
        >>> [round(float(v), 5) for v in loss]  # -log(1/9), and 0
        [2.19722, 0.0]
    """
    zero_infinity = check_bool(zero_infinity, "zero_infinity")
    target = ops.convert_to_tensor(target)
    target_shape = static_shape(target)
    output = ops.convert_to_tensor(output)
    host_target_length, host_output_length = target_length, output_length
    target_length = ops.convert_to_tensor(target_length)
    output_length = ops.convert_to_tensor(output_length)
    _check_shapes(target, output, target_length, output_length)
    _check_host_lengths(host_target_length, "target_length", target_shape[1], "max_label_length")
    _check_host_lengths(host_output_length, "output_length", static_shape(output)[1], "max_time")
    mask_index = check_mask_index(mask_index, static_shape(output)[2])
    logits = ops.cast(output, compute_dtype_of(dtype_of(output)))
    symbolic = _symbolic(logits, target, target_length, output_length)
    if symbolic is not None:
        return symbolic
    frames = ops.less(
        ops.expand_dims(ops.arange(_dim(output, 1), dtype="int32"), 0),
        ops.expand_dims(ops.cast(output_length, "int32"), 1),
    )
    return ctc_loss_over_frames(
        ops.cast(target, "int32"),
        logits,
        ops.cast(target_length, "int32"),
        frames,
        mask_index,
        zero_infinity,
        output_length=ops.cast(output_length, "int32"),
    )
