"""Keras masks in every loss and metric: Keras's numbers on padded batches.

A token-tagging model (`Embedding(mask_zero=True)` -> `Dense`) carries a
`(batch, time)` mask on its output. `keras.losses.Loss` and Keras's mean
metrics read it: padded steps count for nothing in the value, the mean's
denominator and the gradient. Each keras_stable class with a Keras
counterpart must give Keras's number there (eagerly, and through
`evaluate`, compiled where the backend compiles), and changing only the
labels of padded steps must leave the weights after a `fit` step
bit-identical.
"""

import keras
import numpy as np
import pytest

import keras_stable
from keras_stable.common.reduction import reduce_losses
from tests.backend_utils import BACKEND
from tests.backend_utils import to_numpy

JIT = BACKEND in ("tensorflow", "jax")
CLASSES = 4
X = np.array([[3, 1, 4, 0, 0, 0], [5, 9, 2, 6, 5, 0], [7, 0, 0, 0, 0, 0]], "int32")
PAD = X == 0
SAMPLE_WEIGHT = np.array([1.0, 0.5, 2.0], "float32")
# Keras's losses cannot combine a `(batch,)` sample weight with a
# `(batch, time)` mask (they broadcast from the right and raise); per-step
# weights are the Keras way for sequences.
STEP_WEIGHT = np.linspace(0.5, 2.0, X.size, dtype="float32").reshape(X.shape)


def _tagger(seed=0):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((X.shape[1],), dtype="int32")
    h = keras.layers.Embedding(10, 8, mask_zero=True)(inputs)
    out = keras.layers.Dense(CLASSES, name="head")(h)
    return keras.Model(inputs, out)


def _labels(kind, seed=1):
    rng = np.random.default_rng(seed)
    sparse = rng.integers(0, CLASSES, X.shape).astype("int32")
    if kind == "sparse":
        return sparse
    if kind == "onehot":
        return np.eye(CLASSES, dtype="float32")[sparse]
    return rng.integers(0, 2, X.shape + (CLASSES,)).astype("float32")


# (id, keras loss, keras_stable loss, label kind)
LOSS_PAIRS = [
    (
        "sparse",
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        keras_stable.losses.StableSparseSoftmaxCrossEntropy(),
        "sparse",
    ),
    (
        "sparse_ignore",
        keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=2),
        keras_stable.losses.StableSparseSoftmaxCrossEntropy(ignore_class=2),
        "sparse",
    ),
    (
        "categorical",
        keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1),
        keras_stable.losses.StableSoftmaxCrossEntropy(label_smoothing=0.1),
        "onehot",
    ),
    (
        "binary",
        keras.losses.BinaryCrossentropy(from_logits=True),
        keras_stable.losses.StableSigmoidCrossEntropy(),
        "binary",
    ),
    (
        "sum",
        keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum"),
        keras_stable.losses.StableSparseSoftmaxCrossEntropy(reduction="sum"),
        "sparse",
    ),
    (
        "mean_sw",
        keras.losses.CategoricalCrossentropy(from_logits=True, reduction="mean_with_sample_weight"),
        keras_stable.losses.StableSoftmaxCrossEntropy(reduction="mean_with_sample_weight"),
        "onehot",
    ),
    (
        "none",
        keras.losses.BinaryCrossentropy(from_logits=True, reduction="none"),
        keras_stable.losses.StableSigmoidCrossEntropy(reduction="none"),
        "binary",
    ),
]

# (id, a fresh Keras metric, keras_stable class, its kwargs, label kind):
# metrics are stateful, so each test builds its own.
METRIC_PAIRS = [
    (
        "sparse",
        lambda: keras.metrics.SparseCategoricalCrossentropy(from_logits=True),
        keras_stable.metrics.StableSparseCrossEntropy,
        {},
        "sparse",
    ),
    (
        "categorical",
        lambda: keras.metrics.CategoricalCrossentropy(from_logits=True, label_smoothing=0.2),
        keras_stable.metrics.StableCrossEntropy,
        {"label_smoothing": 0.2},
        "onehot",
    ),
    (
        "binary",
        lambda: keras.metrics.BinaryCrossentropy(from_logits=True),
        keras_stable.metrics.StableBinaryCrossEntropy,
        {},
        "binary",
    ),
]


def _ids(pairs):
    return [p[0] for p in pairs]


@pytest.mark.parametrize("weights", [None, "sample"], ids=["no_sw", "sw"])
@pytest.mark.parametrize("pair", LOSS_PAIRS, ids=_ids(LOSS_PAIRS))
def test_loss_matches_keras_on_a_padded_batch(pair, weights):
    _, keras_loss, stable_loss, kind = pair
    y = _labels(kind)
    sw = STEP_WEIGHT if weights else None
    y_pred = _tagger()(X)
    expected = to_numpy(keras_loss(y, y_pred, sample_weight=sw))
    got = to_numpy(stable_loss(y, y_pred, sample_weight=sw))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    # Padding changes the number: the mask was read, not ignored.
    unmasked = to_numpy(
        stable_loss(y, keras.ops.convert_to_tensor(to_numpy(y_pred), "float32"), sample_weight=sw)
    )
    assert not np.allclose(unmasked, got)


