"""One spec per public op of `keras_stable.ops`, from which every op test
that is not about one op alone is derived:

- completeness: `ops.__all__` is exactly the names of `OPS`, each with a
  docstring holding `Numerical stability:` and an example (tests/test_specs.py);
- lowering without host callbacks (tests/integration/test_lowering.py);
- symbolic calls, JAX's `rank_promotion="raise"`, silence under the NaN
  tools, repeated backwards on torch (tests/ops/test_quiet_properties.py);
- float64 in, float64 out against the float64 reference
  (tests/ops/test_float64.py);
- tuples of axes, negative entries included (tests/ops/test_tuple_axes.py).

A new op gets all of them from one `OpSpec` here. The edge-point grids of
the core ops live in tests/ops/cases.py; the per-op files test what is
particular to an op.

`inputs` are valid ones whose results are finite (every query row of the
attention keeps a key), so no op has a reason to build an inf or NaN.
"""

import dataclasses
from collections.abc import Callable

import keras
import numpy as np

from keras_stable import ops
from tests import reference as ref
from tests import reference_log_space as logspace_ref
from tests import reference_sequences as seq

RNG = np.random.default_rng(0)
N, D, C = 4, 3, 5


def _f(*shape):
    return RNG.normal(size=shape).astype("float32")


def _probs(*shape):
    p = RNG.random(shape).astype("float32") + 0.1
    return p / p.sum(-1, keepdims=True)


def _int(high, *shape):
    return RNG.integers(0, high, shape).astype("int32")


# The log-space ops' inputs draw from their own generator, so that adding
# them left the other specs' data unchanged.
_LOG_RNG = np.random.default_rng(1)


def _g(*shape):
    return _LOG_RNG.normal(size=shape).astype("float32")


MASK = RNG.random((N, C)) > 0.3
# Every row keeps an entry (and a causal query row its first key): valid
# inputs with finite results.
MASK[:, 0] = True
LABELS = RNG.integers(0, C, N).astype("int32")


@dataclasses.dataclass(frozen=True)
class Axes:
    """An op reducing or normalising over `axis`, which takes tuples:
    `op(x, axis=...)` and the float64 value and gradient
    (`gradient(x, axes, cotangent)`) for non-negative sorted `axes`."""

    op: Callable
    value: Callable
    gradient: Callable
    reduces: bool = False  # the output loses the axes (keepdims applies)


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """Everything the derived tests need to know about one public op.

    Attributes:
        call: `call(*args)` runs the op on valid inputs.
        args: NumPy arguments of `call` (float32 where floating).
        wrt: the indices of `args` that are differentiated.
        float64: id -> `(op, reference, args)`: float64 arguments in, the
            op's value against the float64 reference; or `CoreGrid` (the
            edge grid checks it in float64); or a string naming the
            contract that puts it outside float64.
        axes: `Axes` where the op takes a tuple of axes.
        batch_axis: the batch axis of the arguments where it is not 0 (a
            symbolic call leaves it unknown).
        not_quiet: why the op still builds an infinite intermediate on
            valid inputs, which TF's `enable_check_numerics` and JAX's
            `jax_debug_infs` (on an eager op's first dispatch) flag: a
            strict xfail under TF (skipped under JAX, where the flag depends
            on what ran before), so a fix must remove it; None when quiet.
        inf_by_contract: the output is -inf by contract on these inputs (a
            log-softmax's masked entries): the NaN tools rightly see it.
    """

    call: Callable
    args: list
    wrt: tuple
    float64: object = None
    axes: Axes = None
    batch_axis: int = 0
    not_quiet: str = None
    inf_by_contract: bool = False


# --- float64 data ------------------------------------------------------------------

