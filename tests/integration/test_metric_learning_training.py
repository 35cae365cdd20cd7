"""Embedding models with duplicated points train finite with every
metric-learning loss, compiled (`jit_compile=True` on TensorFlow and JAX;
torch runs eagerly).

A quarter of the points are exact copies of others, so the batches hold
zero distances off the diagonal: the point where a distance built on
`keras.ops.cdist` or `keras.ops.norm` has a NaN gradient (checked below on
the same data, for contrast).
"""

import keras
import numpy as np
import pytest

from keras_stable import layers
from keras_stable import losses
from tests.backend_utils import BACKEND
from tests.backend_utils import to_numpy

JIT = BACKEND in ("tensorflow", "jax")
DIM = 8


def _clusters(n=48, classes=4, seed=0):
    """Labelled clusters; 25% of the points are copies of their neighbour."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n).astype("int32")
    centres = rng.normal(size=(classes, DIM)) * 2.0
    x = (centres[labels] + rng.normal(size=(n, DIM))).astype("float32")
    copies = np.arange(1, n, 4)  # every fourth point duplicates the one before
    x[copies] = x[copies - 1]
    labels[copies] = labels[copies - 1]
    return x, labels


def _encoder(seed=0):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.layers.Dense(16, activation="relu"), keras.layers.Dense(4)])


def _all_finite(model):
    return all(np.all(np.isfinite(to_numpy(w.value))) for w in model.weights)


def _fit(model, loss, x, y, epochs=4):
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=loss, jit_compile=JIT)
    history = model.fit(x, y, batch_size=16, epochs=epochs, shuffle=False, verbose=0)
    return history.history["loss"]


@pytest.mark.parametrize(
    "loss",
    [
        losses.TripletSemiHardLoss(margin=0.5),
        losses.TripletSemiHardLoss(distance_metric="squared-L2"),
        losses.TripletHardLoss(margin=0.5, distance_metric="angular"),
        losses.TripletHardLoss(soft=True),
    ],
    ids=["semihard_l2", "semihard_squared", "hard_angular", "hard_soft"],
)
def test_triplet_losses_train_finite_on_duplicated_points(loss):
    x, labels = _clusters()
    inputs = keras.Input((DIM,))
    model = keras.Model(inputs, _encoder()(inputs))
    history = _fit(model, loss, x, labels)
    assert np.all(np.isfinite(history)), history
    assert _all_finite(model)
    assert history[-1] < history[0], history


def test_cdist_batch_hard_loss_goes_nan_on_the_same_data():
    x, labels = _clusters()

    def cdist_batch_hard(y_true, y_pred):
        y_true = keras.ops.reshape(keras.ops.cast(y_true, "int32"), (-1,))
        same = keras.ops.equal(y_true[:, None], y_true[None, :])
        d = keras.ops.cdist(y_pred, y_pred)
        positive = keras.ops.max(keras.ops.where(same, d, 0.0), axis=1)
        negative = keras.ops.min(keras.ops.where(same, 1e9, d), axis=1)
        return keras.ops.mean(keras.ops.relu(positive - negative + 0.5))

    inputs = keras.Input((DIM,))
    model = keras.Model(inputs, _encoder()(inputs))
    _fit(model, cdist_batch_hard, x, labels, epochs=1)
    assert not _all_finite(model)


def test_contrastive_loss_trains_finite_on_identical_pairs():
    x, labels = _clusters()
    rng = np.random.default_rng(1)
    partner = rng.permutation(len(x))
    partner[::4] = np.arange(0, len(x), 4)  # identical pairs: distance 0
    similar = (labels == labels[partner]).astype("int32")
    encoder = _encoder()
    a, b = keras.Input((DIM,)), keras.Input((DIM,))
    diff = keras.layers.Subtract()([encoder(a), encoder(b)])
    model = keras.Model([a, b], layers.SafeNorm(axis=-1)(diff))
    history = _fit(model, losses.ContrastiveLoss(margin=1.0), [x, x[partner]], similar)
    assert np.all(np.isfinite(history)), history
    assert _all_finite(model)
    assert history[-1] < history[0], history


class _ViewsFirst(keras.layers.Layer):
    """`(batch, 2, dim)` -> `(2, batch, dim)`: InfoNCE's stacked views."""

    def call(self, inputs):
        return keras.ops.transpose(inputs, (1, 0, 2))

    def compute_output_shape(self, input_shape):
        return (input_shape[1], input_shape[0], input_shape[2])


def test_info_nce_trains_finite_on_duplicated_points():
    x, _ = _clusters()
    rng = np.random.default_rng(2)
    views = np.stack([x, x + 0.1 * rng.normal(size=x.shape)], axis=1).astype("float32")
    views[::4, 1] = views[::4, 0]  # identical views
    inputs = keras.Input((2, DIM))
    model = keras.Model(inputs, _ViewsFirst()(_encoder()(inputs)))
    history = _fit(model, losses.InfoNCELoss(temperature=0.1), views, np.zeros(len(x), "float32"))
    assert np.all(np.isfinite(history)), history
    assert _all_finite(model)
    assert history[-1] < history[0], history
