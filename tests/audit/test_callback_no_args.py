"""`NaNAudit()` with no argument: the batch the failing step trained on,
whatever the input pipeline, and the model from before that step."""

import os

import keras
import numpy as np
import pytest

from keras_stable.audit import load_batch
from keras_stable.callbacks import NaNAudit
from tests.audit import models

BACKEND = keras.backend.backend()
N, BATCH, POISON = 32, 4, 60.0


def _data():
    rng = np.random.default_rng(21)
    x = np.full((N, 4), 0.01, "float32")
    index = int(rng.integers(N))
    x[index] = POISON  # exp(50 * 4 * 60) overflows; every other sample is tiny
    return x, np.zeros((N, 1), "float32"), index


def _model():
    model, _, _, loss = models.exponential_head(scale=0.5)
    model.compile(optimizer="sgd", loss=loss)
    return model


class _Sequence(keras.utils.PyDataset):
    def __init__(self, x, y):
        super().__init__()
        self.x, self.y = x, y

    def __len__(self):
        return N // BATCH

    def __getitem__(self, i):
        order = np.random.default_rng(i).permutation(N)[i * BATCH : (i + 1) * BATCH]
        # A permutation per batch: the sample lands where the test cannot guess.
        return self.x[order], self.y[order]


def _pipelines(x, y):
    def generator():
        for start in range(0, N, BATCH):
            yield x[start : start + BATCH], y[start : start + BATCH]

    runs = {
        "shuffled_arrays": lambda m, cb: m.fit(
            x, y, batch_size=BATCH, shuffle=True, callbacks=[cb], verbose=0
        ),
        "generator": lambda m, cb: m.fit(
            generator(), steps_per_epoch=N // BATCH, shuffle=False, callbacks=[cb], verbose=0
        ),
    }
    if BACKEND == "tensorflow":
        import tensorflow as tf

        dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(N, seed=3).batch(BATCH)
        runs["tf_data"] = lambda m, cb: m.fit(dataset, shuffle=False, callbacks=[cb], verbose=0)
    return runs


@pytest.mark.parametrize("pipeline", ["shuffled_arrays", "generator", "tf_data", "py_dataset"])
def test_saves_the_batch_the_step_trained_on(tmp_path, pipeline):
    x, y, index = _data()
    if pipeline == "py_dataset":
        run = lambda m, cb: m.fit(_Sequence(x, y), shuffle=False, callbacks=[cb], verbose=0)  # noqa: E731
    else:
        runs = _pipelines(x, y)
        if pipeline not in runs:
            pytest.skip("tf.data on TensorFlow only")
        run = runs[pipeline]
    model = _model()
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        callback = NaNAudit(modes=["eager"], verbose=0)
        run(model, callback)
    finally:
        os.chdir(cwd)
    assert callback.step is not None
    saved_x, saved_y = load_batch(tmp_path / callback.paths["batch"])
    assert saved_x.shape == (BATCH, 4)
    assert np.any(np.all(saved_x == POISON, axis=-1)), "the poisoned sample is in the batch"
    assert callback.report.findings[0].trap == "exp_overflow"
    # The saved model (from before the step) reproduces the NaN on the batch.
    loaded = keras.saving.load_model(tmp_path / callback.paths["model"])
    loss = loaded.compute_loss(x=saved_x, y=saved_y, y_pred=loaded(saved_x))
    assert not np.isfinite(float(keras.ops.convert_to_numpy(loss)))
    assert model.train_function is not None  # put back after fit
    del index
