"""The inputs of the benchmark rows: sizes per op family and data builders.

A builder `build_*(shape, dtype, rng)` returns `(args, diff)`: NumPy arrays
(float32; the timing casts the differentiated one, and every float one for a
dtype other than float32) and the index of the argument to differentiate.
"""

import numpy as np

# Sizes. S is small enough for --quick; M is the size quoted in the issue.
NORM_SIZES = {"S": (1024, 128), "M": (8192, 512), "L": (32768, 512)}
SOFTMAX_SIZES = {"S": (512, 1000), "M": (4096, 1000), "L": (16384, 1000)}
SPARSE_SIZES = {"S": (256, 8192), "M": (1024, 32000), "L": (4096, 32000)}
# A softmax output layer (the masked-LM tutorial: 3000 classes).
PROBABILITY_SIZES = {"S": (256, 3000), "M": (2048, 3000), "L": (8192, 3000)}
ELEMENTWISE_SIZES = {"S": (1024, 128), "M": (8192, 512), "L": (32768, 512)}
TASK_SIZES = {"S": (1024, 8), "M": (65536, 8), "L": (262144, 8)}


def _logits(shape, dtype, rng):
    return (3.0 * rng.standard_normal(shape)).astype("float32")


def build_x(shape, dtype, rng):
    return [rng.standard_normal(shape).astype("float32")], 0


def build_positive(shape, dtype, rng):
    return [rng.uniform(0.1, 2.0, shape).astype("float32")], 0


def build_pair(shape, dtype, rng):
    a = rng.standard_normal(shape).astype("float32")
    b = rng.standard_normal(shape).astype("float32")
    return [a, b], 0


def build_divide(shape, dtype, rng):
    a = rng.standard_normal(shape).astype("float32")
    b = rng.uniform(0.5, 2.0, shape).astype("float32")
    return [a, b], 0


def build_dense_ce(shape, dtype, rng):
    labels = np.eye(shape[-1], dtype="float32")[rng.integers(0, shape[-1], shape[:-1])]
    return [labels, _logits(shape, dtype, rng)], 1


def build_sparse_ce(shape, dtype, rng):
    labels = rng.integers(0, shape[-1], shape[:-1]).astype("int32")
    return [labels, _logits(shape, dtype, rng)], 1


def build_binary_ce(shape, dtype, rng):
    labels = rng.integers(0, 2, shape).astype("float32")
    return [labels, _logits(shape, dtype, rng)], 1


def build_task(shape, dtype, rng):
    y_true = rng.standard_normal(shape).astype("float32")
    y_pred = rng.standard_normal(shape).astype("float32")
    return [y_true, y_pred], 1


# The catalogue (issue 12) and geometry (issue 13) rows.
GAUSSIAN_SIZES = {"S": (131072, 2), "M": (1048576, 2), "L": (4194304, 2)}
PAIRWISE_SIZES = {"S": (256, 64), "M": (1024, 64), "L": (2048, 128)}
# Batches of embeddings for the triplet losses: TF Addons' semi-hard mining
# tiles a [batch * batch, batch] tensor (64 MiB at M).
EMBEDDING_SIZES = {"S": (64, 32), "M": (256, 64), "L": (512, 128)}


def build_soft_ce(shape, dtype, rng):
    """Soft labels (a softmax of random scores) and logits."""
    scores = rng.standard_normal(shape)
    labels = np.exp(scores - scores.max(-1, keepdims=True))
    labels = (labels / labels.sum(-1, keepdims=True)).astype("float32")
    return [labels, _logits(shape, dtype, rng)], 1


def build_counts(shape, dtype, rng):
    """Poisson counts and log-rates."""
    log_rate = rng.normal(0.0, 1.0, shape).astype("float32")
    counts = rng.poisson(np.exp(log_rate)).astype("float32")
    return [counts, log_rate], 1


def build_regression(shape, dtype, rng):
    y_true = rng.standard_normal(shape).astype("float32")
    y_pred = rng.standard_normal(shape).astype("float32")
    return [y_true, y_pred], 1


def build_gaussian(shape, dtype, rng):
    """Targets `(n, 1)` and a `(n, 2)` head: mean and log-variance."""
    y_true = rng.standard_normal((shape[0], 1)).astype("float32")
    head = rng.standard_normal(shape).astype("float32")
    return [y_true, head], 1


def build_embeddings(shape, dtype, rng):
    """Integer labels (8 classes, each several times) and embeddings."""
    labels = rng.integers(0, 8, shape[0]).astype("int32")
    return [labels, rng.standard_normal(shape).astype("float32")], 1


def build_pair_distances(shape, dtype, rng):
    """Contrastive pairs: 0/1 labels and non-negative distances."""
    labels = rng.integers(0, 2, shape[0]).astype("float32")
    return [labels, rng.uniform(0.0, 2.0, shape[0]).astype("float32")], 1
