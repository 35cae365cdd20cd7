"""The package imports on every backend, exports the contract, and does not
pull TensorFlow in unless the TensorFlow backend is in use."""

import os
import re
import subprocess
import sys

import keras

import keras_stable


def test_version():
    assert isinstance(keras_stable.__version__, str)
    assert keras_stable.__version__.count(".") == 2


def test_version_is_the_changelogs_latest():
    """One version: `keras_stable.__version__` (setup.cfg reads it), the
    first release heading of CHANGELOG.md (`## 0.2.0`, or `## Unreleased
    (0.2.0)` before the release)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "CHANGELOG.md"), encoding="utf-8") as f:
        headings = [line for line in f if line.startswith("## ")]
    assert headings, "CHANGELOG.md has no `## <version>` heading"
    latest = re.search(r"\d+\.\d+\.\d+", headings[0])
    assert latest, f"no version in CHANGELOG.md's first heading: {headings[0]!r}"
    assert latest.group(0) == keras_stable.__version__
    with open(os.path.join(root, "setup.cfg"), encoding="utf-8") as f:
        assert "version = attr: keras_stable.__version__" in f.read()


def test_import_does_not_load_tensorflow_on_other_backends():
    backend = keras.backend.backend()
    code = "import sys, keras_stable; print('tensorflow' in sys.modules)"
    env = dict(os.environ, KERAS_BACKEND=backend)
    out = (
        subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    assert out == str(backend == "tensorflow")
