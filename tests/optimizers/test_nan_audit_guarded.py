"""`NaNAudit` with a `Guarded` optimizer: skipped steps do not stop training."""

import os

import keras
import numpy as np
import pytest

from keras_stable.callbacks import NaNAudit
from keras_stable.optimizers import Guarded

RNG = np.random.default_rng(0)
X = RNG.normal(size=(32, 3)).astype("float32")
Y = RNG.normal(size=(32, 1)).astype("float32")


def _model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=Guarded("adam"), loss="mse")
    return model


def test_training_goes_on_past_a_skipped_step(tmp_path):
    y = Y.copy()
    y[2 * 8 + 1] = np.nan  # the third batch of four
    model = _model()
    callback = NaNAudit(str(tmp_path), modes=["eager"], verbose=0)
    history = model.fit(
        X, y, batch_size=8, epochs=2, shuffle=False, verbose=0, callbacks=[callback]
    )
    assert history.history["skipped_steps"] == [1, 1]
    assert len(history.history["loss"]) == 2
    assert callback.step is None and callback.skipped_step == 3
    assert os.path.exists(tmp_path / "skipped_step3.npz")
    report = (tmp_path / "skipped_step3.txt").read_text()
    assert "skipped" in report
    saved = np.load(tmp_path / "skipped_step3.npz")
    assert np.isnan(saved[[k for k in saved.files if k.startswith("y")][0]]).any()
    assert all(np.all(np.isfinite(w)) for w in model.get_weights())
    assert int(keras.ops.convert_to_numpy(model.optimizer.skipped_steps)) == 2


def test_stops_after_max_consecutive_skips(tmp_path):
    y = np.full_like(Y, np.nan)
    model = _model()
    callback = NaNAudit(
        str(tmp_path), modes=["eager"], verbose=0, max_consecutive_skips=2, save_model=False
    )
    model.fit(X, y, batch_size=4, epochs=1, shuffle=False, verbose=0, callbacks=[callback])
    assert callback.skipped_step == 1 and callback.step == 2
    assert int(keras.ops.convert_to_numpy(model.optimizer.skipped_steps)) == 2


def test_max_consecutive_skips_is_checked():
    with pytest.raises(ValueError, match="`max_consecutive_skips`"):
        NaNAudit(max_consecutive_skips=0)
