"""One `BlockSpec` per layer that owns weights: how to call it, and what to
fit it on. Every check of tests/harness/blocks.py runs for each
(tests/test_harness.py); their parity with Keras on every option and their
edge cases are in tests/layers/test_attention_layers.py and
tests/integration/test_linear_softmax_head*.py."""

import keras

from keras_stable.layers import CarryMask
from keras_stable.layers import GaussianSampling
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


def _mean_and_log_variance(rng, n):
    # Log-variances up to 24: the keras-io `Sampling` in float16 overflows
    # from 22.2 (tests/layers/test_gaussian_sampling.py); here the samples
    # stay below float16's maximum.
    return [
        rng.normal(size=(n, DIM)).astype("float32"),
        rng.uniform(-30.0, 6.0, (n, DIM)).astype("float32"),
    ]


def _encoder(spec):
    """`Dense` heads in front of the sampling (it has no weights of its own),
    as a VAE's encoder feeds it."""
    mean, log_variance = keras.Input((DIM,)), keras.Input((DIM,))
    # The log-variance head starts near 0 (its inputs reach -30).
    small = keras.initializers.RandomNormal(stddev=0.01, seed=0)
    heads = [
        keras.layers.Dense(DIM)(mean),
        keras.layers.Dense(DIM, kernel_initializer=small)(log_variance),
    ]
    return keras.Model([mean, log_variance], spec.call(spec.make(), heads))


def _latent_targets(rng, n):
    return rng.normal(size=(n, DIM)).astype("float32")


def _sequence_pair(rng, n):
    return [
        rng.normal(size=(n, STEPS, DIM)).astype("float32"),
        rng.normal(size=(n, STEPS, DIM)).astype("float32"),
    ]


def _sequence_targets(rng, n):
    return rng.normal(size=(n, STEPS, DIM)).astype("float32")


def _dense_in_front(spec):
    """A `Dense` on the passed-through input: `CarryMask` has no weights."""
    outputs, masked = keras.Input((STEPS, DIM)), keras.Input((STEPS, DIM))
    hidden = keras.layers.Dense(DIM)(outputs)
    return keras.Model([outputs, masked], spec.call(spec.make(), [hidden, masked]))


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
    BlockSpec(
        "gaussian_sampling",
        GaussianSampling,
        {"seed": 1337},
        _mean_and_log_variance,
        _latent_targets,
        loss="mse",
        list_input=True,
        fit_model=_encoder,
        keras_mask=(
            "no Keras counterpart (keras-io's `Sampling` is a tutorial layer) and no "
            "mask: the samples are independent entries"
        ),
    ),
    BlockSpec(
        "carry_mask",
        CarryMask,
        {},
        _sequence_pair,
        _sequence_targets,
        loss="mse",
        # The values pass through in their own dtype (no autocast).
        output_dtype="float32",
        list_input=True,
        fit_model=_dense_in_front,
        keras_mask=(
            "no Keras counterpart: the mask it carries past Keras's RNN layers is checked "
            "in tests/layers/test_carry_mask.py"
        ),
    ),
]
