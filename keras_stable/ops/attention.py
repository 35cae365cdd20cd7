"""Scaled dot-product attention that never goes NaN: a query row with no key
to attend to gives 0 and a zero gradient."""

import math

import keras
from keras import ops

from keras_stable.common.checks import check_finite_float
from keras_stable.common.checks import check_positive_int
from keras_stable.common.dtypes import dtype_of
from keras_stable.common.dtypes import is_float
from keras_stable.common.dtypes import is_neg_inf
from keras_stable.common.dtypes import lowest_like
from keras_stable.common.dtypes import static_shape
from keras_stable.ops._kernels import attention_kernel
from keras_stable.ops._kernels import causal_mask
from keras_stable.ops._kernels import kernels_enabled
from keras_stable.ops._kernels import native_op
from keras_stable.ops._kernels import soft_cap
from keras_stable.ops._kernels import softmax_kernel

# The blockwise path runs by default once there are more than this many
# keys (with kernels enabled); `chunk_size` keys per block by default.
AUTO_BLOCKWISE_KEYS = 1024
DEFAULT_CHUNK_SIZE = 256


def _broadcastable(name, shape, target):
    """`shape` left-padded to rank 4, each dim 1 or the target's; else a
    ValueError naming the argument and both shapes."""
    if len(shape) > 4:
        raise ValueError(
            f"`{name}` must have rank at most 4 (broadcastable to (B, N, T, S) = "
            f"{target}), got {name}.shape={shape}."
        )
    padded = (1,) * (4 - len(shape)) + tuple(shape)
    for dim, want in zip(padded, target):
        if dim is not None and dim != 1 and want is not None and dim != want:
            raise ValueError(
                f"`{name}` of shape {shape} does not broadcast to (B, N, T, S) = "
                f"{target}: each dimension must be 1 or the target's."
            )
    return tuple(-1 if d is None else d for d in padded)


def _check_inputs(query, key, value, symbolic=False):
    q, k, v = static_shape(query), static_shape(key), static_shape(value)
    if len(q) != 4 or len(k) != 4 or len(v) != 4:
        raise ValueError(
            "`query` must be (B, T, N, H) and `key`/`value` (B, S, K, H) (rank 4), "
            f"got query.shape={q}, key.shape={k}, value.shape={v}."
        )
    if k != v:
        raise ValueError(
            f"`key` and `value` must have the same shape (B, S, K, H), got "
            f"key.shape={k} and value.shape={v}."
        )
    if q[0] is not None and k[0] is not None and q[0] != k[0]:
        raise ValueError(
            f"`query` and `key` must have the same batch size B, got "
            f"query.shape={q} and key.shape={k}."
        )
    if q[3] != k[3] or q[3] is None:
        raise ValueError(
            f"`query` and `key` must have the same static head dimension H, got "
            f"query.shape={q} and key.shape={k}."
        )
    # Symbolic calls (a functional model, a layer's build) may leave the
    # lengths T and S unknown: only the output's spec is computed.
    if None in (q[2], k[2]) or (not symbolic and None in (q[1], k[1])):
        raise ValueError(
            "`dot_product_attention` needs static lengths and head counts (T, N, "
            f"S, K), got query.shape={q} and key.shape={k}."
        )
    if k[2] == 0 or q[2] % k[2]:
        raise ValueError(
            f"The number of query heads N must be a multiple of the number of "
            f"key/value heads K, got query.shape={q} (N={q[2]}) and "
            f"key.shape={k} (K={k[2]})."
        )
    return q, k


def _check_masks(bias, mask, target):
    """The broadcast checks of `bias` and `mask` against `(B, N, T, S)`."""
    for name, t in (("bias", bias), ("mask", mask)):
        if t is not None:
            _broadcastable(name, static_shape(ops.convert_to_tensor(t)), target)


def _dtypes(*tensors):
    """`(output dtype, compute dtype)`: the inputs' common float dtype
    (float64 if any is, else float32 when they differ or are not floats),
    computed in float32 at least."""
    dtypes = {dtype_of(t) for t in tensors}
    if "float64" in dtypes:
        return "float64", "float64"
    out = dtypes.pop() if len(dtypes) == 1 else "float32"
    return (out if is_float(out) else "float32"), "float32"


