"""The package imports on every backend, exports the contract, and does not
pull TensorFlow in unless the TensorFlow backend is in use."""

import os
import re
import subprocess
import sys

import keras

import keras_stable
from keras_stable import ops

PUBLIC_OPS = [
    "safe_sqrt",
    "safe_norm",
    "l2_normalize",
    "cosine_similarity",
    "safe_divide",
    "logsumexp",
    "softmax",
    "log_softmax",
    "softmax_cross_entropy",
    "sparse_softmax_cross_entropy",
    "sigmoid_cross_entropy",
    "masked_task_distance",
    "poisson_nll",
    "gaussian_nll",
    "masked_squared_error",
    "masked_absolute_error",
    "masked_huber",
    "pairwise_distance",
    "safe_std",
    "triplet_semihard_loss",
    "triplet_hard_loss",
    "contrastive_loss",
    "info_nce_loss",
    "kl_divergence",
    "sigmoid_focal_cross_entropy",
    "softmax_focal_cross_entropy",
    "linear_softmax_cross_entropy",
    "ctc_loss",
    "dice_loss",
    "dot_product_attention",
    "tversky_loss",
]


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


def test_ops_contract_names():
    assert sorted(ops.__all__) == sorted(PUBLIC_OPS)
    for name in PUBLIC_OPS:
        fn = getattr(ops, name)
        assert "Numerical stability:" in fn.__doc__, name
        assert ">>>" in fn.__doc__, name


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
