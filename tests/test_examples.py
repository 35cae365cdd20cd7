"""Runs every script in examples/ in a fresh process.

Marked `examples` and `slow` (deselect with `-m "not examples"`). The
scripts are backend-agnostic, but they run only on the TensorFlow leg of CI:
one backend is enough to keep them working, and TensorFlow is the one where
`save_load_export.py` also exercises the SavedModel export. Run them on
another backend by hand: `KERAS_BACKEND=jax python examples/<script>.py`.
"""

import os
import subprocess
import sys
from pathlib import Path

import keras
import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
# Runs on the JAX leg: its 32768-key step takes about 40 s there and three
# minutes under TF's XLA on this CI's two cores.
ON_JAX = {"attention_long_sequence.py"}


def _examples(on_jax):
    """`pytest.param`s of the scripts that run on the JAX leg (or not)."""
    return [pytest.param(p, id=p.stem) for p in EXAMPLES if (p.name in ON_JAX) == on_jax]


@pytest.fixture(autouse=True)
def _reset_keras_state():
    """Overrides conftest's reset: the examples run in their own process."""
    yield


def test_there_are_examples():
    names = {path.name for path in EXAMPLES}
    assert {
        "multitask_missing_labels.py",
        "migrate_handwritten_softmax.py",
        "mixed_precision.py",
        "save_load_export.py",
        "masked_classes.py",
    } <= names


def _run(script):
    env = dict(os.environ, KERAS_BACKEND=keras.config.backend())
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert result.stdout.strip().splitlines()[-1] == "ok", output


@pytest.mark.examples
@pytest.mark.slow
@pytest.mark.tensorflow
@pytest.mark.parametrize("script", _examples(on_jax=False))
def test_example_runs(script):
    _run(script)


@pytest.mark.examples
@pytest.mark.slow
@pytest.mark.jax
@pytest.mark.parametrize("script", _examples(on_jax=True))
def test_example_runs_on_jax(script):
    _run(script)


def test_examples_are_documented():
    page = (ROOT / "docs" / "examples.md").read_text()
    for path in EXAMPLES:
        assert f"examples/{path.name}" in page, path.name
