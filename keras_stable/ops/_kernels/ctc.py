"""The CTC forward-backward (alpha-beta) recursion with a hand-written gradient.

Private to `keras_stable.ops`. Autodiff through a loop over time stores
every intermediate of every step (the exponentials of the three-way
logsumexp, the masks) and, on TensorFlow, cannot compile under XLA
(`tf.while_loop` without a fixed trip count keeps unbounded gradient
accumulators). Here the forward pass keeps only the forward variables
`alpha_t` (T, B, S), and the backward pass is the backward recursion
(Graves et al., 2006): the derivative of the log-likelihood with respect to
the log-emission of state `s` at frame `t` is the posterior probability of
being in `s` at `t`, `exp(alpha_t(s) + gamma_t(s) - log p)`, where
`gamma_t(s)` is the log-probability of the frames after `t` from `s`. Both
loops run forward only, so they compile on every backend.

Every state holds a finite log-probability: an unreachable one holds
`UNREACHABLE` (-1e30), never `-inf`, so no `-inf - (-inf)` arises.
"""

from keras import ops

from keras_stable.common.dtypes import dtype_of
from keras_stable.common.dtypes import maximum
from keras_stable.common.dtypes import minimum
from keras_stable.common.dtypes import static_shape
from keras_stable.ops._kernels.dispatch import fused
from keras_stable.ops._kernels.dispatch import scan_outputs_follow_carry

UNREACHABLE = -1e30


def _logsumexp3(a, b, c):
    """`log(exp(a) + exp(b) + exp(c))` of finite inputs: the maximum is one
    of the terms, so the sum lies in `[1, 3]`."""
    m = maximum(maximum(a, b), c)
    return m + ops.log(ops.exp(a - m) + ops.exp(b - m) + ops.exp(c - m))


def _shift_right(x, k):
    """`x[:, s - k]` (UNREACHABLE for `s < k`); the number of states may be
    unknown until run time (a label padded per batch on TensorFlow)."""
    pad = ops.full((ops.shape(x)[0], k), UNREACHABLE, dtype_of(x))
    return ops.concatenate([pad, x], axis=1)[:, :-k]


def _shift_left(x, k):
    """`x[:, s + k]` (UNREACHABLE for `s + k >= S`), as `_shift_right`."""
    pad = ops.full((ops.shape(x)[0], k), UNREACHABLE, dtype_of(x))
    return ops.concatenate([x, pad], axis=1)[:, k:]


def _states_index(skip_bias):
    """`[[0, 1, ..., S - 1]]` for the `S` states of `skip_bias` `(B, S)`,
    `S` static or not."""
    states = static_shape(skip_bias)[1]
    if states is None:
        states = ops.shape(skip_bias)[1]
    return ops.expand_dims(ops.arange(states, dtype="int32"), 0)


def _scan(step, init, emissions, frames, reverse=False):
    """`ops.scan(step, init, (emissions, frames), reverse=reverse)`, also
    where the number of frames is unknown until run time (TensorFlow, a
    batch padded per batch): Keras's TensorFlow `scan` then fails on a
    second sequence (it checks its length against `None`), so the frame
    flags travel as one more column of the emissions."""
    if static_shape(emissions)[0] is not None:
        return ops.scan(step, init, (emissions, frames), reverse=reverse)
    packed = ops.concatenate([emissions, ops.cast(frames, dtype_of(emissions))], axis=-1)

    def packed_step(carry, inputs):
        return step(carry, (inputs[..., :-1], ops.greater(inputs[..., -1:], 0)))

    return ops.scan(packed_step, init, packed, reverse=reverse)


def _forward(emissions, frames, skip_bias):
    """The forward variables `alpha_t` after each frame, `(T, B, S)`, of
    time-major `emissions` `(T, B, S)` and `frames` `(T, B, 1)`.

    Before the first frame the path stands on the leading blank with
    probability 1; a frame that is not input (`frames` False) leaves the
    variables unchanged, so the readout after the last frame is the
    readout after the last input frame.
    """
    start = ops.where(
        ops.equal(_states_index(skip_bias), 0),
        ops.zeros_like(skip_bias),
        ops.full_like(skip_bias, UNREACHABLE),
    )

    def step(alpha, inputs):
        emission, frame = inputs
        new = _logsumexp3(alpha, _shift_right(alpha, 1), _shift_right(alpha, 2) + skip_bias)
        alpha = ops.where(frame, new + emission, alpha)
        return alpha, alpha

    _, alphas = _scan(step, start, emissions, frames)
    return alphas