@pytest.mark.parametrize("pair", METRIC_PAIRS, ids=_ids(METRIC_PAIRS))
def test_metric_matches_keras_on_padded_batches(pair):
    _, make_keras_metric, cls, kwargs, kind = pair
    keras_metric, ours = make_keras_metric(), cls(**kwargs)
    model = _tagger()
    for seed in (1, 2):  # two batches: streaming state, not a mean of means
        y = _labels(kind, seed)
        y_pred = model(X)
        keras_metric.update_state(y, y_pred, sample_weight=STEP_WEIGHT)
        ours.update_state(y, y_pred, sample_weight=STEP_WEIGHT)
    np.testing.assert_allclose(to_numpy(ours.result()), to_numpy(keras_metric.result()), rtol=1e-5)


@pytest.mark.parametrize("pair", METRIC_PAIRS, ids=_ids(METRIC_PAIRS))
def test_compiled_evaluate_matches_keras(pair):
    """`evaluate` (compiled on TF and JAX) gives Keras's loss and metric."""
    _, make_keras_metric, cls, kwargs, kind = pair
    keras_loss = {
        "sparse": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        "categorical": keras.losses.CategoricalCrossentropy(from_logits=True),
        "binary": keras.losses.BinaryCrossentropy(from_logits=True),
    }[pair[0]]
    stable_loss = {
        "sparse": keras_stable.losses.StableSparseSoftmaxCrossEntropy(),
        "categorical": keras_stable.losses.StableSoftmaxCrossEntropy(),
        "binary": keras_stable.losses.StableSigmoidCrossEntropy(),
    }[pair[0]]
    y = _labels(kind)
    results = []
    for loss, metric in ((keras_loss, make_keras_metric()), (stable_loss, cls(**kwargs))):
        model = _tagger()
        model.compile(loss=loss, metrics=[metric], jit_compile=JIT)
        out = model.evaluate(X, y, sample_weight=STEP_WEIGHT, batch_size=3, verbose=0)
        results.append(np.asarray(out))
    np.testing.assert_allclose(results[1], results[0], rtol=1e-5)


@pytest.mark.parametrize("pair", LOSS_PAIRS[:4], ids=_ids(LOSS_PAIRS[:4]))
def test_padded_labels_do_not_move_the_weights(pair):
    """Only the labels of padded steps differ: the weights after one fit
    step are bit-identical."""
    _, _, stable_loss, kind = pair
    y = _labels(kind)
    other = _labels(kind, seed=7)
    y_changed = np.where(PAD.reshape(PAD.shape + (1,) * (y.ndim - 2)), other, y)
    assert not np.array_equal(y, y_changed)
    weights = []
    for labels in (y, y_changed):
        model = _tagger()
        model.compile(optimizer=keras.optimizers.SGD(0.5), loss=stable_loss, jit_compile=JIT)
        model.fit(X, labels, batch_size=3, epochs=1, verbose=0, shuffle=False)
        weights.append([to_numpy(w.value) for w in model.weights])
    for a, b in zip(*weights):
        np.testing.assert_array_equal(a, b)


def test_multi_task_distance_skips_masked_samples():
    """A `Masking` layer masks whole samples of a multi-task regression."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((3,))
    h = keras.layers.Masking(0.0)(inputs)
    out = keras.layers.Dense(2)(h)
    model = keras.Model(inputs, out)
    x = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0], [4.0, 5.0, 6.0]], "float32")
    y = np.array([[1.0, np.nan], [100.0, 100.0], [0.0, 1.0]], "float32")
    y_pred = model(x)
    plain = to_numpy(y_pred)
    for cls in (
        keras_stable.losses.MaskedMultiTaskDistance,
        keras_stable.metrics.MaskedMultiTaskDistance,
    ):
        for per in ("sample", "task"):
            obj = cls(per=per)
            kept = [0, 2]
            if isinstance(obj, keras.metrics.Metric):
                obj.update_state(y, y_pred)
                got = to_numpy(obj.result())
                ref = cls(per=per)
                ref.update_state(y[kept], plain[kept])
                expected = to_numpy(ref.result())
            else:
                got = to_numpy(obj(y, y_pred))
                expected = to_numpy(obj(y[kept], plain[kept]))
            np.testing.assert_allclose(
                got, expected, rtol=1e-6, err_msg=f"{cls.__module__} per={per}"
            )


def test_batch_weights_align_on_the_leading_axis():
    """A `(batch,)` weight with a `(batch, time)` mask weights each example
    (Keras raises here): the same as the weight repeated along time."""
    loss = keras_stable.losses.StableSparseSoftmaxCrossEntropy()
    y = _labels("sparse")
    y_pred = _tagger()(X)
    repeated = np.repeat(SAMPLE_WEIGHT[:, None], X.shape[1], axis=1)
    np.testing.assert_allclose(
        to_numpy(loss(y, y_pred, sample_weight=SAMPLE_WEIGHT)),
        to_numpy(loss(y, y_pred, sample_weight=repeated)),
        rtol=1e-6,
    )


def test_single_task_labels_against_one_output():
    loss = keras_stable.losses.MaskedMultiTaskDistance()
    y = np.array([1.0, np.nan, 3.0], "float32")
    y_pred = np.array([[0.0], [5.0], [1.0]], "float32")
    np.testing.assert_allclose(to_numpy(loss(y, y_pred)), to_numpy(loss(y[:, None], y_pred)))


def test_a_mask_that_does_not_match_is_an_error():
    values = keras.ops.ones((3, 6))
    with pytest.raises(ValueError, match=r"`mask` of shape \(3, 5\)"):
        reduce_losses(values, mask=np.ones((3, 5), bool))
