"""Keras's own tests of `CTC`, `Dice` and `Tversky` (keras/src/losses/
losses_test.py, Keras 3.15.1), run against the keras_stable classes.

Each keeps Keras's inputs and expected numbers, except where the
difference is deliberate (docs/migration.md): Tversky's weights are the
paper's (`StableTversky(alpha=b, beta=a)` is Keras 3.15.1's
`Tversky(alpha=a, beta=b)`).
"""

import keras
import numpy as np

from keras_stable.losses import StableCTC
from keras_stable.losses import StableDice
from keras_stable.losses import StableTversky
from tests import reference_sequences as ref
from tests.backend_utils import to_numpy

SEG_TRUE = np.array([[1, 0, 1, 0], [0, 1, 0, 1], [1, 0, 1, 0], [0, 1, 0, 1]])
SEG_PRED = np.array([[0, 1, 0, 1], [1, 0, 1, 1], [0, 1, 0, 1], [1, 0, 1, 1]])
AXIS_TRUE = np.array([[[[1.0], [1.0]], [[0.0], [0.0]]], [[[1.0], [1.0]], [[0.0], [0.0]]]])
AXIS_PRED = np.array([[[[0.0], [1.0]], [[0.0], [1.0]]], [[[0.4], [0.0]], [[0.0], [0.9]]]])
INT_TRUE = np.array([[1, 2], [1, 2]])
INT_PRED = np.array([[4, 1], [6, 1]])


def _round_trip(loss):
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert type(restored) is type(loss) and restored.get_config() == loss.get_config()


def test_ctc_config_and_correctness():
    _round_trip(StableCTC(name="myctc"))
    logits = (np.arange(24).reshape((2, 4, 3)).astype("float32") - 12) / 100
    y_true = np.array([[1, 2, 1, 0], [1, 2, 0, 2]])
    np.testing.assert_allclose(to_numpy(StableCTC()(y_true, logits)), 2.448645, rtol=1e-6)


def test_ctc_dtype_arg():
    logits = (np.arange(24).reshape((2, 4, 3)).astype("float32") - 12) / 100
    y_true = np.array([[1, 2, 1, 0], [1, 2, 0, 2]])
    output = StableCTC(dtype="bfloat16")(y_true, logits)
    assert keras.backend.standardize_dtype(output.dtype) == "bfloat16"


def test_dice():
    _round_trip(StableDice(name="mydice"))
    np.testing.assert_allclose(to_numpy(StableDice()(INT_TRUE, INT_PRED)), -0.55555546, rtol=1e-6)
    np.testing.assert_allclose(to_numpy(StableDice()(SEG_TRUE, SEG_PRED)), 0.77777773, rtol=1e-6)
    per_image = StableDice(axis=(1, 2, 3), reduction=None)(AXIS_TRUE, AXIS_PRED)
    np.testing.assert_allclose(to_numpy(per_image), [0.5, 0.75757575], rtol=1e-6)
    output = StableDice(dtype="bfloat16")(INT_TRUE, INT_PRED)
    assert keras.backend.standardize_dtype(output.dtype) == "bfloat16"


def test_tversky():
    _round_trip(StableTversky(name="mytversky"))
    np.testing.assert_allclose(
        to_numpy(StableTversky()(INT_TRUE, INT_PRED)), -0.55555546, rtol=1e-6
    )
    np.testing.assert_allclose(to_numpy(StableTversky()(SEG_TRUE, SEG_PRED)), 0.77777773, rtol=1e-6)
    per_image = StableTversky(axis=(1, 2, 3), reduction=None)(AXIS_TRUE, AXIS_PRED)
    np.testing.assert_allclose(to_numpy(per_image), [0.5, 0.75757575], rtol=1e-6)
    output = StableTversky(dtype="bfloat16")(INT_TRUE, INT_PRED)
    assert keras.backend.standardize_dtype(output.dtype) == "bfloat16"


def test_tversky_custom_coefficients_swapped_back():
    # Keras 3.15.1's Tversky(alpha=0.2, beta=0.8) numbers, with the weights
    # where the paper puts them.
    swapped = {"alpha": 0.8, "beta": 0.2}
    np.testing.assert_allclose(
        to_numpy(StableTversky(**swapped)(INT_TRUE, INT_PRED)), -0.29629636, rtol=1e-6
    )
    np.testing.assert_allclose(
        to_numpy(StableTversky(**swapped)(SEG_TRUE, SEG_PRED)), 0.7916667, rtol=1e-6
    )
    per_image = StableTversky(**swapped, axis=(1, 2, 3), reduction=None)(AXIS_TRUE, AXIS_PRED)
    np.testing.assert_allclose(to_numpy(per_image), [0.5, 0.7222222], rtol=1e-6)
    # And the paper's alpha=0.2 (false positives), beta=0.8 (false negatives).
    paper = StableTversky(alpha=0.2, beta=0.8)(SEG_TRUE, SEG_PRED)
    expected = ref.tversky_loss(SEG_TRUE, SEG_PRED, alpha=0.2, beta=0.8)
    np.testing.assert_allclose(to_numpy(paper), expected, rtol=1e-6)
