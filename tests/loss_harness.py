"""Shared checks run for every keras_stable loss and metric.

Each loss or metric is described by a `Spec`: how to build it, a tiny data
set for a model with `outputs` units, and an edge-case grid of
`(y_true, y_pred)` pairs whose value (and, for losses, gradient) must be
finite. The `check_*` functions below are the harness of CONTRIBUTING.md ("Add a loss"):
config round trip and identical behaviour after it, `.keras` save/load with
identical values, one `fit` step with `jit_compile=True` (not on torch),
the mixed-precision sweep, and the edge-case grid.
"""

import dataclasses
import os
from collections.abc import Callable

import keras
import numpy as np

from tests.backend_utils import BACKEND
from tests.backend_utils import assert_finite
from tests.backend_utils import to_numpy
from tests.backend_utils import vjp_all_modes

JIT = BACKEND in ("tensorflow", "jax")
POLICIES = ("mixed_float16", "mixed_bfloat16")


@dataclasses.dataclass
class Spec:
    """How to exercise one loss or metric class."""

    id: str
    cls: type
    kwargs: dict
    outputs: int
    make_y: Callable  # rng, n -> y (labels of a model with `outputs` units)
    edge_cases: list  # [(y_true, y_pred)] with finite value and gradient
    sample_weight: Callable = None  # rng, n -> sample weights, or None
    # Metrics only: the loss a model carrying the metric trains with.
    train_loss: Callable = None
    # masking -> a model on (n, 4) inputs (Masking first when asked);
    # None: a Dense head with `outputs` units.
    model: Callable = None
    # A loss whose value is one number per batch (its samples are compared
    # with each other): its edge cases are run one by one, not stacked.
    batch_level: bool = False
    # The axis of y_pred that indexes the samples ((2, batch, dim) views: 1).
    pred_batch_axis: int = 0

    def make(self, **overrides):
        return self.cls(**{**self.kwargs, **overrides})

    def data(self, n=8, seed=0):
        rng = np.random.default_rng(seed)
        x = rng.normal(size=(n, 4)).astype("float32")
        y = self.make_y(rng, n)
        sw = None if self.sample_weight is None else self.sample_weight(rng, n)
        return x, y, sw

    def __repr__(self):
        return self.id


def _f32(x):
    return np.asarray(x, "float32")


# --- data makers -----------------------------------------------------------


def tasks_y(rng, n, tasks=5):
    y = rng.normal(size=(n, tasks)).astype("float32")
    y[rng.random(size=y.shape) < 0.2] = np.nan  # missing labels
    y[0, 0] = 1.0  # at least one label everywhere relevant
    return y


def onehot_y(rng, n, classes=3):
    return np.eye(classes, dtype="float32")[rng.integers(0, classes, n)]


def sparse_y(rng, n, classes=3):
    y = rng.integers(0, classes, n).astype("int32")
    y[1] = -1  # ignored when ignore_class=-1
    return y


def binary_y(rng, n, outputs=2):
    return rng.integers(0, 2, (n, outputs)).astype("float32")


def task_weights_2d(rng, n, tasks=5):
    w = np.zeros((n, tasks), "float32")
    w[np.arange(n), rng.integers(0, tasks, n)] = 1.0  # one task per sample
    return w


def counts_y(rng, n, outputs=3):
    return rng.poisson(2.0, (n, outputs)).astype("float32")


def gaussian_y(rng, n):
    return rng.normal(size=(n,)).astype("float32")  # one target, (mean, log_var) head


def example_weights(rng, n):
    return rng.uniform(0.0, 2.0, n).astype("float32")


# --- edge-case grids ---------------------------------------------------------

_NAN = np.nan
_INF = np.inf

