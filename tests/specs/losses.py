"""The specs of every loss and metric: a tiny data set for a model with
`outputs` units, and an edge-case grid of `(y_true, y_pred)` pairs whose
value (and, for losses, gradient) must be finite. Every check of
`tests/harness/losses.py` runs for each (`tests/test_harness.py`)."""

import keras
import numpy as np

from tests.harness.common import dense_model
from tests.harness.losses import LossSpec


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

# Two components, one dimension: y_pred is [logit0, logit1, mean0, mean1,
# log_scale0, log_scale1]. A target 40 standard deviations out, a -inf
# logit (its component takes no part), tiny and huge scales, huge logits.
MIXTURE_EDGES = [
    (
        _f32([[40.0], [0.5], [1e-3], [1e20]]),
        _f32(
            [
                [0.0, 0.0, 0.0, 1.0, 0.0, 0.0],
                [0.0, -_INF, 0.0, 3.0, 0.0, -1.0],
                [0.0, 0.0, 0.0, 5.0, -50.0, 0.0],
                [1e4, -1e4, 0.0, 0.0, 50.0, 0.0],
            ]
        ),
    ),
]


def mixture_y(rng, n):
    return rng.normal(size=(n, 1)).astype("float32")


def class_labels(rng, n, classes=3):
    return rng.integers(0, classes, n).astype("int32")


def pair_labels(rng, n):
    return rng.integers(0, 2, n).astype("int32")