_R64 = np.random.default_rng(64)
X = _R64.normal(size=(6, 4))
Y = _R64.normal(size=(6, 4))
POSITIVE = _R64.uniform(0.1, 0.9, size=(6, 4))
BINARY = (_R64.random((6, 4)) > 0.5).astype("float64")
ONE_HOT = np.eye(4)[[0, 1, 2, 3, 0, 1]]
CLASSES = np.array([0, 0, 1, 1, 2, 2])
Q = _R64.normal(size=(2, 5, 2, 3))
KV = _R64.normal(size=(2, 7, 2, 3))
CTC_LOGITS = _R64.normal(size=(2, 6, 4))
CTC_TARGET = np.array([[1, 2, 0], [3, 3, 0]])
CTC_LENGTHS = (np.array([2, 2]), np.array([6, 5]))
VIEWS = _R64.normal(size=(2, 6, 4))


@dataclasses.dataclass(frozen=True)
class CoreGrid:
    """The op's float64 check is the core ops' edge grid (tests/ops/cases.py),
    run in float64 by tests/ops/test_values_and_gradients.py, under case
    names starting with `prefix` (the op's name when None)."""

    prefix: str = None


# --- float64 gradients for tuples of axes ------------------------------------------


def _softmax_grad(x, axes, cot):
    p = ref.softmax(x, axis=axes)
    return p * (cot - np.sum(cot * p, axis=axes, keepdims=True))


def _log_softmax_grad(x, axes, cot):
    return cot - ref.softmax(x, axis=axes) * np.sum(cot, axis=axes, keepdims=True)


def _logsumexp_grad(x, axes, cot):
    return ref.softmax(x, axis=axes) * np.expand_dims(cot, axes)


def _norm_grad(x, axes, cot):
    n = ref.safe_norm(x, axis=axes, keepdims=True)
    return x / n * np.expand_dims(cot, axes)


def _l2_normalize_grad(x, axes, cot):
    n = ref.safe_norm(x, axis=axes, keepdims=True)
    u = x / n
    return (cot - u * np.sum(cot * u, axis=axes, keepdims=True)) / n


def _std_grad(x, axes, cot):
    count = np.prod([x.shape[a] for a in axes])
    centred = x - np.mean(x, axis=axes, keepdims=True)
    std = ref.safe_std(x, axis=axes, keepdims=True)
    return centred / (count * std) * np.expand_dims(cot, axes)


