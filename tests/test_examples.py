"""Runs every script in examples/ in a fresh process.

Marked `examples` and `slow` (deselect with `-m "not examples"`). The
scripts are backend-agnostic; each runs on one leg of CI, which is enough to
keep it working: the torch leg (the shortest: 8-11 s a script there, 12-46 s
under TF), but `save_load_export.py` on TensorFlow (where it also exercises
the SavedModel export) and `attention_long_sequence.py` on JAX (XLA's
memory plan is its point; its step runs over 4096 keys here, the plans at
32768). Run them on another backend by hand:
`KERAS_BACKEND=jax python examples/<script>.py`.
"""

import os
import subprocess
import sys
from pathlib import Path

import keras
import pytest

from tests.backend_utils import import_keras_hub

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))
# The leg each script runs on (torch when not named here).
LEG = {"attention_long_sequence.py": "jax", "save_load_export.py": "tensorflow"}
# Command-line arguments of a script's run here: the long-sequence step over
# 4096 keys (the blockwise path still; XLA's plans are checked at 32768)
# takes seconds, where its 32768-key step takes two minutes of the JAX leg.
ARGS = {"attention_long_sequence.py": ["--keys", "4096"]}
# Scripts that need an optional extra: skipped without it (an error with
# KERAS_STABLE_REQUIRE_HUB set, see `import_keras_hub`).
NEEDS_KERAS_HUB = {"keras_hub_causal_lm.py"}


def _examples():
    """A `pytest.param` per script, marked with the backend of its leg."""
    return [
        pytest.param(p, id=p.stem, marks=getattr(pytest.mark, LEG.get(p.name, "torch")))
        for p in EXAMPLES
    ]


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
        "vae_mixed_precision.py",
        "mixture_density_network.py",
    } <= names


def _run(script):
    env = dict(os.environ, KERAS_BACKEND=keras.config.backend())
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    result = subprocess.run(
        [sys.executable, str(script), *ARGS.get(script.name, [])],
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
@pytest.mark.parametrize("script", _examples())
def test_example_runs(script):
    if script.name in NEEDS_KERAS_HUB:
        import_keras_hub()
    _run(script)


def test_examples_are_documented():
    page = (ROOT / "docs" / "examples.md").read_text()
    for path in EXAMPLES:
        assert f"examples/{path.name}" in page, path.name