def pair_distances_model(masking):
    """A distance head (>= 0) for ContrastiveLoss."""
    return dense_model((4,), 1, masking=masking, activation="softplus")


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
        LossSpec("mmtd_sample", losses.MaskedMultiTaskDistance, {}, 5, tasks_y, TASK_EDGES),
        LossSpec(
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
        LossSpec(
            "softmax_ce",
            losses.StableSoftmaxCrossEntropy,
            {"label_smoothing": 0.1},
            3,
            onehot_y,
            SOFTMAX_EDGES,
        ),
        LossSpec(
            "softmax_ce_probs",
            losses.StableSoftmaxCrossEntropy,
            {"from_logits": False},
            3,
            onehot_y,
            PROB_EDGES,
        ),
        LossSpec(
            "sparse_ce",
            losses.StableSparseSoftmaxCrossEntropy,
            {"ignore_class": -1},
            3,
            sparse_y,
            SPARSE_EDGES,
        ),
        LossSpec(
            "sigmoid_ce",
            losses.StableSigmoidCrossEntropy,
            {"label_smoothing": 0.2},
            2,
            binary_y,
            SIGMOID_EDGES,
        ),
        LossSpec(
            "sigmoid_focal",
            losses.StableSigmoidFocalCrossEntropy,
            {"gamma": 0.5, "alpha": 0.25, "label_smoothing": 0.1},
            2,
            binary_y,
            SIGMOID_FOCAL_EDGES,
        ),
        LossSpec(
            "sigmoid_focal_probs",
            losses.StableSigmoidFocalCrossEntropy,
            {"from_logits": False},
            2,
            binary_y,
            BINARY_PROB_EDGES,
        ),
        LossSpec(
            "softmax_focal",
            losses.StableSoftmaxFocalCrossEntropy,
            {"gamma": 0.5, "alpha": [0.25, 0.5, 1.0], "label_smoothing": 0.1},
            3,
            onehot_y,
            SOFTMAX_EDGES,
        ),
        LossSpec(
            "softmax_focal_probs",
            losses.StableSoftmaxFocalCrossEntropy,
            {"from_logits": False, "alpha": 0.25},
            3,
            onehot_y,
            PROB_EDGES,
        ),
        LossSpec("kl", losses.StableKLDivergence, {}, 3, soft_y, SOFTMAX_EDGES),
        LossSpec(
            "kl_probs", losses.StableKLDivergence, {"from_logits": False}, 3, soft_y, PROB_EDGES
        ),
        LossSpec(
            "poisson_log",
            losses.StablePoisson,
            {"full": True},
            3,
            counts_y,
            POISSON_LOG_EDGES,
            example_weights,
        ),
        LossSpec(
            "poisson_rate",
            losses.StablePoisson,
            {"log_input": False},
            3,
            counts_y,
            POISSON_RATE_EDGES,
        ),
        LossSpec(
            "gaussian_nll",
            losses.StableGaussianNLL,
            {"full": True},
            2,
            gaussian_y,
            GAUSSIAN_EDGES,
            example_weights,
        ),
        LossSpec(
            "mixture_density_nll",
            losses.MixtureDensityNLL,
            {"num_components": 2},
            6,
            mixture_y,
            MIXTURE_EDGES,
            example_weights,
        ),
        LossSpec("masked_mse", losses.MaskedMeanSquaredError, {}, 5, tasks_y, REGRESSION_EDGES),
        LossSpec(
            "masked_mae",
            losses.MaskedMeanAbsoluteError,
            {"reduction": "sum"},
            5,
            tasks_y,
            REGRESSION_EDGES,
            example_weights,
        ),
        LossSpec(
            "masked_huber",
            losses.MaskedHuber,
            {"delta": 0.5},
            5,
            tasks_y,
            REGRESSION_EDGES,
            example_weights,
        ),
        LossSpec(
            "cosine",
            losses.StableCosineSimilarity,
            {"axis": -1},
            3,
            regression_y,
            COSINE_EDGES,
            example_weights,
        ),
        LossSpec(
            "contrastive",
            losses.ContrastiveLoss,
            {"margin": 0.5},
            1,
            pair_labels,
            CONTRASTIVE_EDGES,
            example_weights,
            model=pair_distances_model,
        ),
        LossSpec(
            "triplet_semihard",
            losses.TripletSemiHardLoss,
            {"margin": 0.5},
            3,
            class_labels,
            TRIPLET_EDGES,
            example_weights,
            batch_level=True,
        ),
        LossSpec(
            "triplet_semihard_angular",
            losses.TripletSemiHardLoss,
            {"distance_metric": "angular"},
            3,
            class_labels,
            TRIPLET_EDGES,
            batch_level=True,
        ),
        LossSpec(
            "triplet_hard",
            losses.TripletHardLoss,
            {"margin": 0.5, "distance_metric": "squared-L2"},
            3,
            class_labels,
            TRIPLET_EDGES,
            example_weights,
            batch_level=True,
        ),
        LossSpec(
            "triplet_hard_soft",
            losses.TripletHardLoss,
            {"soft": True},
            3,
            class_labels,
            TRIPLET_EDGES,
            batch_level=True,
        ),
        LossSpec(
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
        LossSpec(
            "m_mmtd_sample",
            metrics.MaskedMultiTaskDistance,
            {},
            5,
            tasks_y,
            TASK_EDGES,
            train_loss=losses.MaskedMultiTaskDistance,
        ),
        LossSpec(
            "m_mmtd_task",
            metrics.MaskedMultiTaskDistance,
            {"per": "task"},
            5,
            tasks_y,
            TASK_EDGES,
            task_weights_2d,
            train_loss=losses.MaskedMultiTaskDistance,
        ),
        LossSpec(
            "m_ce",
            metrics.StableCrossEntropy,
            {"label_smoothing": 0.1},
            3,
            onehot_y,
            SOFTMAX_EDGES,
            train_loss=losses.StableSoftmaxCrossEntropy,
        ),
        LossSpec(
            "m_ce_probs",
            metrics.StableCrossEntropy,
            {"from_logits": False},
            3,
            onehot_y,
            PROB_EDGES,
            train_loss=lambda: losses.StableSoftmaxCrossEntropy(from_logits=False),
        ),
        LossSpec(
            "m_sparse_ce",
            metrics.StableSparseCrossEntropy,
            {"ignore_class": -1},
            3,
            sparse_y,
            SPARSE_EDGES,
            train_loss=lambda: losses.StableSparseSoftmaxCrossEntropy(ignore_class=-1),
        ),
        LossSpec(
            "m_bce",
            metrics.StableBinaryCrossEntropy,
            {"label_smoothing": 0.2},
            2,
            binary_y,
            SIGMOID_EDGES,
            train_loss=losses.StableSigmoidCrossEntropy,
        ),
        LossSpec(
            "m_bce_probs",
            metrics.StableBinaryCrossEntropy,
            {"from_logits": False},
            2,
            binary_y,
            BINARY_PROB_EDGES,
            train_loss=lambda: losses.StableSigmoidCrossEntropy(from_logits=False),
        ),
        LossSpec(
            "m_masked_mse",
            metrics.MaskedMeanSquaredError,
            {},
            5,
            tasks_y,
            REGRESSION_EDGES,
            train_loss=losses.MaskedMeanSquaredError,
        ),
        LossSpec(
            "m_masked_mae",
            metrics.MaskedMeanAbsoluteError,
            {},
            5,
            tasks_y,
            REGRESSION_EDGES,
            example_weights,
            train_loss=losses.MaskedMeanAbsoluteError,
        ),
        LossSpec(
            "m_masked_huber",
            metrics.MaskedHuber,
            {"delta": 0.5},
            5,
            tasks_y,
            REGRESSION_EDGES,
            example_weights,
            train_loss=lambda: losses.MaskedHuber(delta=0.5),
        ),
        LossSpec(
            "m_pearson_rows",
            metrics.StablePearsonCorrelation,
            {"axis": -1},
            3,
            regression_y,
            CORRELATION_EDGES,
            example_weights,
            train_loss=keras.losses.MeanSquaredError,
        ),
        LossSpec(
            "m_pearson_columns",
            metrics.StablePearsonCorrelation,
            {"axis": 0},
            3,
            regression_y,
            CORRELATION_EDGES,
            example_weights,
            train_loss=keras.losses.MeanSquaredError,
        ),
        LossSpec(
            "m_r2",
            metrics.StableR2Score,
            {},
            3,
            regression_y,
            CORRELATION_EDGES,
            example_weights,
            train_loss=keras.losses.MeanSquaredError,
        ),
        LossSpec(
            "m_r2_weighted_adjusted",
            metrics.StableR2Score,
            {"class_aggregation": "variance_weighted_average", "num_regressors": 2},
            3,
            regression_y,
            CORRELATION_EDGES,
            train_loss=keras.losses.MeanSquaredError,
        ),
        LossSpec(
            "m_ctc_infeasible_labels",
            metrics.CTCInfeasibleLabels,
            {},
            CTC_TIME * CTC_CLASSES,
            ctc_labels,
            _ctc_edges(),
            example_weights,
            train_loss=losses.StableCTC,
            model=ctc_model,
            keras_mask=(
                "its Keras mask is per frame (the input lengths): "
                "tests/metrics/test_ctc_infeasible_labels.py::test_the_keras_mask_gives_the_frames"
            ),
        ),
    ]
    return loss_specs + _sequence_and_overlap_specs(), metric_specs


# --- CTC, Dice and Tversky -----------------------------------------------------

CTC_TIME, CTC_CLASSES, CTC_MAX_LABEL = 6, 4, 3
MASKS_OUTPUTS = 6


def ctc_labels(rng, n):
    y = rng.integers(1, CTC_CLASSES, size=(n, CTC_MAX_LABEL)).astype("int32")
    lengths = rng.integers(0, CTC_MAX_LABEL + 1, size=n)
    y[np.arange(CTC_MAX_LABEL)[None, :] >= lengths[:, None]] = 0
    y[0] = [1, 1, 1]  # 3 labels with 2 repeats: 5 frames, feasible in 6
    return y


def ctc_model(masking):
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(CTC_TIME * CTC_CLASSES, name="head")(inputs)
    return keras.Model(inputs, keras.layers.Reshape((CTC_TIME, CTC_CLASSES))(hidden))


def _ctc_edges():
    rng = np.random.default_rng(0)
    big = np.where(rng.normal(size=(1, CTC_TIME, CTC_CLASSES)) > 0, 1e3, -1e3).astype("float32")
    zeros = np.zeros((1, CTC_TIME, CTC_CLASSES), "float32")
    return [
        (np.array([[1, 2, 3]], "int32"), big),
        (np.array([[0, 0, 0]], "int32"), zeros),
        (np.array([[2, 2, 2]], "int32"), zeros),  # 3 + 2 repeats <= 6: feasible
        (np.array([[3, 3, 3]], "int32"), -big),
    ]


def segmentation_masks(rng, n):
    y = (rng.random((n, MASKS_OUTPUTS)) > 0.6).astype("float32")
    y[0] = 0.0  # an image without foreground
    return y


def sigmoid_masks_model(masking):
    return dense_model((4,), MASKS_OUTPUTS, masking, activation="sigmoid", name="head")


def _overlap_edges():
    zeros = np.zeros((1, MASKS_OUTPUTS), "float32")
    ones = np.ones((1, MASKS_OUTPUTS), "float32")
    half = np.full((1, MASKS_OUTPUTS), 0.5, "float32")
    return [(zeros, zeros), (zeros, ones), (ones, zeros), (ones, ones), (half, zeros)]


def _sequence_and_overlap_specs():
    from keras_stable import losses

    return [
        LossSpec(
            "stable_ctc",
            losses.StableCTC,
            {"zero_infinity": True},
            CTC_TIME * CTC_CLASSES,
            ctc_labels,
            _ctc_edges(),
            sample_weight=example_weights,
            model=ctc_model,
            keras_mask=(
                "its Keras mask is per frame (the input lengths): "
                "tests/losses/test_stable_ctc.py::test_keras_mask_gives_the_input_lengths"
            ),
        ),
        LossSpec(
            "stable_dice",
            losses.StableDice,
            {"axis": 1},
            MASKS_OUTPUTS,
            segmentation_masks,
            _overlap_edges(),
            sample_weight=example_weights,
            model=sigmoid_masks_model,
        ),
        LossSpec(
            "stable_tversky",
            losses.StableTversky,
            {"alpha": 0.3, "beta": 0.7, "axis": (1,)},
            MASKS_OUTPUTS,
            segmentation_masks,
            _overlap_edges(),
            sample_weight=example_weights,
            model=sigmoid_masks_model,
        ),
    ]


LOSS_SPECS, METRIC_SPECS = _specs()
ALL_SPECS = LOSS_SPECS + METRIC_SPECS