OPS = {
    "contrastive_loss": OpSpec(
        lambda y, d: ops.contrastive_loss(y, d),
        [_int(2, N), np.abs(_f(N))],
        (1,),
        float64={
            "contrastive_loss": (
                ops.contrastive_loss,
                ref.contrastive_loss,
                (BINARY[:, 0], POSITIVE[:, 0]),
            )
        },
    ),
    "cosine_similarity": OpSpec(
        lambda a, b: ops.cosine_similarity(a, b),
        [_f(N, D), _f(N, D)],
        (0, 1),
        float64=CoreGrid(),
    ),
    "ctc_loss": OpSpec(
        lambda y, x: ops.ctc_loss(y, x, np.array([2, 1, 2, 0]), np.array([6, 6, 5, 3])),
        [_int(C - 1, N, 2) + 1, _f(N, 6, C)],
        (1,),
        float64={
            "ctc_loss": (
                lambda *a: ops.ctc_loss(*a),
                lambda t, x, lt, lo: seq.ctc_loss(t, x, lt, lo)[0],
                (CTC_TARGET, CTC_LOGITS, *CTC_LENGTHS),
            )
        },
    ),
    "dice_loss": OpSpec(
        lambda y, p: ops.dice_loss(y, p),
        [_int(2, N, C), _probs(N, C)],
        (1,),
        float64={"dice_loss": (ops.dice_loss, seq.dice_loss, (BINARY, POSITIVE))},
    ),
    "dot_product_attention": OpSpec(
        lambda q, k, v: ops.dot_product_attention(
            q, k, v, mask=MASK[None, None, :, :], is_causal=True
        ),
        [_f(2, N, 4, D), _f(2, C, 2, D), _f(2, C, 2, D)],
        (0, 1, 2),
        float64={
            "dot_product_attention": (
                lambda q, k, v: ops.dot_product_attention(q, k, v, attn_logits_soft_cap=2.0),
                lambda q, k, v: ref.dot_product_attention(q, k, v, soft_cap=2.0),
                (Q, KV, KV),
            ),
            "dot_product_attention_chunked": (
                lambda q, k, v: ops.dot_product_attention(q, k, v, is_causal=True, chunk_size=3),
                lambda q, k, v: ref.dot_product_attention(q, k, v, is_causal=True),
                (Q, KV, KV),
            ),
        },
    ),
    "entropy": OpSpec(
        lambda x: ops.entropy(x, mask=MASK),
        [_f(N, C)],
        (0,),
        float64={"entropy": (ops.entropy, logspace_ref.entropy, (X,))},
        axes=Axes(
            ops.entropy,
            lambda x, a: logspace_ref.entropy(x, axis=a),
            lambda x, a, cot: logspace_ref.entropy_grad(x, cot, axis=a),
            reduces=True,
        ),
    ),
    "gaussian_kl": OpSpec(
        lambda m, v: ops.gaussian_kl(m, v),
        [_f(N, D), _f(N, D)],
        (0, 1),
        float64={"gaussian_kl": (ops.gaussian_kl, logspace_ref.gaussian_kl, (X, 0.5 * Y))},
    ),
    "gaussian_nll": OpSpec(
        lambda y, m, v: ops.gaussian_nll(y, m, v),
        [_f(N), _f(N), _f(N)],
        (1, 2),
        float64={"gaussian_nll": (ops.gaussian_nll, ref.gaussian_nll, (X, Y, 0.1 * X))},
    ),
    "info_nce_loss": OpSpec(
        lambda v: ops.info_nce_loss(v),
        [_f(2, N, D)],
        (0,),
        float64={"info_nce_loss": (ops.info_nce_loss, ref.info_nce_loss, (VIEWS,))},
        batch_axis=1,
    ),
    "kl_divergence": OpSpec(
        lambda y, x: ops.kl_divergence(y, x),
        [_probs(N, C), _f(N, C)],
        (1,),
        float64={"kl_divergence": (ops.kl_divergence, ref.kl_divergence, (ref.softmax(Y), X))},
    ),
    "l2_normalize": OpSpec(
        lambda x: ops.l2_normalize(x),
        [_f(N, D)],
        (0,),
        float64=CoreGrid(),
        axes=Axes(ops.l2_normalize, lambda x, a: ref.l2_normalize(x, axis=a), _l2_normalize_grad),
    ),
    "linear_softmax_cross_entropy": OpSpec(
        lambda h, w, b: ops.linear_softmax_cross_entropy(h, w, LABELS, b, chunk_size=2),
        [_f(N, D), _f(D, C), _f(C)],
        (0, 1, 2),
        float64="float32 by contract (tests/ops/test_float64.py, the large-vocabulary head)",
    ),
    "linear_softmax_entropy": OpSpec(
        lambda h, w, b: ops.linear_softmax_entropy(h, w, b, chunk_size=2),
        [_f(N, D), _f(D, C), _f(C)],
        (0, 1, 2),
        float64="float32 by contract (tests/ops/test_linear_entropy.py: float64 references)",
    ),
    "log1mexp": OpSpec(
        lambda x: ops.log1mexp(x),
        [-np.abs(_g(N)) - 0.01],
        (0,),
        float64={"log1mexp": (ops.log1mexp, logspace_ref.log1mexp, (-np.abs(X) - 1e-3,))},
    ),
    "log_ndtr": OpSpec(
        lambda x: ops.log_ndtr(x),
        [_g(N) * 10.0],
        (0,),
        float64={
            "log_ndtr": (
                ops.log_ndtr,
                logspace_ref.log_ndtr,
                (np.append(8.0 * X.ravel(), [-25.0, -1e3]),),
            )
        },
    ),
    "log_softmax": OpSpec(
        lambda x: ops.log_softmax(x, mask=MASK),
        [_f(N, C)],
        (0,),
        float64=CoreGrid(),
        axes=Axes(ops.log_softmax, lambda x, a: ref.log_softmax(x, axis=a), _log_softmax_grad),
        inf_by_contract=True,
    ),
    "logaddexp": OpSpec(
        lambda a, b: ops.logaddexp(a, b),
        [_g(N, D), _g(D)],
        (0, 1),
        float64={"logaddexp": (ops.logaddexp, logspace_ref.logaddexp, (30.0 * X, 30.0 * Y))},
    ),
    "logsubexp": OpSpec(
        lambda a, b: ops.logsubexp(a, b),
        [np.abs(_g(N, D)) + 0.01, -np.abs(_g(D))],
        (0, 1),
        float64={
            "logsubexp": (ops.logsubexp, logspace_ref.logsubexp, (np.abs(X) + 1e-3, -np.abs(Y)))
        },
    ),
    "logsumexp": OpSpec(
        lambda x: ops.logsumexp(x, axis=-1, mask=MASK),
        [_f(N, C)],
        (0,),
        float64=CoreGrid(),
        axes=Axes(
            ops.logsumexp, lambda x, a: ref.logsumexp(x, axis=a), _logsumexp_grad, reduces=True
        ),
    ),
    "masked_absolute_error": OpSpec(
        lambda y, p: ops.masked_absolute_error(y, p),
        [_f(N, D), _f(N, D)],
        (1,),
        float64={
            "masked_absolute_error": (
                ops.masked_absolute_error,
                ref.masked_absolute_error,
                (X, Y),
            )
        },
    ),
    "masked_huber": OpSpec(
        lambda y, p: ops.masked_huber(y, p),
        [_f(N, D), _f(N, D)],
        (1,),
        float64={"masked_huber": (ops.masked_huber, ref.masked_huber, (X, Y))},
    ),
    "masked_squared_error": OpSpec(
        lambda y, p: ops.masked_squared_error(y, p),
        [_f(N, D), _f(N, D)],
        (1,),
        float64={
            "masked_squared_error": (ops.masked_squared_error, ref.masked_squared_error, (X, Y))
        },
    ),
    "masked_task_distance": OpSpec(
        lambda y, p: ops.masked_task_distance(y, p, mask=MASK[:, :D]),
        [_f(N, D), _f(N, D)],
        (1,),
        float64=CoreGrid("task_distance"),
    ),
    "mixture_nll": OpSpec(
        lambda y, x, m, s: ops.mixture_nll(y, x, m, s),
        [_f(N, 2), _f(N, D), _f(N, D, 2), 0.3 * _f(N, D, 2)],
        (1, 2, 3),
        float64={
            "mixture_nll": (
                ops.mixture_nll,
                logspace_ref.mixture_nll,
                (X[:, 3:], Y[:, :3], 3.0 * X[:, :3, None], 0.3 * Y[:, 1:, None]),
            )
        },
    ),
    "pairwise_distance": OpSpec(
        lambda a, b: ops.pairwise_distance(a, b),
        [_f(N, D), _f(N, D)],
        (0, 1),
        float64={"pairwise_distance": (ops.pairwise_distance, ref.pairwise_distance, (X, Y))},
    ),
    "poisson_nll": OpSpec(
        lambda y, r: ops.poisson_nll(y, r),
        [np.abs(_f(N)), _f(N)],
        (1,),
        float64={"poisson_nll": (ops.poisson_nll, ref.poisson_nll, (np.abs(X), Y))},
    ),
    "safe_divide": OpSpec(
        lambda a, b: ops.safe_divide(a, b), [_f(N), _f(N)], (0, 1), float64=CoreGrid()
    ),
    "safe_norm": OpSpec(
        lambda x: ops.safe_norm(x, axis=-1),
        [_f(N, D)],
        (0,),
        float64=CoreGrid(),
        axes=Axes(ops.safe_norm, lambda x, a: ref.safe_norm(x, axis=a), _norm_grad, reduces=True),
    ),
    "safe_sqrt": OpSpec(lambda x: ops.safe_sqrt(x), [_f(N)], (0,), float64=CoreGrid()),
    "safe_std": OpSpec(
        lambda x: ops.safe_std(x, axis=-1),
        [_f(N, D)],
        (0,),
        float64={
            "safe_std": (
                lambda x: ops.safe_std(x, axis=0),
                lambda x: ref.safe_std(x, axis=0),
                (X,),
            )
        },
        axes=Axes(ops.safe_std, lambda x, a: ref.safe_std(x, axis=a), _std_grad, reduces=True),
    ),
    "sigmoid_cross_entropy": OpSpec(
        lambda y, x: ops.sigmoid_cross_entropy(y, x),
        [_probs(N, C), _f(N, C)],
        (1,),
        float64=CoreGrid("sigmoid_ce"),
    ),
    "sigmoid_focal_cross_entropy": OpSpec(
        lambda y, x: ops.sigmoid_focal_cross_entropy(y, x),
        [_probs(N, C), _f(N, C)],
        (1,),
        float64={
            "sigmoid_focal_cross_entropy": (
                lambda y, x: ops.sigmoid_focal_cross_entropy(y, x, alpha=0.25),
                lambda y, x: ref.sigmoid_focal_cross_entropy(y, x, alpha=0.25),
                (BINARY, 4.0 * X),
            )
        },
    ),
    "softmax": OpSpec(
        lambda x: ops.softmax(x, mask=MASK),
        [_f(N, C)],
        (0,),
        float64=CoreGrid(),
        axes=Axes(ops.softmax, lambda x, a: ref.softmax(x, axis=a), _softmax_grad),
    ),
    "softmax_cross_entropy": OpSpec(
        lambda y, x: ops.softmax_cross_entropy(y, x, mask=MASK),
        # No label mass on a masked class (that loss is +inf, exactly).
        [_probs(N, C) * MASK, _f(N, C)],
        (1,),
        float64={
            "softmax_cross_entropy_probabilities": (
                lambda y, p: ops.softmax_cross_entropy(y, p, from_logits=False),
                lambda y, p: ref.softmax_cross_entropy(y, np.log(p)),
                (ONE_HOT, ref.softmax(X)),
            )
        },
    ),
    "softmax_focal_cross_entropy": OpSpec(
        lambda y, x: ops.softmax_focal_cross_entropy(y, x),
        [_probs(N, C), _f(N, C)],
        (1,),
        float64={
            "softmax_focal_cross_entropy": (
                lambda y, x: ops.softmax_focal_cross_entropy(y, x, label_smoothing=0.1),
                lambda y, x: ref.softmax_focal_cross_entropy(y, x, label_smoothing=0.1),
                (ONE_HOT, 4.0 * X),
            )
        },
    ),
    "softplus_inverse": OpSpec(
        lambda x: ops.softplus_inverse(x),
        [np.abs(_g(N)) * 30.0 + 1e-3],
        (0,),
        float64={
            "softplus_inverse": (
                ops.softplus_inverse,
                logspace_ref.softplus_inverse,
                (np.abs(X) * 30.0 + 1e-6,),
            )
        },
    ),
    "sparse_softmax_cross_entropy": OpSpec(
        lambda y, x: ops.sparse_softmax_cross_entropy(y, x),
        [_int(C, N), _f(N, C)],
        (1,),
        float64=CoreGrid("sparse_ce"),
    ),
    "sparsemax": OpSpec(
        lambda x: ops.sparsemax(x, mask=MASK),
        [_f(N, C)],
        (0,),
        float64={
            "sparsemax": (ops.sparsemax, logspace_ref.sparsemax, (X,)),
            "sparsemax_axis_0": (
                lambda x: ops.sparsemax(x, axis=0),
                lambda x: logspace_ref.sparsemax(x, axis=0),
                (X,),
            ),
        },
        axes=Axes(
            ops.sparsemax,
            lambda x, a: logspace_ref.sparsemax(x, axis=a),
            lambda x, a, cot: logspace_ref.sparsemax_grad(x, cot, axis=a),
        ),
    ),
    "triplet_hard_loss": OpSpec(
        lambda y, e: ops.triplet_hard_loss(y, e),
        [_int(2, N), _f(N, D)],
        (1,),
        float64={"triplet_hard_loss": (ops.triplet_hard_loss, ref.triplet_hard_loss, (CLASSES, X))},
    ),
    "triplet_semihard_loss": OpSpec(
        lambda y, e: ops.triplet_semihard_loss(y, e),
        [_int(2, N), _f(N, D)],
        (1,),
        float64={
            "triplet_semihard_loss": (
                ops.triplet_semihard_loss,
                ref.triplet_semihard_loss,
                (CLASSES, X),
            )
        },
    ),
    "tversky_loss": OpSpec(
        lambda y, p: ops.tversky_loss(y, p),
        [_int(2, N, C), _probs(N, C)],
        (1,),
        float64={
            "tversky_loss": (
                lambda a, b: ops.tversky_loss(a, b, alpha=0.3, beta=0.7),
                lambda a, b: seq.tversky_loss(a, b, alpha=0.3, beta=0.7),
                (BINARY, POSITIVE),
            )
        },
    ),
    "xlogy": OpSpec(
        lambda x, y: ops.xlogy(x, y),
        [_g(N, D), np.abs(_g(D)) + 0.01],
        (0, 1),
        float64={"xlogy": (ops.xlogy, logspace_ref.xlogy, (X * BINARY, POSITIVE))},
    ),
}