def _final_states(target_length, index, dtype):
    """0 on the last label and the blank after it, UNREACHABLE elsewhere
    (`index` the states' indices, `(1, S)`)."""
    last = ops.expand_dims(2 * target_length, 1)
    final = ops.logical_or(
        ops.equal(index, last),
        ops.logical_and(ops.equal(index, last - 1), ops.greater(last, 0)),
    )
    return ops.where(final, ops.zeros((), dtype), ops.cast(UNREACHABLE, dtype))


def _next_gamma(ahead, gamma, frame, skip_next):
    """`gamma_{t-1}` from `ahead = gamma_t + emission_t` (unchanged where
    frame `t` is not input)."""
    new = _logsumexp3(ahead, _shift_left(ahead, 1), _shift_left(ahead, 2) + skip_next)
    return ops.where(frame, new, gamma)


def _backward_in_step(emissions, frames, final, skip_next):
    """The backward variables `(T, B, S)`, the emission added in the step:
    the loop carries `gamma_t` alone (TensorFlow's `ops.scan` stacks
    outputs shaped like the carry)."""

    def step(gamma, inputs):
        emission, frame = inputs
        return _next_gamma(gamma + emission, gamma, frame, skip_next), gamma

    return _scan(step, final, emissions, frames, reverse=True)[1]


def _backward_ahead(emissions, frames, final, skip_next):
    """The backward variables `(T, B, S)`, the same numbers bit for bit as
    `_backward_in_step`: the loop also carries `ahead_t = gamma_t +
    emission_t`, computed at the end of the step that computes `gamma_t`
    (with `frames` shifted by one: the step at `t` reads whether frame
    `t + 1` is input). Added inside the step, to each of the three shifted
    terms, the emission made XLA's CPU fusion of the step 5x slower on JAX
    where every frame is input (a select XLA folds away:
    `keras.losses.CTC`'s case, 2x the whole loss)."""
    # No frame after the last: the step at T - 1 keeps `final`.
    later = ops.concatenate([frames[1:], ops.zeros_like(frames[:1])], axis=0)

    def step(carry, inputs):
        gamma_after, ahead = carry
        emission, next_frame = inputs
        gamma = _next_gamma(ahead, gamma_after, next_frame, skip_next)
        return (gamma, gamma + emission), gamma

    return _scan(step, (final, final), emissions, later, reverse=True)[1]


def _posteriors(alphas, emissions, frames, skip_bias, final, log_likelihood):
    """`exp(alpha_t(s) + gamma_t(s) - log p)` for each frame, `(T, B, S)`:
    the loop computes the backward variables `gamma_t` only; the
    posteriors of every frame are one elementwise pass after it."""
    skip_next = _shift_left(skip_bias, 2)  # may state s jump to s + 2
    if scan_outputs_follow_carry():
        gammas = _backward_in_step(emissions, frames, final, skip_next)
    else:
        gammas = _backward_ahead(emissions, frames, final, skip_next)
    # Rounding may put the exponent a few ulp above 0; capping it keeps the
    # posterior a probability.
    exponent = minimum(alphas + gammas - ops.reshape(log_likelihood, (1, -1, 1)), 0.0)
    return ops.where(frames, ops.exp(exponent), ops.zeros_like(exponent))


def ctc_log_likelihood(emissions, frames, skip_bias, target_length):
    """`log p(label | frames)` per sample from the log-emissions of the
    extended label, time-major `(T, B, S)`; differentiable in `emissions`
    only.

    Args:
        emissions: `(T, B, S)`, the log-probability of state `s`'s class at
            frame `t` (float32 or float64, finite: UNREACHABLE at the
            lowest).
        frames: boolean `(B, T)`, the frames that are input.
        skip_bias: `(B, S)`, 0 where state `s` may be entered from `s - 2`
            (a label different from the previous one), UNREACHABLE elsewhere.
        target_length: int32 `(B,)`.

    Returns:
        `(B,)` log-likelihoods: finite; about UNREACHABLE for a sample
        without an alignment (the caller decides from the lengths).
    """
    index = _states_index(skip_bias)
    frames = ops.expand_dims(ops.transpose(frames), -1)  # (T, B, 1)

    def forward(emissions):
        alphas = _forward(emissions, frames, skip_bias)
        final = _final_states(target_length, index, dtype_of(emissions))
        return ops.logsumexp(alphas[-1] + final, axis=1), (alphas, final)

    def backward(inputs, saved, value, upstream):
        (emissions,) = inputs
        alphas, final = saved
        posteriors = _posteriors(alphas, emissions, frames, skip_bias, final, value)
        return [posteriors * ops.reshape(upstream, (1, -1, 1))]

    # The backward reads the forward variables kept by the forward pass
    # (the loop is not run twice).
    return fused(forward, backward, emissions, keep=True)
