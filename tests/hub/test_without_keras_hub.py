"""`keras_stable.hub` without keras-hub: the package imports, and wrapping
a model raises an `ImportError` that says what to install."""

import subprocess
import sys

import keras
import pytest

from keras_stable.hub import FusedCausalLM


def test_wrapping_without_keras_hub_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "keras_hub", None)  # `import keras_hub` fails
    with pytest.raises(ImportError, match=r"pip install keras_stable\[hub\]"):
        FusedCausalLM(keras.Sequential([keras.layers.Dense(2)]))


def test_import_keras_stable_without_keras_hub():
    code = (
        "import sys; sys.modules['keras_hub'] = None\n"
        "import keras_stable, keras_stable.hub\n"
        "assert keras_stable.hub.FusedCausalLM.__name__ == 'FusedCausalLM'\n"
        "assert 'keras_hub' not in {m.split('.')[0] for m in sys.modules if sys.modules[m]}\n"
        "print('ok')\n"
    )
    env_backend = keras.config.backend()
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**__import__("os").environ, "KERAS_BACKEND": env_backend},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().splitlines()[-1] == "ok"
