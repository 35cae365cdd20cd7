"""The package imports on every backend, exports the contract, and does not
pull TensorFlow in unless the TensorFlow backend is in use."""

import os
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
    "tversky_loss",
]


def test_version():
    assert isinstance(keras_stable.__version__, str)
    assert keras_stable.__version__.count(".") == 2


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
