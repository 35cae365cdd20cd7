"""One `BlockSpec` per layer that owns weights: how to call it, and what to
fit it on. Every check of tests/harness/blocks.py runs for each
(tests/test_harness.py); their parity with Keras on every option and their
edge cases are in tests/layers/test_attention_layers.py and
tests/integration/test_linear_softmax_head*.py."""

import keras

from keras_stable.layers import LinearSoftmaxHead
from keras_stable.layers import StableGroupedQueryAttention
from keras_stable.layers import StableMultiHeadAttention
from tests.harness.blocks import BlockSpec

DIM, QUERY, KEYS, VOCAB, STEPS = 8, 5, 6, 7, 5


def _query_and_value(rng, n):
    return [
        rng.normal(size=(n, QUERY, DIM)).astype("float32"),
        rng.normal(size=(n, KEYS, DIM)).astype("float32"),
    ]


def _attention_targets(rng, n):
    return rng.normal(size=(n, QUERY, DIM)).astype("float32")


def _hidden_and_labels(rng, n):
    labels = rng.integers(0, VOCAB, (n, STEPS)).astype("int32")
    return [rng.normal(size=(n, STEPS, DIM)).astype("float32"), labels]


BLOCK_SPECS = [
    BlockSpec(
        "stable_multi_head_attention",
        StableMultiHeadAttention,
        {"num_heads": 2, "key_dim": 4},
        _query_and_value,
        _attention_targets,
        loss="mse",
        counterpart=keras.layers.MultiHeadAttention,
    ),
    BlockSpec(
        "stable_grouped_query_attention",
        StableGroupedQueryAttention,
        {"head_dim": 4, "num_query_heads": 4, "num_key_value_heads": 2},
        _query_and_value,
        _attention_targets,
        loss="mse",
        counterpart=keras.layers.GroupQueryAttention,
    ),
    BlockSpec(
        "linear_softmax_head",
        LinearSoftmaxHead,
        {"vocab_size": VOCAB, "chunk_size": 3},
        _hidden_and_labels,
        # Called with labels it returns the per-token losses (float32) and
        # adds their mean: the model trains on the added loss.
        output_dtype="float32",
        keras_mask=(
            "no Keras counterpart; the head's loss under Embedding(mask_zero=True) is "
            "compared with Keras's SparseCategoricalCrossentropy in "
            "tests/integration/test_linear_softmax_head_options.py"
        ),
    ),
]
