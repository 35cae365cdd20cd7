"""The model and data the saving, export and distribution tests share (private).

`build_model` is a small functional model that uses every keras_stable layer
and feeds one output to each keras_stable loss; `compile_model` adds the
three keras_stable metrics. Every function here is deterministic (fixed
seeds), so two processes, or a replicated and a single-device run, build the
same weights and see the same batches.

Outputs (all from one hidden layer `h` of the `features` input):

- `probs`: `StableSoftmax` of 4 logits → `StableSoftmaxCrossEntropy(
  from_logits=False)` and the `StableCrossEntropy(from_logits=False)` metric;
- `log_probs`: `LogSoftmax` of the same logits → `StableSparseSoftmax
  CrossEntropy(ignore_class=-1)` and `StableSparseCrossEntropy(ignore_class=-1)`
  (log-softmax is idempotent, so log-probabilities are valid logits);
- `tasks`: 3 regression targets computed from `L2Normalize` and `SafeNorm`
  features → `MaskedMultiTaskDistance` (loss and metric), with NaN labels;
- `binary`: 2 logits → `StableSigmoidCrossEntropy(label_smoothing=0.1)`.
"""

import keras
import numpy as np

SEED = 1234
FEATURES = 6
CLASSES = 4
TASKS = 3
OUTPUTS = ("probs", "log_probs", "tasks", "binary")


def build_model(seed=SEED):
    """The functional model over every keras_stable layer (uncompiled)."""
    import keras_stable

    layers = keras_stable.layers
    keras.utils.set_random_seed(seed)
    features = keras.Input((FEATURES,), name="features")
    h = keras.layers.Dense(8, activation="tanh", name="hidden")(features)
    logits = keras.layers.Dense(CLASSES, name="logits")(h)
    probs = layers.StableSoftmax(axis=-1, name="probs")(logits)
    log_probs = layers.LogSoftmax(axis=-1, name="log_probs")(logits)
    unit = layers.L2Normalize(axis=-1, name="unit")(keras.layers.Dense(3, name="direction")(h))
    norm = layers.SafeNorm(axis=-1, keepdims=True, name="norm")(
        keras.layers.Dense(3, name="vector")(h)
    )
    joined = keras.layers.Concatenate(name="joined")([unit, norm, h])
    tasks = keras.layers.Dense(TASKS, name="tasks")(joined)
    binary = keras.layers.Dense(2, name="binary")(h)
    outputs = {"probs": probs, "log_probs": log_probs, "tasks": tasks, "binary": binary}
    return keras.Model(features, outputs, name="all_keras_stable")


def losses(per="sample"):
    """One keras_stable loss per output, each with a non-default argument."""
    import keras_stable

    L = keras_stable.losses
    return {
        "probs": L.StableSoftmaxCrossEntropy(from_logits=False),
        "log_probs": L.StableSparseSoftmaxCrossEntropy(ignore_class=-1),
        "tasks": L.MaskedMultiTaskDistance(per=per, task_weights=[1.0, 0.5, 2.0]),
        "binary": L.StableSigmoidCrossEntropy(label_smoothing=0.1),
    }


def metrics(per="sample"):
    """The three keras_stable metrics, on the outputs they fit."""
    import keras_stable

    M = keras_stable.metrics
    return {
        "probs": [M.StableCrossEntropy(from_logits=False)],
        "log_probs": [M.StableSparseCrossEntropy(ignore_class=-1)],
        "tasks": [M.MaskedMultiTaskDistance(per=per, task_mask=[True, True, False])],
    }


def compile_model(model, per="sample", optimizer=None, **kwargs):
    model.compile(
        optimizer=optimizer or keras.optimizers.Adam(learning_rate=0.01),
        loss=losses(per),
        metrics=metrics(per),
        **kwargs,
    )
    return model


def make_data(n=32, seed=0):
    """Inputs and labels for `n` samples (n a multiple of 4).

    Every output has entries that the losses must skip: `log_probs` labels
    of -1 (`ignore_class`) and NaN `tasks` labels (missing). Every group of
    4 consecutive samples has the same pattern, so every shard whose size is
    a multiple of 4 (one replica's part of a batch of 16 under 2-way data
    parallelism) holds the same number of valid entries: losses that average
    over valid entries then agree between one device and two replicas (see
    docs/saving_and_distribution.md).
    """
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, FEATURES)).astype("float32")
    onehot = np.eye(CLASSES, dtype="float32")[rng.integers(0, CLASSES, n)]
    sparse = rng.integers(0, CLASSES, n).astype("int32")
    sparse[1::4] = -1  # one ignored label in every 4 samples
    tasks = rng.normal(size=(n, TASKS)).astype("float32")
    tasks[::4, 1] = np.nan  # missing labels, two in every 4 samples
    tasks[2::4, 0] = np.nan
    binary = rng.integers(0, 2, size=(n, 2)).astype("float32")
    y = {"probs": onehot, "log_probs": sparse, "tasks": tasks, "binary": binary}
    return x, y


def asymmetric_data():
    """`make_data(32)` with `log_probs` labels ignored unevenly across shards.

    In each batch of 16, samples 8 to 11 are ignored and no other: split
    over two replicas, replica 0 has 8 valid labels and replica 1 has 4.
    """
    x, y = make_data(n=32)
    sparse = np.arange(32, dtype="int32") % CLASSES
    for start in (0, 16):  # per batch of 16: samples 8..11 ignored (replica 1)
        sparse[start + 8 : start + 12] = -1
    y["log_probs"] = sparse
    return x, y
