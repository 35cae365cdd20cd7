"""The demo (`python -m keras_stable.demo`): traps measured, table, CLI."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import keras
import pytest

from keras_stable import demo
from keras_stable._launch import INSTALL
from keras_stable.demo import backend as demo_backend
from keras_stable.demo import cli
from keras_stable.demo import report
from keras_stable.demo import training
from keras_stable.demo.backend import _RESTARTED
from keras_stable.demo.scenarios import _scenarios

BACKEND = keras.config.backend()
ROOT = Path(__file__).resolve().parents[1]
OTHER_BACKEND = next(b for b in demo_backend.BACKENDS if b != BACKEND)


def _scenario(name):
    return next(s for s in _scenarios() if s["name"] == name)


# -- backend selection ------------------------------------------------------


def test_select_backend_keeps_the_loaded_backend():
    assert demo_backend.select_backend(None) == BACKEND
    assert demo_backend.select_backend(BACKEND) == BACKEND


def test_select_backend_refuses_to_switch_a_loaded_keras():
    with pytest.raises(demo_backend.BackendMismatchError) as info:
        demo_backend.select_backend(OTHER_BACKEND)
    message = str(info.value)
    assert repr(BACKEND) in message and repr(OTHER_BACKEND) in message
    assert f"KERAS_BACKEND={OTHER_BACKEND}" in message


def test_main_from_python_with_another_backend_is_a_clear_error(capsys):
    assert demo.main(["--backend", OTHER_BACKEND, "--steps", "1"]) == 2
    assert "already imported" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--steps", "0"], ["--modes", "fast"], ["--backend", "numpy"]])
def test_bad_arguments_exit_with_usage_error(argv, capsys):
    with pytest.raises(SystemExit) as info:
        demo.main(argv)
    assert info.value.code == 2
    assert "error" in capsys.readouterr().err


def _without_backend(monkeypatch, missing):
    """Makes `importlib.util.find_spec` report the package `missing` absent."""
    find_spec = importlib.util.find_spec

    def fake_find_spec(name, *args, **kwargs):
        if name.split(".")[0] == missing:
            return None
        return find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", fake_find_spec)


def _fail_restart(backend, argv):
    raise AssertionError("a backend that is not installed was restarted")


@pytest.mark.parametrize("from_command_line", [False, True])
def test_backend_not_installed_is_a_one_line_error(from_command_line, monkeypatch, capsys):
    _without_backend(monkeypatch, OTHER_BACKEND)
    # The command-line call must fail before restarting in a fresh process.
    monkeypatch.setattr(cli, "_restart_with_backend", _fail_restart)
    argv = ["--backend", OTHER_BACKEND, "--steps", "1"]
    if from_command_line:
        monkeypatch.setattr(sys, "argv", ["keras-stable-demo", *argv])
        status = demo.main()
    else:
        status = demo.main(argv)
    assert status == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("error: ")
    assert f"`{OTHER_BACKEND}` package, which is not installed" in err
    # An install line that works outside a checkout too (torch: the CPU build).
    assert f"`{INSTALL[OTHER_BACKEND]}`" in err


def test_select_backend_checks_that_the_backend_is_installed(monkeypatch):
    _without_backend(monkeypatch, OTHER_BACKEND)
    with pytest.raises(demo_backend.BackendNotInstalledError, match=OTHER_BACKEND):
        demo_backend.select_backend(OTHER_BACKEND)
    # The loaded backend is installed: no look-up, no error.
    monkeypatch.setattr(demo_backend, "_installed", lambda b: False)
    assert demo_backend.select_backend(BACKEND) == BACKEND


def test_the_demo_package_exports_main_only():
    # Its contract is the command line and `main`; the rest lives in the
    # submodules (backend, scenarios, training, report, cli).
    assert demo.__all__ == ["main"]
    assert demo.main is cli.main


def test_importing_the_demo_runs_nothing():
    # The package must stay importable (doctest collection, --backend)
    # without training or touching the backend.
    package = Path(demo.__file__).parent
    sources = sorted(package.glob("*.py"))
    assert len(sources) > 1
    for path in sources:
        source = path.read_text()
        assert "\nimport keras\n" not in source, path.name
        assert "\nfrom keras import" not in source, path.name
        assert "\nfrom keras." not in source, path.name


# -- the two traps, measured ------------------------------------------------


def _compiled_mode():
    # torch: jit_compile=True is torch.compile, far too slow for a unit test.
    return "eager" if BACKEND == "torch" else "jit"


def test_norm_trap_plain_goes_nan_and_keras_stable_does_not():
    scenario = _scenario("multi-task regression")
    mode = _compiled_mode()
    plain_losses, plain_failure = training.train(scenario, scenario["plain"][1](), mode, steps=2)
    stable_losses, stable_failure = training.train(scenario, scenario["stable"][1](), mode, steps=2)
    assert stable_failure is None
    assert len(stable_losses) == 2
    if BACKEND == "torch":
        # torch's norm backward special-cases 0: the trap stays hidden, and
        # the two formulations compute the same loss.
        assert plain_failure is None
        assert plain_losses == pytest.approx(stable_losses, rel=1e-5)
    else:
        # 29 of 30 columns (8 kernel entries and a bias each) turn NaN.
        assert plain_failure == {
            "step": 1,
            "what": "weights",
            "detail": "261/270",
        }
        assert plain_losses[0] == pytest.approx(stable_losses[0], rel=1e-5)


def test_softmax_trap_plain_goes_nan_and_keras_stable_does_not():
    scenario = _scenario("2-3-2 classifier")
    _, plain_failure = training.train(scenario, scenario["plain"][1](), "eager", steps=2)
    stable_losses, stable_failure = training.train(
        scenario, scenario["stable"][1](), "eager", steps=2
    )
    assert plain_failure is not None and plain_failure["step"] == 1
    assert plain_failure["what"] == "loss"
    assert stable_failure is None
    assert all(0 < value < 1e3 for value in stable_losses)


def test_main_prints_the_table(capsys):
    assert demo.main(["--steps", "1", "--modes", "eager"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "first NaN/inf" in out
    assert "multi-task regression" in out and "2-3-2 classifier" in out
    assert "keras_stable: NaN/inf in 0 of 2 runs" in out
    assert 'MaskedMultiTaskDistance(per="task", squared=True)' in out


# -- table, summary and plot on fixed rows ----------------------------------


def _rows():
    def row(scenario, formulation, mode, losses, failure):
        return {
            "scenario": scenario,
            "doc": "docs/traps/x.md",
            "fix": "loss=Fix()",
            "formulation": formulation,
            "label": formulation,
            "mode": mode,
            "losses": losses,
            "failure": failure,
            "seconds": 0.0,
        }

    nan_weights = {"step": 1, "what": "weights", "detail": "261/270"}
    nan_loss = {"step": 3, "what": "loss", "detail": "NaN"}
    return [
        row("multi-task regression", "plain", "eager", [4.0, 2.0], None),
        row("multi-task regression", "plain", "jit", [4.0], nan_weights),
        row("multi-task regression", "stable", "eager", [4.0, 2.0], None),
        row("multi-task regression", "stable", "jit", [4.0, 2.0], None),
        row("2-3-2 classifier", "plain", "eager", [9.0, 5.0, 1e9], nan_loss),
        row("2-3-2 classifier", "stable", "eager", [9.0, 5.0, 1.0], None),
    ]


def test_table_reports_failures_and_final_losses():
    table = report.format_table(_rows()).splitlines()
    assert table[0].split()[:2] == ["scenario", "formulation"]
    assert "step 1 (261/270 weights NaN)" in table[3]
    assert table[3].rstrip().endswith("nan")  # a failed run ends NaN
    assert "never" in table[4] and table[4].rstrip().endswith("3")
    assert "step 3 (NaN loss)" in table[6]


def test_summary_counts_runs_and_compares_where_plain_is_finite():
    text = " ".join(report.summary(_rows(), "tensorflow").split())
    assert "Plain formulation: NaN/inf in 2 of 3 runs." in text
    assert "keras_stable: NaN/inf in 0 of 3 runs." in text
    assert "relative difference 0.0e+00" in text
    assert "loss=Fix()" in text and "docs/traps/x.md" in text


def test_plot_is_written(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "curves.png"
    report.save_plot(_rows(), str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_is_a_clear_error(monkeypatch, capsys):
    monkeypatch.setattr(cli, "_have_matplotlib", lambda: False)
    assert demo.main(["--plot", "x.png"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ")
    # An install line that works from a wheel as well as from a checkout.
    assert "`pip install matplotlib`" in err
    assert "pip install matplotlib" in err
    assert "keras_stable[plot]" not in err


# -- the command line, in a fresh process -----------------------------------


@pytest.mark.slow
@pytest.mark.tensorflow
def test_command_line_switches_backend_and_plots(tmp_path):
    """`python -m keras_stable.demo --backend jax`, started under TF.

    `python -m keras_stable.demo` defers Keras until `--backend` is read
    (keras_stable._launch), so `--backend jax` wins over KERAS_BACKEND with
    no restart. Run on the TensorFlow CI leg only: one fresh process is
    enough to cover the command line.
    """
    pytest.importorskip("jax")
    pytest.importorskip("matplotlib")
    plot = tmp_path / "curves.png"
    env = dict(os.environ, KERAS_BACKEND="tensorflow")
    env.pop(_RESTARTED, None)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "keras_stable.demo",
            "--backend",
            "jax",
            "--modes",
            "jit",
            "--steps",
            "2",
            "--plot",
            str(plot),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = " ".join(result.stdout.split())
    assert "restarting" not in out
    assert "backend jax" in out
    assert "step 1 (261/270 weights NaN)" in out
    assert "keras_stable: NaN/inf in 0 of 2 runs" in out
    assert plot.exists()
