"""Inputs for every public op of `keras_stable.ops`: one entry per name of
`ops.__all__` (checked in tests/integration/test_lowering.py), from which
the properties every op must have are derived (lowering without host
callbacks; symbolic calls; JAX's `rank_promotion="raise"`; silence under
`jax_debug_infs` and TF's `enable_check_numerics`; repeated backwards on
torch: tests/ops/test_quiet_properties.py).

The inputs are valid ones whose results are finite (every query row of the
attention keeps a key), so no op has a reason to build an inf or NaN.
"""

import keras
import numpy as np

RNG = np.random.default_rng(0)
N, D, C = 4, 3, 5


def _f(*shape):
    return RNG.normal(size=shape).astype("float32")


def _probs(*shape):
    p = RNG.random(shape).astype("float32") + 0.1
    return p / p.sum(-1, keepdims=True)


def _int(high, *shape):
    return RNG.integers(0, high, shape).astype("int32")


MASK = RNG.random((N, C)) > 0.3
# Every row keeps an entry (and a causal query row its first key): valid
# inputs with finite results.
MASK[:, 0] = True
LABELS = RNG.integers(0, C, N).astype("int32")

# name -> (call(*args), args, indices of the differentiated args). Every
# name of keras_stable.ops.__all__ needs an entry (or a reason in SKIP).
OP_INPUTS = {
    "contrastive_loss": (
        lambda y, d: _ops().contrastive_loss(y, d),
        [_int(2, N), np.abs(_f(N))],
        (1,),
    ),
    "cosine_similarity": (
        lambda a, b: _ops().cosine_similarity(a, b),
        [_f(N, D), _f(N, D)],
        (0, 1),
    ),
    "ctc_loss": (
        lambda y, x: _ops().ctc_loss(y, x, np.array([2, 1, 2, 0]), np.array([6, 6, 5, 3])),
        [_int(C - 1, N, 2) + 1, _f(N, 6, C)],
        (1,),
    ),
    "dice_loss": (lambda y, p: _ops().dice_loss(y, p), [_int(2, N, C), _probs(N, C)], (1,)),
    "tversky_loss": (lambda y, p: _ops().tversky_loss(y, p), [_int(2, N, C), _probs(N, C)], (1,)),
    "dot_product_attention": (
        lambda q, k, v: _ops().dot_product_attention(
            q, k, v, mask=MASK[None, None, :, :], is_causal=True
        ),
        [_f(2, N, 4, D), _f(2, C, 2, D), _f(2, C, 2, D)],
        (0, 1, 2),
    ),
    "gaussian_nll": (lambda y, m, v: _ops().gaussian_nll(y, m, v), [_f(N), _f(N), _f(N)], (1, 2)),
    "info_nce_loss": (lambda v: _ops().info_nce_loss(v), [_f(2, N, D)], (0,)),
    "kl_divergence": (lambda y, x: _ops().kl_divergence(y, x), [_probs(N, C), _f(N, C)], (1,)),
    "l2_normalize": (lambda x: _ops().l2_normalize(x), [_f(N, D)], (0,)),
    "linear_softmax_cross_entropy": (
        lambda h, w, b: _ops().linear_softmax_cross_entropy(h, w, LABELS, b, chunk_size=2),
        [_f(N, D), _f(D, C), _f(C)],
        (0, 1, 2),
    ),
    "log_softmax": (lambda x: _ops().log_softmax(x, mask=MASK), [_f(N, C)], (0,)),
    "logsumexp": (lambda x: _ops().logsumexp(x, axis=-1, mask=MASK), [_f(N, C)], (0,)),
    "masked_absolute_error": (
        lambda y, p: _ops().masked_absolute_error(y, p),
        [_f(N, D), _f(N, D)],
        (1,),
    ),
    "masked_huber": (lambda y, p: _ops().masked_huber(y, p), [_f(N, D), _f(N, D)], (1,)),
    "masked_squared_error": (
        lambda y, p: _ops().masked_squared_error(y, p),
        [_f(N, D), _f(N, D)],
        (1,),
    ),
    "masked_task_distance": (
        lambda y, p: _ops().masked_task_distance(y, p, mask=MASK[:, :D]),
        [_f(N, D), _f(N, D)],
        (1,),
    ),
    "pairwise_distance": (
        lambda a, b: _ops().pairwise_distance(a, b),
        [_f(N, D), _f(N, D)],
        (0, 1),
    ),
    "poisson_nll": (lambda y, r: _ops().poisson_nll(y, r), [np.abs(_f(N)), _f(N)], (1,)),
    "safe_divide": (lambda a, b: _ops().safe_divide(a, b), [_f(N), _f(N)], (0, 1)),
    "safe_norm": (lambda x: _ops().safe_norm(x, axis=-1), [_f(N, D)], (0,)),
    "safe_sqrt": (lambda x: _ops().safe_sqrt(x), [_f(N)], (0,)),
    "safe_std": (lambda x: _ops().safe_std(x, axis=-1), [_f(N, D)], (0,)),
    "sigmoid_cross_entropy": (
        lambda y, x: _ops().sigmoid_cross_entropy(y, x),
        [_probs(N, C), _f(N, C)],
        (1,),
    ),
    "sigmoid_focal_cross_entropy": (
        lambda y, x: _ops().sigmoid_focal_cross_entropy(y, x),
        [_probs(N, C), _f(N, C)],
        (1,),
    ),
    "softmax": (lambda x: _ops().softmax(x, mask=MASK), [_f(N, C)], (0,)),
    "softmax_cross_entropy": (
        lambda y, x: _ops().softmax_cross_entropy(y, x, mask=MASK),
        # No label mass on a masked class (that loss is +inf, exactly).
        [_probs(N, C) * MASK, _f(N, C)],
        (1,),
    ),
    "softmax_focal_cross_entropy": (
        lambda y, x: _ops().softmax_focal_cross_entropy(y, x),
        [_probs(N, C), _f(N, C)],
        (1,),
    ),
    "sparse_softmax_cross_entropy": (
        lambda y, x: _ops().sparse_softmax_cross_entropy(y, x),
        [_int(C, N), _f(N, C)],
        (1,),
    ),
    "triplet_hard_loss": (
        lambda y, e: _ops().triplet_hard_loss(y, e),
        [_int(2, N), _f(N, D)],
        (1,),
    ),
    "triplet_semihard_loss": (
        lambda y, e: _ops().triplet_semihard_loss(y, e),
        [_int(2, N), _f(N, D)],
        (1,),
    ),
}
# Extra variants of the kernels' ops: other code paths (no mask, tuple
# axes, float16 without the overflow rescue, another norm order).
VARIANTS = {
    "dot_product_attention(chunk_size=2)": (
        lambda q, k, v, b: _ops().dot_product_attention(
            q, k, v, bias=b, is_causal=True, chunk_size=2
        ),
        [_f(2, N, 4, D), _f(2, C, 2, D), _f(2, C, 2, D), _f(N, C)],
        (0, 1, 2, 3),
    ),
    "softmax(axis=(0, 1))": (lambda x: _ops().softmax(x, axis=(0, 1)), [_f(N, C)], (0,)),
    "log_softmax(no mask)": (lambda x: _ops().log_softmax(x), [_f(N, C)], (0,)),
    "logsumexp(axis=None)": (lambda x: _ops().logsumexp(x), [_f(N, C)], (0,)),
    "safe_norm(float16)": (
        lambda x: _ops().safe_norm(keras.ops.cast(x, "float16")),
        [_f(N, D)],
        (0,),
    ),
    "safe_norm(ord=3)": (lambda x: _ops().safe_norm(x, axis=-1, ord=3), [_f(N, D)], (0,)),
    "l2_normalize(epsilon)": (lambda x: _ops().l2_normalize(x, epsilon=1e-7), [_f(N, D)], (0,)),
}


