"""`python -m keras_stable.audit MODEL.keras --data BATCH.npz`: the table,
and the exit status: 0 clean, 1 a trap found, 2 bad input (one line on
stderr, no traceback)."""

import os
import subprocess
import sys
import warnings
from pathlib import Path

import keras
import numpy as np

from keras_stable.audit import cli
from keras_stable.audit import save_batch
from tests.audit import models

BACKEND = keras.backend.backend()
ROOT = Path(__file__).resolve().parents[2]


def _save(tmp_path, scale=50.0, compile_loss=True, name="model"):
    model, x, y, loss = models.exponential_head(scale)
    if compile_loss:
        model.compile(optimizer="sgd", loss=loss)
    model_path = tmp_path / f"{name}.keras"
    data_path = tmp_path / f"{name}.npz"
    model.save(model_path)
    save_batch(data_path, x, y)
    return str(model_path), str(data_path)


def _main(capsys, *argv):
    status = cli.main([*argv, "--modes", "eager"])
    out, err = capsys.readouterr()
    return status, out, err


def test_a_trap_prints_the_table_and_exits_1(tmp_path, capsys):
    model_path, data_path = _save(tmp_path)
    status, out, err = _main(capsys, model_path, "--data", data_path)
    assert status == 1, err
    assert "exp" in out and "forward" in out and "exp_overflow" in out
    assert out.splitlines()[0].startswith(f"keras_stable audit on {BACKEND}: 1 finding")


def test_a_clean_model_exits_0(tmp_path, capsys):
    model_path, data_path = _save(tmp_path, scale=0.01)
    status, out, _ = _main(capsys, model_path, "--data", data_path, "--stress", "zeros,coincident")
    assert status == 0
    assert "no NaN or inf" in out and "probes: zeros, coincident" in out


def test_labels_without_a_compiled_loss_are_ignored_with_a_note(tmp_path, capsys):
    model_path, data_path = _save(tmp_path, scale=0.01, compile_loss=False)
    status, out, _ = _main(capsys, model_path, "--data", data_path)
    assert status == 0
    assert "no compiled loss" in out


def _bad_input(capsys, *argv):
    status, out, err = _main(capsys, *argv)
    assert status == 2
    assert not out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("python -m keras_stable.audit: error: "), err
    assert "Traceback" not in err
    return lines[0]


def test_bad_inputs_exit_2_with_one_line(tmp_path, capsys):
    model_path, data_path = _save(tmp_path)
    assert "no such model file" in _bad_input(
        capsys, str(tmp_path / "missing.keras"), "--data", data_path
    )
    assert "not a .keras file" in _bad_input(capsys, data_path, "--data", data_path)
    corrupt = tmp_path / "corrupt.keras"
    corrupt.write_bytes(b"not a zip file")
    assert "cannot load the model" in _bad_input(capsys, str(corrupt), "--data", data_path)
    assert "cannot read the batch" in _bad_input(
        capsys, model_path, "--data", str(tmp_path / "no.npz")
    )
    no_x = tmp_path / "no_x.npz"
    np.savez(no_x, y=np.zeros(3))
    assert "holds no `x`" in _bad_input(capsys, model_path, "--data", str(no_x))
    wrong = tmp_path / "wrong.npz"
    save_batch(wrong, np.ones((4, 7), "float32"))
    assert "expects shape (None, 4)" in _bad_input(capsys, model_path, "--data", str(wrong))
    assert "unknown probe" in _bad_input(
        capsys, model_path, "--data", data_path, "--stress", "bogus"
    )


def test_a_lambda_model_needs_unsafe(tmp_path, capsys):
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Lambda(lambda t: t * 2.0)(inputs))
    path = tmp_path / "lambda.keras"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Keras may warn that a lambda is saved
        model.save(path)
    save_batch(tmp_path / "b.npz", np.ones((2, 4), "float32"))
    assert "--unsafe" in _bad_input(capsys, str(path), "--data", str(tmp_path / "b.npz"))
    status, out, _ = _main(capsys, str(path), "--data", str(tmp_path / "b.npz"), "--unsafe")
    assert status == 0 and "no NaN or inf" in out


