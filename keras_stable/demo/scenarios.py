"""The two scenarios of the demo: the models of the bug reports.

Each scenario is a model, its data, a learning rate and two losses: the
plain Keras formulation of the bug report and the keras_stable one. Nothing
else differs between the two runs of a scenario. Keras and keras_stable are
imported inside the functions, once the backend is chosen.
"""

# Scenario 1: the masked multi-task regression of the bug report.
N_TASKS = 30
N_FEATURES = 8
REGRESSION_BATCH = 32
REGRESSION_LR = 0.3

# Scenario 2: the 2-3-2 classifier with large initial weights.
CLASSIFIER_BATCH = 32
CLASSIFIER_INIT_STDDEV = 30.0
CLASSIFIER_LR = 1.0

SEED = 1
CLASSIFIER_SEED = 3


def _regression_batch(step):
    """One batch of the masked 30-task regression: task `step % 30` only.

    As in the bug report, the labels of the inactive tasks are stored as 0
    and the model's outputs are multiplied by the task mask, so 29 of the 30
    columns of `y_true - y_pred` are exactly zero.
    """
    import numpy as np

    rng = np.random.default_rng(1000 + step)
    task = step % N_TASKS
    true_weights = np.random.default_rng(0).normal(size=(N_FEATURES, N_TASKS))
    x = rng.normal(size=(REGRESSION_BATCH, N_FEATURES))
    mask = np.zeros((REGRESSION_BATCH, N_TASKS))
    mask[:, task] = 1.0
    noise = 0.1 * rng.normal(size=(REGRESSION_BATCH, N_TASKS))
    y = (x @ true_weights + noise) * mask
    return [x.astype("float32"), mask.astype("float32")], y.astype("float32")


def _initial_weights(shapes, stddev, seed):
    """Initial weights drawn with NumPy: identical on every backend."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return [rng.normal(scale=stddev, size=shape) for shape in shapes]


def _regression_model():
    import keras

    x = keras.Input((N_FEATURES,), name="features")
    mask = keras.Input((N_TASKS,), name="task_mask")
    y1 = keras.layers.Dense(N_TASKS)(x)
    y2 = keras.layers.Multiply()([y1, mask])
    model = keras.Model([x, mask], y2)
    model.set_weights(
        _initial_weights([(N_FEATURES, N_TASKS), (N_TASKS,)], 1 / N_FEATURES**0.5, SEED)
    )
    return model


def plain_task_norm_loss(y_true, y_pred):
    """The loss of the bug report: `mean(norm(y_true - y_pred, axis=0)**2)`."""
    from keras import ops

    dist = ops.norm(y_true - y_pred, axis=0)
    return ops.mean(dist**2)


def _classifier_batch(step):
    """Two Gaussian blobs in 2-D, one-hot labels."""
    import numpy as np

    rng = np.random.default_rng(2000 + step)
    labels = rng.integers(0, 2, size=CLASSIFIER_BATCH)
    centres = np.where(labels[:, None] == 1, 1.5, -1.5)
    x = rng.normal(size=(CLASSIFIER_BATCH, 2)) + centres
    return x.astype("float32"), np.eye(2, dtype="float32")[labels]


def _classifier_model():
    """A 2-3-2 network whose large initial weights give logits above 88."""
    import keras

    x = keras.Input((2,), name="x")
    hidden = keras.layers.Dense(3, activation="tanh")(x)
    logits = keras.layers.Dense(2)(hidden)
    model = keras.Model(x, logits)
    model.set_weights(
        _initial_weights(
            [(2, 3), (3,), (3, 2), (2,)],
            CLASSIFIER_INIT_STDDEV,
            CLASSIFIER_SEED,
        )
    )
    return model


def plain_softmax_cross_entropy(y_true, scores):
    """Hand-written softmax and cross-entropy: `exp(s) / sum(exp(s))`."""
    from keras import ops

    probs = ops.exp(scores) / ops.sum(ops.exp(scores), axis=1, keepdims=True)
    return -ops.sum(y_true * ops.log(probs), axis=1)


def _scenarios():
    """The two scenarios: model, data, learning rate and the two losses.

    `fix` is the one line that differs between the plain run and the
    keras_stable run; everything else (model, initial weights, data,
    optimizer) is identical.
    """
    import keras_stable

    return [
        {
            "name": "multi-task regression",
            "doc": "python -m keras_stable.audit --explain norm_at_zero",
            "model": _regression_model,
            "batch": _regression_batch,
            "lr": REGRESSION_LR,
            "plain": ("plain (keras.ops.norm)", lambda: plain_task_norm_loss),
            # The same value as the plain loss (each task's squared distance
            # across the batch, averaged over the 30 tasks), with no sqrt
            # whose gradient could meet 0/0.
            "stable": (
                "keras_stable",
                lambda: keras_stable.losses.MaskedMultiTaskDistance(per="task", squared=True),
            ),
            "fix": 'loss=keras_stable.losses.MaskedMultiTaskDistance(per="task", squared=True)',
        },
        {
            "name": "2-3-2 classifier",
            "doc": "python -m keras_stable.audit --explain unshifted_softmax",
            "model": _classifier_model,
            "batch": _classifier_batch,
            "lr": CLASSIFIER_LR,
            "plain": (
                "plain (exp(s)/sum(exp(s)))",
                lambda: plain_softmax_cross_entropy,
            ),
            "stable": (
                "keras_stable",
                keras_stable.losses.StableSoftmaxCrossEntropy,
            ),
            "fix": "loss=keras_stable.losses.StableSoftmaxCrossEntropy()",
        },
    ]
