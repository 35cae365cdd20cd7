"""`keras_stable.callbacks.NaNAudit`: stops at the first non-finite loss or
weight, keeps the batch, the model and the audit report."""

from pathlib import Path

import keras
import numpy as np
import pytest

from keras_stable.audit import cli
from keras_stable.audit import load_batch
from keras_stable.callbacks import NaNAudit
from tests.audit import models

BACKEND = keras.backend.backend()


def _exponential_model():
    model, x, y, loss = models.exponential_head(scale=0.5)
    model.compile(optimizer="sgd", loss=loss)
    return model


def _batches():
    """Two batches of 4: the second one drives `exp` past 88."""
    small = np.full((4, 4), 0.1, "float32")
    large = np.full((4, 4), 60.0, "float32")
    return np.concatenate([small, large]), np.zeros((8, 1), "float32")


def test_stops_at_the_failing_step_and_writes_the_evidence(tmp_path, capsys):
    model = _exponential_model()
    x, y = _batches()
    callback = NaNAudit(tmp_path / "nan", x, y, batch_size=4, modes=["eager"])
    before = [w.copy() for w in model.get_weights()]
    history = model.fit(
        x, y, batch_size=4, epochs=3, shuffle=False, callbacks=[callback], verbose=0
    )
    assert callback.step == 2
    assert len(history.history["loss"]) == 1  # stopped in the first epoch
    printed = capsys.readouterr().out
    assert "NaNAudit: step 2 went non-finite" in printed
    # The table, not only the path of the report.
    assert "exp_overflow" in printed and "1 finding" in printed
    assert f"report in {callback.paths['report']}" in printed
    # The batch of step 2, sliced out of the training arrays.
    saved_x, saved_y = load_batch(callback.paths["batch"])
    np.testing.assert_array_equal(saved_x, x[4:8])
    np.testing.assert_array_equal(saved_y, y[4:8])
    text = Path(callback.paths["report"]).read_text()
    assert "step 2 (epoch 1, batch 1)" in text
    assert "training mode: compiled" in text or "training mode: eager" in text
    assert "weights: restored" in text
    finding = callback.report.findings[0]
    assert (finding.layer, finding.stage, finding.trap) == ("exp", "forward", "exp_overflow")
    # The weights are those before step 2: finite, and step 1 did change them.
    weights = model.get_weights()
    assert all(np.all(np.isfinite(w)) for w in weights)
    assert any(not np.array_equal(a, b) for a, b in zip(before, weights))


def test_the_saved_files_replay_with_the_command_line(tmp_path, capsys):
    model = _exponential_model()
    x, y = _batches()
    callback = NaNAudit(tmp_path, x[4:], y[4:], modes=["eager"], verbose=0)
    model.fit(x[4:], y[4:], batch_size=4, callbacks=[callback], verbose=0)
    assert callback.step == 1
    status = cli.main(
        [callback.paths["model"], "--data", callback.paths["batch"], "--modes", "eager"]
    )
    assert status == 1
    assert "exp_overflow" in capsys.readouterr().out


def test_run_eagerly_is_reported_as_the_eager_mode(tmp_path):
    model = _exponential_model()
    model.compile(optimizer="sgd", loss="mse", run_eagerly=True)
    x, y = _batches()
    callback = NaNAudit(tmp_path, x[4:], y[4:], modes=["eager"], save_model=False, verbose=0)
    model.fit(x[4:], y[4:], batch_size=4, callbacks=[callback], verbose=0)
    assert "training mode: eager (run_eagerly=True)" in Path(callback.paths["report"]).read_text()
    assert "model" not in callback.paths


@pytest.mark.skipif(BACKEND == "torch", reason="torch's norm has a zero gradient at 0: no NaN")
def test_finite_loss_with_nan_weights_is_caught_and_audited(tmp_path):
    """Bug report 1: the loss is finite, the weights are NaN after step 1
    (under XLA on TensorFlow, always on JAX)."""
    model, x, y, loss = models.norm_in_loss()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss, jit_compile=True)
    callback = NaNAudit(tmp_path, x, y, save_model=False, verbose=0)
    history = model.fit(x, y, batch_size=len(y), epochs=2, callbacks=[callback], verbose=0)
    assert callback.step == 1
    assert np.isfinite(history.history["loss"][0])
    text = Path(callback.paths["report"]).read_text()
    assert "non-finite weights after the step" in text
    assert "non-finite loss" not in text
    found = {(f.layer, f.stage, f.trap, f.mode) for f in callback.report.findings}
    assert ("loss", "gradient", "norm_at_zero", "compiled") in found
    assert all(np.all(np.isfinite(w)) for w in model.get_weights())


def test_clean_training_is_left_alone(tmp_path):
    model, x, y, loss = models.exponential_head(scale=0.01)
    model.compile(optimizer="sgd", loss=loss)
    callback = NaNAudit(tmp_path / "unused", x, y, verbose=0)
    history = model.fit(x, y, batch_size=2, epochs=2, callbacks=[callback], verbose=0)
    assert len(history.history["loss"]) == 2
    assert callback.step is None and callback.report is None and not callback.paths
    assert not (tmp_path / "unused").exists()


def test_bad_arguments():
    with pytest.raises(ValueError, match="batch_size"):
        NaNAudit("d", np.zeros((2, 2)), batch_size=0)


class _Unsavable(keras.layers.Layer):
    """A layer whose config cannot be written: `model.save` fails."""

    def call(self, x):
        return x

    def get_config(self):
        raise NotImplementedError("this layer has no config\nsecond line of the reason")


def test_a_model_that_cannot_be_saved_or_audited_is_reported_whole(tmp_path, monkeypatch):
    # The save fails: no half-written `.keras` file is left behind and the
    # note keeps the whole message. The audit fails (as on a model whose
    # loss lives in a custom `train_step`): the report says why and what to
    # do, `audit_error` holds it, and training still stops cleanly.
    from keras_stable.callbacks import nan_audit

    inputs = keras.Input((4,))
    outputs = keras.layers.Dense(1, kernel_initializer="ones", name="exp_out")(_Unsavable()(inputs))
    model = keras.Model(inputs, keras.layers.Lambda(keras.ops.exp, name="exp")(outputs))
    model.compile(optimizer="sgd", loss="mse")
    x = np.full((8, 4), 60.0, "float32")  # exp(240) overflows at the first step
    y = np.zeros((8, 1), "float32")

    def failing_audit(*args, **kwargs):
        raise RuntimeError("the model's loss is computed in train_step")

    monkeypatch.setattr(nan_audit, "audit", failing_audit)
    callback = NaNAudit(tmp_path / "nan", modes=["eager"], verbose=0)
    model.fit(x, y, batch_size=4, epochs=2, shuffle=False, callbacks=[callback], verbose=0)
    assert callback.step is not None
    assert "model" not in callback.paths
    assert not list((tmp_path / "nan").glob("*.keras"))
    text = Path(callback.paths["report"]).read_text()
    assert "this layer has no config second line of the reason" in text
    assert callback.report is None
    assert "custom `train_step`" in callback.audit_error
    assert callback.audit_error in text
