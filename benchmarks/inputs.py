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