TASK_EDGES = [
    (_f32([[1.0, 2.0, 3.0, 4.0, 5.0]]), _f32([[1.0, 2.0, 3.0, 4.0, 5.0]])),  # distance 0
    (np.full((2, 5), _NAN, "float32"), _f32(np.ones((2, 5)))),  # all missing
    (
        _f32([[_NAN, 2.0, _NAN, 1.0, 0.0], [1.0, _NAN, 3.0, _NAN, _NAN]]),
        _f32([[5.0, 2.0, 1.0, 1.0, 0.0], [0.0, 4.0, 3.0, 1e30, -1e30]]),
    ),
    (_f32(np.zeros((2, 5))), _f32(np.zeros((2, 5)))),
]

SOFTMAX_EDGES = [
    (_f32([[1.0, 0.0, 0.0]]), _f32([[2.0, -_INF, 0.0]])),  # -inf on a zero label
    (_f32([[0.5, 0.0, 0.5]]), _f32([[1000.0, -_INF, 999.0]])),  # overflow
    (_f32([[0.0, 1.0, 0.0]]), _f32([[-1000.0, 1000.0, 0.0]])),
    (_f32([[1.0, 0.0, 0.0]]), _f32([[0.0, 0.0, 0.0]])),
]

PROB_EDGES = [
    (_f32([[1.0, 0.0, 0.0]]), _f32([[0.7, 0.0, 0.3]])),  # p = 0, label 0
    (_f32([[0.0, 1.0, 0.0]]), _f32([[0.0, 1.0, 0.0]])),  # p = 1 on the label
    (_f32([[0.2, 0.0, 0.8]]), _f32([[0.5, 0.0, 0.5]])),
    (_f32([[1.0, 0.0, 0.0]]), _f32([[0.0, 0.5, 0.5]])),  # p = 0 on the label: saturated
    (_f32([[1.0, 0.0, 0.0]]), _f32([[8e-40, 1.0, 0.0]])),  # a denormal (0 under XLA)
]

SPARSE_EDGES = [
    (np.array([0], "int32"), _f32([[2.0, -_INF, 0.0]])),
    (np.array([2, -1], "int32"), _f32([[1000.0, -_INF, 999.0], [0.0, 1.0, 2.0]])),
    (np.array([-1, -1], "int32"), _f32([[1.0, 2.0, 3.0], [-_INF, 1.0, 0.0]])),  # all ignored
    (_f32([1.0, -1.0]), _f32([[-1000.0, 1000.0, 0.0], [0.0, 0.0, 0.0]])),  # float labels
]

SIGMOID_EDGES = [
    (_f32([[0.0, 1.0]]), _f32([[100.0, 1e4]])),
    (_f32([[1.0, 0.0]]), _f32([[-1e4, -100.0]])),
    (_f32([[0.5, 0.5]]), _f32([[0.0, 30.0]])),
    (_f32([[_NAN, 1.0]]), _f32([[1e4, -1e4]])),  # a missing label
    (_f32([[_NAN, _NAN]]), _f32([[-1e4, 30.0]])),  # an example without labels
]


BINARY_PROB_EDGES = [
    (_f32([[0.0, 1.0]]), _f32([[0.0, 1.0]])),  # p = 0 and 1 on the labels
    (_f32([[1.0, 0.0]]), _f32([[0.5, 1e-30]])),
    (_f32([[1.0, 0.0]]), _f32([[0.0, 1.0]])),  # p = 0 on label 1, 1 on label 0: saturated
    (_f32([[_NAN, 1.0]]), _f32([[0.0, 1.0]])),  # a missing label
]

# Saturated easy and hard examples for the focal factor (gamma < 1).
SIGMOID_FOCAL_EDGES = SIGMOID_EDGES + [
    (_f32([[1.0, 1.0]]), _f32([[40.0, 100.0]])),
    (_f32([[1.0, 0.0]]), _f32([[-30.0, -1e4]])),
]


def soft_y(rng, n, classes=3):
    return rng.dirichlet(np.ones(classes), n).astype("float32")


