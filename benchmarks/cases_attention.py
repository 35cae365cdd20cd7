"""The benchmark rows of attention (issue 21): `dot_product_attention`,
materialised and blockwise, against `keras.ops.dot_product_attention` (and
`jax.nn.dot_product_attention` on JAX), and `StableMultiHeadAttention`
against `keras.layers.MultiHeadAttention`, forward and backward with
respect to the query.

No mask: every row has keys to attend to, so every candidate computes the
same numbers and the rows compare cost only. Sizes `(B, T=S, N, H)`: M and
L are the sizes of the issue, (8, 512, 8, 64) and (1, 4096, 8, 64).
"""

from case import Case
from case import K
from case import labelled_like
from case import stable_class

ATTENTION_SIZES = {"S": (2, 256, 4, 32), "M": (8, 512, 8, 64), "L": (1, 4096, 8, 64)}
# Keys per block of the forced blockwise row: 2 blocks at S, 4 at M, 32 at L.
BLOCK = 128


def build_qkv(shape, dtype, rng):
    """Query, key and value `(B, T, N, H)`; the query is differentiated."""
    q, k, v = (rng.standard_normal(shape).astype("float32") for _ in range(3))
    return [q, k, v], 0


def build_sequences(shape, dtype, rng):
    """Query and value sequences `(B, T, N * H)` for the layers."""
    b, t, n, h = shape
    q, v = (rng.standard_normal((b, t, n * h)).astype("float32") for _ in range(2))
    return [q, v], 0


def _jax_xla(m):
    if m.backend != "jax":
        return None
    return lambda q, k, v: m.jax.nn.dot_product_attention(q, k, v, implementation="xla")


def _builtin_ops():
    return {
        "keras.ops.dot_product_attention": lambda m: (
            lambda q, k, v: K(m).ops.dot_product_attention(q, k, v)
        ),
        "jax.nn.dot_product_attention(xla)": _jax_xla,
    }


# The layers' heads and head size, by model width `N * H` (one per size).
_HEADS = {n * h: (n, h) for (_, _, n, h) in ATTENTION_SIZES.values()}


def _lazy_layer(make_layer):
    """A callable `(query, value)` that builds its layer on the first call,
    with the heads of the input's width (`_HEADS`)."""

    def factory(m):
        layer = []

        def call(query, value):
            if not layer:
                num_heads, key_dim = _HEADS[int(query.shape[-1])]
                layer.append(make_layer(m, num_heads, key_dim))
            return layer[0](query, value)

        return call

    return factory


def _stable_mha(m, num_heads, key_dim):
    return m.ks.layers.StableMultiHeadAttention(num_heads=num_heads, key_dim=key_dim)


def _keras_mha(m, num_heads, key_dim):
    return K(m).layers.MultiHeadAttention(num_heads=num_heads, key_dim=key_dim)


def attention_cases():
    """The op (auto path, materialised for `S <= 1024`, and blockwise with
    `chunk_size=128`) and the multi-head attention layer."""
    sizes = ATTENTION_SIZES
    ours_mha = labelled_like(
        _lazy_layer(_stable_mha), stable_class("layers", "StableMultiHeadAttention")
    )
    return [
        Case(
            "dot_product_attention",
            "op",
            "attention",
            sizes,
            build_qkv,
            lambda m: lambda q, k, v: m.ks.ops.dot_product_attention(q, k, v),
            _builtin_ops(),
        ),
        Case(
            f"dot_product_attention(chunk_size={BLOCK})",
            "op",
            "attention",
            sizes,
            build_qkv,
            lambda m: lambda q, k, v: m.ks.ops.dot_product_attention(q, k, v, chunk_size=BLOCK),
            _builtin_ops(),
        ),
        Case(
            "layers.StableMultiHeadAttention",
            "layer",
            "attention",
            sizes,
            build_sequences,
            ours_mha,
            {"keras.layers.MultiHeadAttention": _lazy_layer(_keras_mha)},
        ),
    ]