def _grouped(t, num_heads, kv_heads):
    """A rank-4 `(b, n, t, s)` mask or bias as `(b, k, g, t, s)`: head
    `n = k * G + g` reads key/value head `k` (Keras's GQA mapping)."""
    b, n, tq, s = static_shape(t)
    b = -1 if b is None else b
    if n == 1:
        return ops.reshape(t, (b, 1, 1, tq, s))
    return ops.reshape(t, (b, kv_heads, num_heads // kv_heads, tq, s))


def _ungrouped(t):
    """A `(b, k, 1, t, s)` mask or bias (one query head per key head) as
    `(b, k, t, s)`; None stays None."""
    return None if t is None else ops.squeeze(t, axis=2)


def _materialised(q5, key, value, bias5, mask5, scale, is_causal, cap):
    """The reference formulation: `(B, T, K, G, H)` queries against
    `(B, S, K, H)` keys, the whole `(B, K, G, T, S)` logits at once."""
    if q5.shape[3] == 1:
        # One query head per key head (MHA): the 4-D contraction, whose
        # logits XLA keeps in the layout of the matmul's output (the 5-D
        # one with a unit group axis made it copy the logits and the
        # probabilities once more each).
        q = ops.squeeze(q5, axis=3)
        probs = attention_probabilities(
            q, key, scale, _ungrouped(bias5), _ungrouped(mask5), is_causal, cap
        )
        return ops.expand_dims(weighted_values(probs, value), 3)
    # The scale on the queries (T x H products, not T x S): the same logits
    # to round-off, and no scaled copy of them for XLA to keep.
    logits = ops.einsum("btkgh,bskh->bkgts", q5 * scale, key)
    probs = _probabilities(logits, bias5, mask5, is_causal, cap)
    return ops.einsum("bkgts,bskh->btkgh", probs, value)


def attention_probabilities(query, key, scale, bias=None, mask=None, is_causal=False, cap=None):
    """The attention weights of the materialised formulation, `(B, N, T, S)`.

    `(B, T, N, H)` queries against `(B, S, N, H)` keys (one query head per
    key head): the softmax over the keys of `scale * q . k` (the scale on
    the queries), soft-capped by `cap`, plus `bias`, over the keys that
    `mask` (broadcastable to `(B, N, T, S)`) and causality allow. A row with
    no allowed key is 0 with a zero gradient. Computed in the inputs' dtype
    (the callers cast half precision to float32). `dot_product_attention`
    runs it; the attention layers call it for the scores they return and
    for dropout on the probabilities.
    """
    # The scale on the queries (T x H products, not T x S): the same logits
    # to round-off, and no scaled copy of them for XLA to keep.
    logits = ops.einsum("btnh,bsnh->bnts", query * scale, key)
    return _probabilities(logits, bias, mask, is_causal, cap)


def weighted_values(probabilities, value):
    """`(B, N, T, S)` attention weights times `(B, S, N, H)` values: the
    `(B, T, N, H)` output of the materialised formulation."""
    return ops.einsum("bnts,bsnh->btnh", probabilities, value)


def _probabilities(logits, bias, mask, is_causal, cap):
    """The attention weights over the last axis of the logits: soft cap,
    bias, then the softmax over the keys that `mask` and causality allow."""
    if cap is not None:
        logits = soft_cap(logits, cap)
    if bias is not None:
        logits = logits + bias
    allowed = mask
    if is_causal:
        causal = causal_mask(logits.shape[-2], logits.shape[-1], rank=len(logits.shape))
        allowed = causal if allowed is None else ops.logical_and(allowed, causal)
    if kernels_enabled() and not isinstance(logits, keras.KerasTensor):
        # The softmax kernel's closed-form gradient keeps the probabilities
        # only (no mask or intermediate of the `where`s below), and is 0 at
        # every key that takes no part.
        return softmax_kernel(logits, -1, allowed)
    return _portable_probabilities(logits, allowed)


def _portable_probabilities(logits, mask):
    """The softmax over the keys `mask` allows, by autodiff: a -inf logit
    (bias) removes its key; NaN stays (and propagates)."""
    allowed = ops.logical_not(is_neg_inf(logits))
    if mask is not None:
        allowed = ops.logical_and(allowed, mask)
    nonempty = ops.any(allowed, axis=-1, keepdims=True)
    # A finite sentinel, not -inf: no infinite intermediate on valid inputs.
    row_max = ops.max(ops.where(allowed, logits, lowest_like(logits)), axis=-1, keepdims=True)
    # Softmax is shift invariant: no gradient through the shift. A row with
    # nothing allowed shifts by 0.
    shift = ops.stop_gradient(ops.where(nonempty, row_max, ops.zeros_like(row_max)))
    # Double where: the masked entries' exp sees 0 (exp(0) = 1), so neither
    # pass meets exp overflow or inf * 0 there.
    z = ops.where(allowed, logits - shift, ops.zeros_like(logits))
    e = ops.where(allowed, ops.exp(z), ops.zeros_like(z))
    total = ops.sum(e, axis=-1, keepdims=True)
    return e / ops.where(nonempty, total, ops.ones_like(total))


def dot_product_attention(
    query,
    key,
    value,
    bias=None,
    mask=None,
    scale=None,
    is_causal=False,
    flash_attention=None,
    attn_logits_soft_cap=None,
    *,
    chunk_size=None,
):
    """Scaled dot-product attention, `softmax(scale * q k^T + bias) v`, in
    which a query row with nothing to attend to gives 0.

    The signature and shapes of `keras.ops.dot_product_attention`: head
    `n` of the query reads key/value head `n // (N // K)` (multi-head,
    grouped-query and multi-query attention). The logits are
    `scale * q . k`, then `attn_logits_soft_cap * tanh(logits / cap)` when
    a cap is given, then `+ bias`; a key takes part where `mask` is True,
    `bias` is not `-inf` and (`is_causal`) its index is at most the
    query's (`tril(ones((T, S)))`, aligned at the top left as in Keras,
    also when `T != S`).

    Args:
        query: `(B, T, N, H)` float tensor.
        key: `(B, S, K, H)` float tensor, `N` a multiple of `K`.
        value: `(B, S, K, H)` float tensor.
        bias: optional additive bias broadcastable to `(B, N, T, S)`;
            `-inf` removes a key.
        mask: optional boolean mask broadcastable to `(B, N, T, S)`, True
            where the key takes part.
        scale: optional float, default `1 / sqrt(H)`.
        is_causal: whether query `i` sees only keys `j <= i`.
        flash_attention: accepted for parity with Keras and ignored: the
            path is chosen by `chunk_size` (below).
        attn_logits_soft_cap: optional positive float `c`; the scaled
            logits become `c * tanh(logits / c)` before the bias and mask
            (Keras supports it only on JAX TPU).
        chunk_size: keys per block of the blockwise path (any positive
            int, it need not divide `S`). By default the blockwise path
            runs when `S > 1024`, with blocks of 256 keys; otherwise the
            logits are materialised. On PyTorch (eager), wherever there
            is no soft cap and no bias gradient, torch's kernels run: the
            materialised path in exact blocks of query rows, the
            blockwise one as torch's fused `scaled_dot_product_attention`
            (the same algorithm, its own blocks). With
            `KERAS_STABLE_PORTABLE` set the materialised `keras.ops`
            formulation always runs.

    Returns:
        `(B, T, N, H)`, the dtype of the inputs. A symbolic call
        (KerasTensors) takes unknown lengths `T` and `S`, as Keras's op
        does; a computation needs them static (a TF graph with `None`
        lengths, e.g. `tf.data` `padded_batch`, is refused with a
        `ValueError`: pad to a fixed length, or call the op under
        `jit_compile` on JAX, whose shapes are always static).

    Numerical stability:
        The logits, the softmax and the weighted sum are computed in
        float32 for float16/bfloat16 inputs (a float16 `q . k` above 65504
        is exact), the output is cast back. The softmax is shifted by the
        row maximum over the allowed keys. A query row with no allowed key
        (every key masked, a `-inf` bias row, a causal mask over left
        padding) gives output 0 and contributes exactly 0 to every
        gradient (the convention of FlashAttention and PyTorch's SDPA;
        Keras gives the mean of all values, or NaN for a `-inf` bias).
        Masked entries enter neither pass (double where), so masked
        logits of any size are harmless. NaN inputs give NaN. The
        blockwise path computes the softmax online over blocks of keys
        and recomputes the blocks in its hand-written backward from the
        saved log-sum-exp (FlashAttention-2), so no `(B, N, T, S)` tensor
        exists in either pass.

    Examples:
        >>> import numpy as np
        >>> from keras_stable import ops
        >>> q = np.ones((1, 2, 1, 2), "float32")
        >>> k = np.ones((1, 3, 1, 2), "float32")
        >>> v = np.arange(6, dtype="float32").reshape(1, 3, 1, 2)
        >>> mask = np.array([[True, True, False], [False, False, False]])
        >>> np.asarray(ops.dot_product_attention(q, k, v, mask=mask))[0, :, 0]
        array([[1., 2.],
               [0., 0.]], dtype=float32)

        References:
            Dao, "FlashAttention-2: Faster Attention with Better Parallelism
            and Work Partitioning", 2023.
    """
    del flash_attention  # parity only: our own path decides.
    query = ops.convert_to_tensor(query)
    key = ops.convert_to_tensor(key)
    value = ops.convert_to_tensor(value)
    symbolic = any(isinstance(x, keras.KerasTensor) for x in (query, key, value, bias, mask))
    (batch, t, n, h), (_, s, kv, _) = _check_inputs(query, key, value, symbolic)
    if not isinstance(is_causal, bool):
        raise ValueError(f"`is_causal` must be a bool, got {is_causal!r}.")
    scale = check_finite_float(scale, "scale")
    cap = check_finite_float(attn_logits_soft_cap, "attn_logits_soft_cap", positive=True)
    check_positive_int(chunk_size, "chunk_size", allow_none=True)
    out_dtype, compute = _dtypes(query, key, value)
    if symbolic and None in (t, s):
        # The spec of Keras's op: the query's shape and the inputs' dtype.
        _check_masks(bias, mask, (batch, n, t, s))
        return keras.KerasTensor(static_shape(query), dtype=out_dtype)
    scale = 1.0 / math.sqrt(h) if scale is None else scale
    target = (batch, n, t, s)

    bias5 = mask5 = None
    if bias is not None:
        bias = ops.cast(ops.convert_to_tensor(bias), compute)
        bias5 = _grouped(
            ops.reshape(bias, _broadcastable("bias", static_shape(bias), target)), n, kv
        )
    if mask is not None:
        mask = ops.convert_to_tensor(mask)
        if dtype_of(mask) != "bool":
            mask = ops.not_equal(mask, 0)
        mask5 = _grouped(
            ops.reshape(mask, _broadcastable("mask", static_shape(mask), target)), n, kv
        )

    q5 = ops.reshape(ops.cast(query, compute), (-1, t, kv, n // kv, h))
    key = ops.cast(key, compute)
    value = ops.cast(value, compute)
    # Symbolic inputs (a functional model's KerasTensors) only need the
    # output's shape and dtype: the materialised formulation gives them.
    # A length that is not an int (JAX's symbolic dimension, inside a
    # layer's `compute_output_spec`) only asks for the output's spec: the
    # materialised formulation gives it.
    blockwise = chunk_size is not None or (isinstance(s, int) and s > AUTO_BLOCKWISE_KEYS)
    if kernels_enabled() and blockwise and not symbolic:
        chunk = min(chunk_size or DEFAULT_CHUNK_SIZE, s)
        out = attention_kernel(q5, key, value, bias5, mask5, scale, is_causal, cap, chunk)
    else:
        out = None
        if kernels_enabled() and not symbolic:
            # PyTorch: the same numbers in exact blocks of query rows.
            out = native_op(
                "materialised_attention", q5, key, value, bias5, mask5, scale, is_causal, cap
            )
        if out is None:
            out = _materialised(q5, key, value, bias5, mask5, scale, is_causal, cap)
    return ops.cast(ops.reshape(out, (-1, t, n, h)), out_dtype)