# Missing labels: all-missing rows, huge predictions under missing labels.
REGRESSION_EDGES = TASK_EDGES + [
    (
        _f32([[_NAN, 1e4, -3.0, _NAN, 0.5], [_NAN] * 5]),
        _f32([[1e30, -1e4, -3.0, -1e30, 0.0], [1e30, -1e30, 0.0, 1.0, 2.0]]),
    ),
]

POISSON_LOG_EDGES = [
    (_f32([[1.0, 0.0, 3.0]]), _f32([[-20.0, -2.0, 0.0]])),  # log link, low rate
    (_f32([[0.0, 0.0, 1e4]]), _f32([[-_INF, -80.0, 80.0]])),  # rate 0, extremes
    (_f32([[0.0, 2.0, 5.0]]), _f32([[0.0, 0.0, 0.0]])),
]

POISSON_RATE_EDGES = [
    (_f32([[0.0, 3.0, 1.0]]), _f32([[0.0, 1e-30, 2.0]])),  # rate 0 on a zero count
    (_f32([[0.0, 0.0, 0.0]]), _f32([[0.0, 0.0, 0.0]])),
]

GAUSSIAN_EDGES = [
    (
        _f32([0.0, 1e20, 1.0, 5.0]),
        _f32([[0.0, -100.0], [0.0, 100.0], [1.0, -1000.0], [0.0, 1000.0]]),
    ),
    (_f32([1e-6, 0.0, 3.0]), _f32([[0.0, -100.0], [0.0, 0.0], [-3.0, 80.0]])),
]


def class_labels(rng, n, classes=3):
    return rng.integers(0, classes, n).astype("int32")


def pair_labels(rng, n):
    return rng.integers(0, 2, n).astype("int32")


def pair_distances_model(masking):
    """A distance head (>= 0) for ContrastiveLoss."""
    inputs = keras.Input((4,))
    hidden = keras.layers.Masking(0.0)(inputs) if masking else inputs
    return keras.Model(inputs, keras.layers.Dense(1, activation="softplus")(hidden))