def _ops():
    from keras_stable import ops

    return ops


# The batch axis of an op's arguments where it is not the first (a
# symbolic call leaves it unknown).
BATCH_AXIS = {"info_nce_loss": 1}

# Ops that still build an infinite intermediate (an `inf` constant in a
# select, or the `-inf` entries of a masked log-softmax) on valid inputs,
# which TF's `enable_check_numerics` flags (JAX's `jax_debug_infs` stays
# silent on every op: it does not check constants or unselected
# branches). Listed so the property test holds them to it (strict xfail)
# until they are rewritten with finite sentinels (issue #38, item 6).
NOT_YET_QUIET_UNDER_TF_CHECK_NUMERICS = {
    # The norm kernel's rescue compares with `inf` (with `isinf` instead,
    # XLA's constant folding on JAX broke the rescue of overflowing
    # constant rows: tests/ops/test_kernels.py, compile-time constants).
    "cosine_similarity": "the norm rescue's comparison with inf",
    "l2_normalize": "the norm rescue's comparison with inf",
    "l2_normalize(epsilon)": "the norm rescue's comparison with inf",
    "masked_task_distance": "the norm rescue's comparison with inf",
    "safe_norm": "the norm rescue's comparison with inf",
    "safe_norm(float16)": "the norm rescue's comparison with inf",
    "info_nce_loss": "log_softmax's -inf on the masked self-similarity",
    "kl_divergence": "softmax.shifted_logits: -inf fill of masked entries",
    "pairwise_distance": "an inf constant in the kernel's sums",
    "safe_norm(ord=3)": "_vector_norms: inf fill for NaN entries",
    "safe_std": "an inf constant in geometry.safe_std",
    "sigmoid_focal_cross_entropy": "a NaN constant for out-of-range labels",
    "softmax_focal_cross_entropy": "softmax.shifted_logits: -inf fill",
    "sparse_softmax_cross_entropy": "softmax.shifted_logits: -inf fill",
    "triplet_hard_loss": "an inf constant for missing negatives",
    "triplet_semihard_loss": "an inf constant for missing negatives",
}

# Ops whose output on these inputs is -inf by contract (masked entries of
# a log-softmax): the NaN tools rightly see it.
INF_BY_CONTRACT = {"log_softmax"}
