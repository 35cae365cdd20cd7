"""`LossScaleMonitor`: the loss scale and the skipped steps in the logs."""

import keras
import numpy as np
import pytest

from keras_stable.callbacks import LossScaleMonitor


def _mixed_model(kernel=1.0):
    keras.config.set_dtype_policy("mixed_float16")
    try:
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, name="dense")])
    finally:
        keras.config.set_dtype_policy("float32")
    model.get_layer("dense").set_weights(
        [np.full((2, 1), kernel, "float32"), np.zeros(1, "float32")]
    )
    model.compile(optimizer=keras.optimizers.SGD(1e-6), loss="mse")
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    return model


def test_clean_training_logs_the_scale_and_no_skipped_step():
    model = _mixed_model()
    x, y = np.ones((8, 2), "float32"), np.full((8, 1), 2.01, "float32")
    history = model.fit(x, y, batch_size=4, epochs=2, verbose=0, callbacks=[LossScaleMonitor()])
    assert history.history["skipped_steps"] == [0, 0]
    assert history.history["loss_scale"] == [2.0**15, 2.0**15]


def test_skipped_steps_are_counted_and_warned():
    # Error 100 per output: the scaled gradient 2 * 100 * x * 2**15 / 4 is
    # past 65504 in float16, so each step is skipped and the scale halves.
    model = _mixed_model()
    x, y = np.ones((8, 2), "float32"), np.full((8, 1), 102.0, "float32")
    with pytest.warns(UserWarning, match="skipped 2 of 2 steps"):
        history = model.fit(x, y, batch_size=4, verbose=0, callbacks=[LossScaleMonitor()])
    assert history.history["skipped_steps"] == [2]
    assert history.history["loss_scale"] == [2.0**13]


def test_without_a_loss_scale_optimizer_it_warns_once():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    with pytest.warns(UserWarning, match="not a LossScaleOptimizer"):
        history = model.fit(
            np.ones((4, 2)), np.ones((4, 1)), verbose=0, callbacks=[LossScaleMonitor()]
        )
    assert "loss_scale" not in history.history