@keras.saving.register_keras_serializable(package="keras_stable_tests")
class StackViews(keras.layers.Layer):
    """Stacks two `(batch, dim)` views as `(2, batch, dim)` (InfoNCE's
    `y_pred`), passing the first view's `(batch,)` mask on."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, inputs):
        return keras.ops.stack(inputs, axis=0)

    def compute_mask(self, inputs, mask=None):
        return None if mask is None else mask[0]

    def compute_output_shape(self, input_shape):
        return (2,) + tuple(input_shape[0])


def two_views_model(masking, dim=4):
    inputs = keras.Input((4,))
    hidden = keras.layers.Masking(0.0)(inputs) if masking else inputs
    views = [keras.layers.Dense(dim, name=f"view_{i}")(hidden) for i in (1, 2)]
    return keras.Model(inputs, StackViews()(views))


def zeros_y(rng, n):
    return np.zeros((n,), "float32")  # InfoNCE reads no labels


def regression_y(rng, n, outputs=3):
    return rng.normal(size=(n, outputs)).astype("float32")


# Coincident, all-zero, collapsed and huge embeddings; batches without a
# positive pair or without a negative.
TRIPLET_EDGES = [
    (np.array([0, 0, 1, 1], "int32"), _f32(np.zeros((4, 3)))),
    (np.array([0, 1, 0, 1], "int32"), _f32([[1.0, 2.0, 3.0]] * 3 + [[1.0, 2.0, 4.0]])),
    (np.array([0, 1, 2], "int32"), _f32([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])),
    (np.array([5, 5, 5], "int32"), _f32([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])),
    (
        np.array([0, 0, 1, 2], "int32"),
        _f32([[1e30, 0.0, 0.0], [1e30, 0.0, 0.0], [-1e30, 1e30, 0.0], [1e-30, 0.0, 0.0]]),
    ),
]

CONTRASTIVE_EDGES = [
    (np.array([1, 0, 1, 0], "int32"), _f32([0.0, 0.0, 1e10, 1e10])),
    (np.array([[1], [0]], "int32"), _f32([[1.0], [1.0]])),  # d = margin
]

COSINE_EDGES = [
    (
        _f32([[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]]),
        _f32([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]),
    ),  # zero vectors
    (_f32([[0.0, 0.0, 0.0]]), _f32([[0.0, 0.0, 0.0]])),
    (
        _f32([[1e30, 1e30, 0.0], [300.0, 300.0, 300.0]]),
        _f32([[-1e30, 1e-30, 0.0], [300.0, 300.0, 300.0]]),
    ),
]

INFO_NCE_EDGES = [
    (np.zeros(3, "float32"), _f32(np.zeros((2, 3, 4)))),  # zero embeddings
    (np.zeros(3, "float32"), _f32(np.ones((2, 3, 4)))),  # identical views
    (np.zeros(1, "float32"), _f32([[[1.0, 2.0, 3.0, 4.0]], [[0.0, 0.0, 0.0, 0.0]]])),  # one pair
    (
        np.zeros(2, "float32"),
        _f32(
            [
                [[1e30, 0.0, 0.0, 0.0], [0.0, 1e-30, 0.0, 0.0]],
                [[1e30, 0.0, 0.0, 0.0], [0.0, -1e-30, 0.0, 0.0]],
            ]
        ),
    ),
]

# Constant targets and/or predictions (Keras: NaN), a single sample.
CORRELATION_EDGES = [
    (_f32([[2.0, 2.0, 2.0], [2.0, 2.0, 2.0]]), _f32([[2.0, 2.0, 2.0], [2.0, 2.0, 2.0]])),
    (_f32([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]), _f32([[0.5, 0.5, 0.5], [1.0, 1.0, 1.0]])),
    (_f32([[2.0, 2.0, 2.0], [2.0, 2.0, 2.0]]), _f32([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]])),
    (_f32([[1.0, 2.0, 3.0]]), _f32([[3.0, 1.0, 2.0]])),
    (
        _f32([[1e4, 1e4 + 1.0, 1e4 - 1.0], [1e4, 1e4, 1e4]]),
        _f32([[0.0, 1.0, -1.0], [5.0, 5.0, 5.0]]),
    ),
]


def _specs():
    from keras_stable import losses
    from keras_stable import metrics

    loss_specs = [
        Spec("mmtd_sample", losses.MaskedMultiTaskDistance, {}, 5, tasks_y, TASK_EDGES),
        Spec(
            "mmtd_task_masked",
            losses.MaskedMultiTaskDistance,
            {
                "per": "task",
                "squared": True,
                "task_mask": [True, False, True, True, True],
                "task_weights": [1.0, 2.0, 0.5, 1.0, 1.0],
            },
            5,
            tasks_y,
            TASK_EDGES,
            task_weights_2d,
        ),
        Spec(
            "softmax_ce",
            losses.StableSoftmaxCrossEntropy,
            {"label_smoothing": 0.1},
            3,
            onehot_y,
            SOFTMAX_EDGES,
        ),
        Spec(
            "softmax_ce_probs",
            losses.StableSoftmaxCrossEntropy,
            {"from_logits": False},
            3,
            onehot_y,
            PROB_EDGES,
        ),
        Spec(
            "sparse_ce",
            losses.StableSparseSoftmaxCrossEntropy,
            {"ignore_class": -1},
            3,
            sparse_y,
            SPARSE_EDGES,
        ),
        Spec(
            "sigmoid_ce",
            losses.StableSigmoidCrossEntropy,
            {"label_smoothing": 0.2},
            2,
            binary_y,
            SIGMOID_EDGES,
        ),
        Spec(
            "sigmoid_focal",
            losses.StableSigmoidFocalCrossEntropy,
            {"gamma": 0.5, "alpha": 0.25, "label_smoothing": 0.1},
            2,
            binary_y,
            SIGMOID_FOCAL_EDGES,
        ),
        Spec(
            "sigmoid_focal_probs",
            losses.StableSigmoidFocalCrossEntropy,
            {"from_logits": False},
            2,
            binary_y,
            BINARY_PROB_EDGES,
        ),
        Spec(
            "softmax_focal",
            losses.StableSoftmaxFocalCrossEntropy,
            {"gamma": 0.5, "alpha": [0.25, 0.5, 1.0], "label_smoothing": 0.1},
            3,
            onehot_y,
            SOFTMAX_EDGES,
        ),
        Spec(
            "softmax_focal_probs",
            losses.StableSoftmaxFocalCrossEntropy,
            {"from_logits": False, "alpha": 0.25},
            3,
            onehot_y,
            PROB_EDGES,
        ),
        Spec("kl", losses.StableKLDivergence, {}, 3, soft_y, SOFTMAX_EDGES),
        Spec("kl_probs", losses.StableKLDivergence, {"from_logits": False}, 3, soft_y, PROB_EDGES),
        Spec(
            "poisson_log",
            losses.StablePoisson,
            {"full": True},
            3,
            counts_y,
            POISSON_LOG_EDGES,
            example_weights,
        ),
        Spec(
            "poisson_rate",
            losses.StablePoisson,
            {"log_input": False},
            3,
            counts_y,
            POISSON_RATE_EDGES,
        ),
        Spec(
            "gaussian_nll",
            losses.StableGaussianNLL,
            {"full": True},
            2,
            gaussian_y,
            GAUSSIAN_EDGES,
            example_weights,
        ),
        Spec("masked_mse", losses.MaskedMeanSquaredError, {}, 5, tasks_y, REGRESSION_EDGES),
        Spec(
            "masked_mae",
            losses.MaskedMeanAbsoluteError,
            {"reduction": "sum"},
            5,
            tasks_y,
            REGRESSION_EDGES,
            example_weights,
        ),
        Spec(
            "masked_huber",
            losses.MaskedHuber,
            {"delta": 0.5},
            5,
            tasks_y,
            REGRESSION_EDGES,
            example_weights,
        ),
        Spec(
            "cosine",
            losses.StableCosineSimilarity,
            {"axis": -1},
            3,
            regression_y,
            COSINE_EDGES,
            example_weights,
        ),
        Spec(
            "contrastive",
            losses.ContrastiveLoss,
            {"margin": 0.5},
            1,
            pair_labels,
            CONTRASTIVE_EDGES,
            example_weights,
            model=pair_distances_model,
        ),
        Spec(
            "triplet_semihard",
            losses.TripletSemiHardLoss,
            {"margin": 0.5},
            3,
            class_labels,
            TRIPLET_EDGES,
            example_weights,
            batch_level=True,
        ),
        Spec(
            "triplet_semihard_angular",
            losses.TripletSemiHardLoss,
            {"distance_metric": "angular"},
            3,
            class_labels,
            TRIPLET_EDGES,
            batch_level=True,
        ),
        Spec(
            "triplet_hard",
            losses.TripletHardLoss,
            {"margin": 0.5, "distance_metric": "squared-L2"},
            3,
            class_labels,
            TRIPLET_EDGES,
            example_weights,
            batch_level=True,
        ),
        Spec(
            "triplet_hard_soft",
            losses.TripletHardLoss,
            {"soft": True},
            3,
            class_labels,
            TRIPLET_EDGES,
            batch_level=True,
        ),
        Spec(
            "info_nce",
            losses.InfoNCELoss,
            {"temperature": 0.05},
            4,
            zeros_y,
            INFO_NCE_EDGES,
            example_weights,
            model=two_views_model,
            batch_level=True,
            pred_batch_axis=1,
        ),
    ]
    metric_specs = [
        Spec(
            "m_mmtd_sample",
            metrics.MaskedMultiTaskDistance,
            {},
            5,
            tasks_y,
            TASK_EDGES,
            train_loss=losses.MaskedMultiTaskDistance,
        ),
        Spec(
            "m_mmtd_task",
            metrics.MaskedMultiTaskDistance,
            {"per": "task"},
            5,
            tasks_y,
            TASK_EDGES,
            task_weights_2d,
            train_loss=losses.MaskedMultiTaskDistance,
        ),
        Spec(
            "m_ce",
            metrics.StableCrossEntropy,
            {"label_smoothing": 0.1},
            3,
            onehot_y,
            SOFTMAX_EDGES,
            train_loss=losses.StableSoftmaxCrossEntropy,
        ),
        Spec(
            "m_ce_probs",
            metrics.StableCrossEntropy,
            {"from_logits": False},
            3,
            onehot_y,
            PROB_EDGES,
            train_loss=lambda: losses.StableSoftmaxCrossEntropy(from_logits=False),
        ),
        Spec(
            "m_sparse_ce",
            metrics.StableSparseCrossEntropy,
            {"ignore_class": -1},
            3,
            sparse_y,
            SPARSE_EDGES,
            train_loss=lambda: losses.StableSparseSoftmaxCrossEntropy(ignore_class=-1),
        ),
        Spec(
            "m_bce",
            metrics.StableBinaryCrossEntropy,
            {"label_smoothing": 0.2},
            2,
            binary_y,
            SIGMOID_EDGES,
            train_loss=losses.StableSigmoidCrossEntropy,
        ),
        Spec(
            "m_bce_probs",
            metrics.StableBinaryCrossEntropy,
            {"from_logits": False},
            2,
            binary_y,
            BINARY_PROB_EDGES,
            train_loss=lambda: losses.StableSigmoidCrossEntropy(from_logits=False),
        ),
        Spec(
            "m_masked_mse",
            metrics.MaskedMeanSquaredError,
            {},
            5,
            tasks_y,
            REGRESSION_EDGES,
            train_loss=losses.MaskedMeanSquaredError,
        ),
        Spec(
            "m_masked_mae",
            metrics.MaskedMeanAbsoluteError,
            {},
            5,
            tasks_y,
            REGRESSION_EDGES,
            example_weights,
            train_loss=losses.MaskedMeanAbsoluteError,
        ),
        Spec(
            "m_masked_huber",
            metrics.MaskedHuber,
            {"delta": 0.5},
            5,
            tasks_y,
            REGRESSION_EDGES,
            example_weights,
            train_loss=lambda: losses.MaskedHuber(delta=0.5),
        ),
        Spec(
            "m_pearson_rows",
            metrics.StablePearsonCorrelation,
            {"axis": -1},
            3,
            regression_y,
            CORRELATION_EDGES,
            example_weights,
            train_loss=keras.losses.MeanSquaredError,
        ),
        Spec(
            "m_pearson_columns",
            metrics.StablePearsonCorrelation,
            {"axis": 0},
            3,
            regression_y,
            CORRELATION_EDGES,
            example_weights,
            train_loss=keras.losses.MeanSquaredError,
        ),
        Spec(
            "m_r2",
            metrics.StableR2Score,
            {},
            3,
            regression_y,
            CORRELATION_EDGES,
            example_weights,
            train_loss=keras.losses.MeanSquaredError,
        ),
        Spec(
            "m_r2_weighted_adjusted",
            metrics.StableR2Score,
            {"class_aggregation": "variance_weighted_average", "num_regressors": 2},
            3,
            regression_y,
            CORRELATION_EDGES,
            train_loss=keras.losses.MeanSquaredError,
        ),
    ]
    return loss_specs, metric_specs


LOSS_SPECS, METRIC_SPECS = _specs()
ALL_SPECS = LOSS_SPECS + METRIC_SPECS


# --- helpers -------------------------------------------------------------------


def is_metric(obj):
    return isinstance(obj, keras.metrics.Metric)


def tiny_model(outputs, activation=None, seed=0):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((4,))
    out = keras.layers.Dense(outputs, activation=activation, name="head")(inputs)
    return keras.Model(inputs, out)


def spec_model(spec, masking=False):
    """The model whose predictions the spec's class reads."""
    keras.utils.set_random_seed(0)
    if spec.model is not None:
        return spec.model(masking)
    if not masking:
        return tiny_model(spec.outputs, _activation(spec))
    inputs = keras.Input((4,))
    hidden = keras.layers.Masking(0.0)(inputs)
    out = keras.layers.Dense(spec.outputs, activation=_activation(spec))(hidden)
    return keras.Model(inputs, out)


