"""StableKLDivergence: Keras's number on probabilities where Keras is right,
exact where Keras clips, and the argument checks."""

import keras
import numpy as np
import pytest

from keras_stable.losses import StableKLDivergence
from tests import reference
from tests.backend_utils import REDUCTIONS
from tests.backend_utils import assert_close
from tests.backend_utils import assert_finite
from tests.backend_utils import cast_tensor
from tests.backend_utils import to_numpy
from tests.backend_utils import vjp_all_modes


def _data(seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.dirichlet(np.ones(4), size=6).astype("float32")
    logits = (rng.normal(size=(6, 4)) * 2).astype("float32")
    sw = rng.uniform(0, 2, 6).astype("float32")
    return labels, logits, sw


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_probabilities_match_keras(reduction):
    """`keras.losses.KLDivergence()` is `StableKLDivergence(from_logits=False)`
    wherever Keras's clip at 1e-7 is inactive."""
    labels, logits, sw = _data()
    probs = np.exp(reference.log_softmax(logits)).astype("float32")
    ours = StableKLDivergence(from_logits=False, reduction=reduction)
    theirs = keras.losses.KLDivergence(reduction=reduction)
    for weights in (None, sw):
        assert_close(
            to_numpy(ours(labels, probs, sample_weight=weights)),
            to_numpy(theirs(labels, probs, sample_weight=weights)),
            what=f"{reduction}, weights={weights is not None}",
        )
    # From the logits, the same number.
    assert_close(
        to_numpy(StableKLDivergence(reduction=reduction)(labels, logits)),
        to_numpy(theirs(labels, probs)),
        what=reduction,
    )


def test_saturated_and_one_hot_targets():
    labels = np.array([[1.0, 0.0, 0.0], [0.0, 0.5, 0.5]], "float32")
    logits = np.array([[0.0, 30.0, -30.0], [-np.inf, 1.0, 1.0]], "float32")
    keras_value = to_numpy(
        keras.losses.KLDivergence(reduction="none")(
            labels, keras.activations.softmax(keras.ops.convert_to_tensor(logits))
        )
    )
    assert keras_value[0] < 16.2
    out, (grad,) = vjp_all_modes(
        lambda x: StableKLDivergence(reduction="none")(labels, x), [logits]
    )
    assert_close(out, [30.0, 0.0])
    assert_finite(grad)
    assert grad[1, 0] == 0.0


def test_values_in_half_precision_are_float32():
    labels, logits, _ = _data(1)
    for dtype in ("float16", "bfloat16"):
        x = cast_tensor(logits, dtype)
        out = StableKLDivergence(reduction="none")(labels, x)
        assert keras.backend.standardize_dtype(out.dtype) == "float32"
        assert_close(to_numpy(out), reference.kl_divergence(labels, to_numpy(x)))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"from_logits": "yes"}, r"`from_logits` must be a bool"),
        ({"axis": None}, r"`axis` must be an int"),
        ({"reduction": "avg"}, r"Invalid `reduction`"),
    ],
)
def test_bad_arguments_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        StableKLDivergence(**kwargs)


def test_shape_mismatch_raises():
    with pytest.raises(ValueError, match=r"y_true.shape=\(2, 3\) and y_pred.shape=\(2, 4\)"):
        StableKLDivergence()(np.ones((2, 3), "float32"), np.ones((2, 4), "float32"))