def test_backend_switch_restarts_without_the_option(tmp_path, monkeypatch):
    other = next(b for b in cli.BACKENDS if b != BACKEND)
    calls = []
    monkeypatch.setattr(cli, "_restart", lambda backend, argv: calls.append((backend, argv)) or 0)
    assert cli.main(["m.keras", "--data", "b.npz", "--backend", other]) == 0
    assert calls == [(other, ["m.keras", "--data", "b.npz"])]


def _command(*argv):
    env = dict(os.environ, KERAS_BACKEND=BACKEND, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run(
        [sys.executable, "-m", "keras_stable.audit", *argv, "--modes", "eager"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_python_dash_m_exit_statuses(tmp_path):
    model_path, data_path = _save(tmp_path)
    found = _command(model_path, "--data", data_path)
    assert found.returncode == 1, found.stderr[-2000:]
    assert "exp_overflow" in found.stdout
    bad = _command(str(tmp_path / "missing.keras"), "--data", data_path)
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr
    assert "error: no such model file" in bad.stderr


def test_precision_flag(tmp_path, capsys):
    model, x, _, _ = models.reaches_1e5()
    model.save(tmp_path / "big.keras")
    save_batch(tmp_path / "big.npz", x)
    argv = [str(tmp_path / "big.keras"), "--data", str(tmp_path / "big.npz")]
    status, out, err = _main(capsys, *argv, "--precision", "mixed_float16")
    assert status == 1, err
    assert "half_overflow" in out and "headroom" in out
    status, out, _ = _main(capsys, *argv)
    assert status == 0


_CUSTOM_MODULE = """
import keras


@keras.saving.register_keras_serializable(package="{package}")
class Doubler(keras.layers.Layer):
    def call(self, inputs):
        return inputs * 2.0


@keras.saving.register_keras_serializable(package="{package}")
def tail_loss(y_true, y_pred):
    return keras.ops.mean(keras.ops.square(y_true - y_pred), axis=-1)
"""


def _custom_model(tmp_path, monkeypatch, custom_layer):
    """A model saved with a custom module, which is then forgotten (as in a
    fresh process that has not imported it): its objects are unregistered."""
    package = f"audit_cli_{tmp_path.name}"
    name = f"{package}_objects"
    (tmp_path / f"{name}.py").write_text(_CUSTOM_MODULE.format(package=package))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = __import__(name)
    inputs = keras.Input((4,))
    hidden = module.Doubler()(inputs) if custom_layer else keras.layers.Dense(3)(inputs)
    model = keras.Model(inputs, keras.layers.Dense(2)(hidden))
    model.compile(optimizer="sgd", loss=module.tail_loss)
    model.save(tmp_path / "custom.keras")
    save_batch(tmp_path / "custom.npz", np.ones((3, 4), "float32"), np.zeros((3, 2), "float32"))
    registry = keras.saving.get_custom_objects()
    for key in [key for key in registry if key.startswith(f"{package}>")]:
        monkeypatch.delitem(registry, key)
    monkeypatch.delitem(sys.modules, name)
    return name


def test_an_unregistered_custom_layer_says_import_and_loads_with_it(tmp_path, capsys, monkeypatch):
    name = _custom_model(tmp_path, monkeypatch, custom_layer=True)
    line = _bad_input(capsys, "custom.keras", "--data", "custom.npz")
    assert "cannot load the model" in line and "--import MODULE" in line
    status, out, err = _main(capsys, "custom.keras", "--data", "custom.npz", "--import", name)
    assert status == 0, err
    assert "no NaN or inf" in out
    assert "--import bogus_module" in _bad_input(
        capsys, "custom.keras", "--data", "custom.npz", "--import", "bogus_module"
    )


def test_a_compiled_loss_that_cannot_be_restored_exits_2(tmp_path, capsys, monkeypatch):
    name = _custom_model(tmp_path, monkeypatch, custom_layer=False)
    line = _bad_input(capsys, "custom.keras", "--data", "custom.npz")
    assert "compiled loss" in line and "--import MODULE" in line and "--loss" in line
    # Either way of naming the loss runs the audit.
    status, out, err = _main(capsys, "custom.keras", "--data", "custom.npz", "--import", name)
    assert status == 0, err
    assert "no NaN or inf" in out
    status, out, err = _main(
        capsys, "custom.keras", "--data", "custom.npz", "--loss", f"{name}:tail_loss"
    )
    assert status == 0, err