def _activation(spec):
    if spec.kwargs.get("log_input") is False:
        return "softplus"  # Poisson rates must be >= 0
    if spec.kwargs.get("from_logits") is not False:
        return None
    return (
        "sigmoid"
        if spec.cls.__name__.endswith(
            ("SigmoidCrossEntropy", "BinaryCrossEntropy", "SigmoidFocalCrossEntropy")
        )
        else "softmax"
    )


def evaluate(obj, y_true, y_pred, sample_weight=None):
    """A loss value, or a fresh metric's result after one update."""
    if is_metric(obj):
        obj.reset_state()
        obj.update_state(y_true, y_pred, sample_weight=sample_weight)
        return to_numpy(obj.result())
    return to_numpy(obj(y_true, y_pred, sample_weight=sample_weight))


def compile_model(spec, jit_compile=False, model=None):
    model = model or spec_model(spec)
    obj = spec.make()
    if is_metric(obj):
        # Metrics ride on the loss their spec names, so the model can train.
        loss = spec.train_loss()
        model.compile(
            optimizer=keras.optimizers.SGD(0.01), loss=loss, metrics=[obj], jit_compile=jit_compile
        )
    else:
        model.compile(optimizer=keras.optimizers.SGD(0.01), loss=obj, jit_compile=jit_compile)
    return model


