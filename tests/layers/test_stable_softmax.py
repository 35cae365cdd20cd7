"""StableSoftmax: the checks beyond the spec harness (tests/test_harness.py)."""

import keras
import numpy as np

from keras_stable.layers import StableSoftmax
from tests import backend_utils as bu
from tests import reference


def test_fully_masked_row_gives_zeros_and_zero_gradient():
    layer = StableSoftmax()
    x = np.array([[1.0, 2.0, 3.0], [-np.inf] * 3], "float32")
    mask = np.array([[False] * 3, [True] * 3])
    value, (grad,) = bu.vjp_all_modes(
        lambda t, m: layer(t, mask=m), [x, mask], cotangent=np.arange(6.0).reshape(2, 3)
    )
    np.testing.assert_array_equal(value, 0.0)
    np.testing.assert_array_equal(grad, 0.0)


def test_keras_softmax_pairs_time_mask_with_features():
    """keras.layers.Softmax broadcasts a (batch, time) mask from the right."""
    x = np.random.default_rng(0).normal(size=(3, 3, 3)).astype("float32")
    steps = np.array([[True, True, False], [True, False, False], [True] * 3])
    ours = bu.to_numpy(StableSoftmax()(x, mask=steps))
    theirs = bu.to_numpy(keras.layers.Softmax()(x, mask=steps))
    bu.assert_close(ours, reference.softmax(x))  # time mask: math unchanged
    # Keras aligns the mask from the right: batch with time, time with
    # features, so it silently masks features (a shape error otherwise).
    assert not np.allclose(theirs, ours)


def test_class_mask_is_consumed_where_keras_softmax_passes_it_on():
    logits = keras.Input((3,))
    classes = keras.Input((3,), dtype="bool")
    assert getattr(StableSoftmax()(logits, mask=classes), "_keras_mask", None) is None
    # keras.layers.Softmax hands the class mask to the loss as sample weights.
    assert getattr(keras.layers.Softmax()(logits, mask=classes), "_keras_mask", None) is not None