# Other code paths of the kernels' ops (no mask, tuple axes, float16
# without the overflow rescue, another norm order): the same derived
# properties, under `name(variant)`.
VARIANTS = {
    "dot_product_attention(chunk_size=2)": OpSpec(
        lambda q, k, v, b: ops.dot_product_attention(q, k, v, bias=b, is_causal=True, chunk_size=2),
        [_f(2, N, 4, D), _f(2, C, 2, D), _f(2, C, 2, D), _f(N, C)],
        (0, 1, 2, 3),
    ),
    "softmax(axis=(0, 1))": OpSpec(lambda x: ops.softmax(x, axis=(0, 1)), [_f(N, C)], (0,)),
    "log_softmax(no mask)": OpSpec(lambda x: ops.log_softmax(x), [_f(N, C)], (0,)),
    "logsumexp(axis=None)": OpSpec(lambda x: ops.logsumexp(x), [_f(N, C)], (0,)),
    "safe_norm(float16)": OpSpec(
        lambda x: ops.safe_norm(keras.ops.cast(x, "float16")),
        [_f(N, D)],
        (0,),
    ),
    "safe_norm(ord=3)": OpSpec(
        lambda x: ops.safe_norm(x, axis=-1, ord=3),
        [_f(N, D)],
        (0,),
    ),
    "l2_normalize(epsilon)": OpSpec(lambda x: ops.l2_normalize(x, epsilon=1e-7), [_f(N, D)], (0,)),
}

# Every spec, the variants included: the derived property tests run on all.
ALL = {**OPS, **VARIANTS}


def float64_cases():
    """`(id, op, reference, args)` for every op's float64 check."""
    return [
        (case_id, *case)
        for spec in OPS.values()
        if isinstance(spec.float64, dict)
        for case_id, case in spec.float64.items()
    ]


def axes_ops():
    """name -> `Axes` for every op that takes a tuple of axes."""
    return {name: spec.axes for name, spec in OPS.items() if spec.axes is not None}