# --- the checks --------------------------------------------------------------------


def check_config_round_trip(spec):
    """get_config holds every argument, and the copy behaves identically."""
    obj = spec.make()
    config = obj.get_config()
    for key in list(spec.kwargs) + ["name", "dtype"]:
        assert key in config, f"{key} missing from {type(obj).__name__}.get_config()"
    if not is_metric(obj):
        assert "reduction" in config
    for key, value in spec.kwargs.items():
        assert config[key] == value, (key, config[key], value)
    copy = type(obj).from_config(config)
    assert copy.get_config() == config
    serialized = keras.saving.serialize_keras_object(obj)
    assert serialized["registered_name"].startswith("keras_stable>")
    restored = keras.saving.deserialize_keras_object(serialized)
    assert type(restored) is type(obj)
    x, y, sw = spec.data()
    y_pred = spec_model(spec)(x)
    expected = evaluate(obj, y, y_pred, sw)
    for other in (copy, restored):
        np.testing.assert_array_equal(evaluate(other, y, y_pred, sw), expected)
    assert_finite(expected, spec.id)


def check_save_load(spec, tmp_path):
    """A compiled tiny model saved as `.keras` reloads with safe_mode=True
    and gives identical loss and metric values."""
    x, y, sw = spec.data()
    model = compile_model(spec)
    before = model.evaluate(x, y, sample_weight=sw, verbose=0, return_dict=True)
    path = os.path.join(str(tmp_path), f"{spec.id}.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    after = loaded.evaluate(x, y, sample_weight=sw, verbose=0, return_dict=True)
    assert set(before) == set(after), (before, after)
    for key in before:
        np.testing.assert_allclose(after[key], before[key], rtol=1e-6, err_msg=key)
        assert np.isfinite(before[key]), (key, before)
    if is_metric(spec.make()):
        types = [type(m).__name__ for m in _flat_metrics(loaded)]
        assert spec.cls.__name__ in types, types
    else:
        assert type(loaded.loss) is spec.cls


def _flat_metrics(model):
    out = []
    stack = list(model.metrics)
    while stack:
        m = stack.pop()
        out.append(m)
        stack.extend(getattr(m, "metrics", []) or [])
    return out


def check_fit_step(spec):
    """One fit step, jit-compiled where the backend supports it."""
    x, y, sw = spec.data()
    model = compile_model(spec, jit_compile=JIT)
    history = model.fit(x, y, sample_weight=sw, batch_size=8, epochs=1, verbose=0)
    for key, values in history.history.items():
        assert np.all(np.isfinite(values)), (key, values)
    for w in model.weights:
        assert_finite(to_numpy(w.value), w.path)


def check_precision(spec, policy):
    """Under a mixed policy the model's predictions are half precision and
    the loss / metric result is float32 and finite."""
    keras.config.set_dtype_policy(policy)
    try:
        x, y, sw = spec.data()
        model = spec_model(spec)
        y_pred = model(x)
        assert keras.backend.standardize_dtype(y_pred.dtype) == policy.split("_")[1]
        obj = spec.make()
        if is_metric(obj):
            obj.update_state(y, y_pred, sample_weight=sw)
            out = obj.result()
        else:
            out = obj(y, y_pred, sample_weight=sw)
        assert keras.backend.standardize_dtype(out.dtype) == "float32", out.dtype
        assert_finite(to_numpy(out), f"{spec.id} under {policy}")
        reference = evaluate(spec.make(), y, to_numpy(y_pred).astype("float32"), sw)
        np.testing.assert_allclose(to_numpy(out), reference, rtol=1e-5, atol=1e-6)
    finally:
        keras.config.set_dtype_policy("float32")


def _batched_edge_cases(spec):
    """The edge cases stacked into as few batches as their dtypes allow, so
    each compiles once."""
    groups = {}
    for y_true, y_pred in spec.edge_cases:
        key = (y_true.dtype.str, y_true.shape[1:], y_pred.shape[1:])
        groups.setdefault(key, []).append((y_true, y_pred))
    return [
        (np.concatenate([t for t, _ in cases]), np.concatenate([p for _, p in cases]))
        for cases in groups.values()
    ]


def check_edge_grid(spec):
    """Every edge case gives a finite value and (losses) finite gradients,
    eagerly and compiled, with the same numbers."""
    obj = spec.make()
    batched = not (is_metric(obj) or spec.batch_level)
    cases = _batched_edge_cases(spec) if batched else spec.edge_cases
    for y_true, y_pred in cases:
        if is_metric(obj):
            value = evaluate(obj, y_true, y_pred)
            assert_finite(value, f"{spec.id} value at {y_true}, {y_pred}")
            continue

        def fn(yp, yt=y_true):
            return obj(yt, yp)

        out, (grad,) = vjp_all_modes(fn, [y_pred])
        assert_finite(out, f"{spec.id} value at {y_true}, {y_pred}")
        assert_finite(grad, f"{spec.id} gradient at {y_true}, {y_pred}")


def check_keras_mask(spec):
    """A `Masking` layer masks whole samples: the value is the value over
    the unmasked samples alone (as `keras.losses.Loss` and Keras's metrics
    read the mask of `y_pred`)."""
    x, y, sw = spec.data()
    x[::3] = 0.0  # masked samples
    keep = ~np.all(x == 0, axis=1)
    y_pred = spec_model(spec, masking=True)(x)
    value = evaluate(spec.make(), y, y_pred, sw)
    kept = np.compress(keep, to_numpy(y_pred), axis=spec.pred_batch_axis)
    kept_pred = keras.ops.convert_to_tensor(kept, "float32")
    expected = evaluate(spec.make(), y[keep], kept_pred, None if sw is None else sw[keep])
    np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-6)
    assert_finite(value, spec.id)
