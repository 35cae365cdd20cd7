"""`MixtureDensityNLL` beyond the harness (tests/specs/losses.py): the head
layout, a tiny mixture density network that trains finite where the naive
`-log(sum(pi * N(y)))` is inf from the first step, and bad shapes."""

import keras
import numpy as np
import pytest

from keras_stable import losses
from tests import reference_log_space as logspace_ref
from tests.backend_utils import assert_close
from tests.backend_utils import to_numpy
from tests.harness.common import FIT_JIT
from tests.migration.transcriptions import naive_mixture_nll

M, D = 3, 2


def _head(rng, n):
    return rng.normal(size=(n, M * (1 + 2 * D))).astype("float32")


def test_head_layout():
    """`[logits (M) | means (M, D) | log-scales (M, D)]` along the last axis."""
    rng = np.random.default_rng(0)
    y, head = rng.normal(size=(5, D)), _head(rng, 5)
    logits = head[:, :M]
    mean = head[:, M : M + M * D].reshape(5, M, D)
    log_scale = head[:, M + M * D :].reshape(5, M, D)
    out = losses.MixtureDensityNLL(M, reduction="none")(y.astype("float32"), head)
    assert_close(out, logspace_ref.mixture_nll(y, logits, mean, log_scale))


def _mdn(seed):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(M * (1 + 2 * D))])


def test_mdn_trains_finite_on_far_targets():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(32, 4)).astype("float32")
    y = (rng.normal(size=(32, D)) * 40.0).astype("float32")  # tens of sigmas out
    parts = [keras.ops.convert_to_tensor(a, "float32") for a in (y, *_split(to_numpy(_mdn(0)(x))))]
    naive = to_numpy(naive_mixture_nll(*parts))
    assert np.isinf(naive).any()
    model = _mdn(0)
    model.compile(
        optimizer=keras.optimizers.Adam(0.01),
        loss=losses.MixtureDensityNLL(M),
        jit_compile=FIT_JIT,
    )
    history = model.fit(x, y, batch_size=16, epochs=3, verbose=0).history["loss"]
    assert np.all(np.isfinite(history)), history
    assert history[-1] < history[0]
    for w in model.weights:
        assert np.isfinite(to_numpy(w.value)).all()


def _split(head):
    n = len(head)
    return (
        head[:, :M],
        head[:, M : M + M * D].reshape(n, M, D),
        head[:, M + M * D :].reshape(n, M, D),
    )


def test_bad_shapes():
    loss = losses.MixtureDensityNLL(M)
    y = np.zeros((4, D), "float32")
    with pytest.raises(ValueError, match=r"y_true.shape=\(4, 2\) and y_pred.shape=\(4, 14\)"):
        loss(y, np.zeros((4, 14), "float32"))
    with pytest.raises(ValueError, match=r"y_pred.shape=\(3, 15\)"):
        loss(y, np.zeros((3, 15), "float32"))
    with pytest.raises(ValueError, match="`num_components`"):
        losses.MixtureDensityNLL(0)
