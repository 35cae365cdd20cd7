"""Keras's cross-entropy loss tests, run on keras_stable (optax's are in
`test_optax_losses.py`).

Where the cases come from
-------------------------
Keras 3.15.1 (the installed wheel), `keras/src/losses/losses_test.py`:
every method of `BinaryCrossentropyTest`, `CategoricalCrossentropyTest` and
`SparseCategoricalCrossentropyTest`, run against
`keras_stable.losses.StableSigmoidCrossEntropy`,
`StableSoftmaxCrossEntropy` and `StableSparseSoftmaxCrossEntropy`. Each test
here is named `test_<keras class>_<keras method>[_<part>]`, with the same
arrays, the same expected numbers and the same tolerances (Keras's
`assertAlmostEqual` is `np.testing.assert_almost_equal` with `decimal=3`
unless given; its `assertAllClose` is `np.testing.assert_allclose` with
`atol=rtol=1e-6` unless given).

Adaptations
-----------
- Classes renamed: `BinaryCrossentropy` -> `StableSigmoidCrossEntropy`,
  `CategoricalCrossentropy` -> `StableSoftmaxCrossEntropy`,
  `SparseCategoricalCrossentropy` -> `StableSparseSoftmaxCrossEntropy`.
- `from_logits` is passed explicitly everywhere: keras_stable defaults to
  `from_logits=True`, Keras to `False`, so every Keras case that relies on the
  default passes `from_logits=False`.
- unittest-style methods became pytest functions; Keras methods that check
  several things (probabilities, then logits) are split into one function
  per part (suffixes `_probabilities`, `_logits`, ...), so that a part hit by
  a deliberate difference is xfailed alone and the other parts still run.
- `test_config` (`run_class_serialization_test`, which imports
  `keras.src`) is re-implemented with the public API: `get_config` /
  `from_config` and `keras.saving.serialize_keras_object` /
  `deserialize_keras_object` through JSON give the same config and the same
  attributes. No case checks Keras-specific names, so none is dropped.
- `test_dtype_arg` of `BinaryCrossentropy` is skipped on torch in Keras
  ("Torch doesn't support bfloat16"); keras_stable computes in float32 and
  casts the result, so it runs on every backend here.
- `test_binary_segmentation_different_axis` and
  `test_multi_class_segmentation_different_axis`: Keras computes the loss
  only on torch and expects its own backend-specific `ValueError`s on
  TensorFlow ("Only axis=-1 is currently supported") and JAX. keras_stable
  supports any class axis on every backend, so the torch branch (the
  values) runs on all three and the error-message branches are dropped.
- `test_squeezes_singleton_class_dim_on_user_axis` calls Keras's functional
  `sparse_categorical_crossentropy(..., axis=1)` and is torch-only in Keras;
  here it is `StableSparseSoftmaxCrossEntropy(axis=1, reduction="none")`
  on every backend, with a seeded generator instead of `np.random`.
- Cases that differ only by a documented deliberate difference are marked
  `xfail(strict=True, raises=AssertionError)`. Each first checks, with a
  non-assertion error, that applying the difference by hand (clipping the
  probabilities as Keras does) reproduces Keras's number, so the xfail can
  only hide that difference.
"""

import numpy as np
import pytest

from keras_stable.losses import StableSigmoidCrossEntropy
from keras_stable.losses import StableSoftmaxCrossEntropy
from keras_stable.losses import StableSparseSoftmaxCrossEntropy
from tests.backend_utils import dtype_of
from tests.backend_utils import keras_clip
from tests.backend_utils import keras_serialization_round_trip
from tests.backend_utils import native_numpy

NO_CLIP = (
    "Deliberate difference (documented): no epsilon clipping of "
    "probabilities. A predicted probability of exactly 1 on a 0 label (or 0 "
    "on a 1 label) gives the saturated -log(1.18e-38) = 87.34 (the true value "
    "is +inf); Keras clips to [1e-7, 1 - 1e-7] and reports "
    "-log(1.19e-7) = 15.94 for that entry."
)


def _only_the_clip_differs(loss, y_true, y_pred, expected, decimal=3, **kw):
    """Raises RuntimeError (not an xfail) unless Keras's clip explains all.

    With the probabilities clipped as Keras does, keras_stable must give
    Keras's expected value; the unclipped call (left to the test) then
    differs only by the clip.
    """
    got = native_numpy(loss(y_true, keras_clip(y_pred), **kw))
    try:
        np.testing.assert_almost_equal(got, expected, decimal=decimal)
    except AssertionError as err:
        raise RuntimeError(f"not only the clip differs: {err}") from None


# ---------------------------------------------------------------------------
# Keras: BinaryCrossentropyTest -> StableSigmoidCrossEntropy
# ---------------------------------------------------------------------------

BCE_PROBS_TRUE = np.array([1, 0, 1, 0]).reshape([2, 2])
BCE_PROBS_PRED = np.array([1, 1, 1, 0], dtype="float32").reshape([2, 2])
BCE_LOGITS_TRUE = np.array([[1, 0, 1], [0, 1, 1]])
BCE_LOGITS = np.array([[10.0, -10.0, 10.0], [10.0, 10.0, -10.0]])


def test_binary_crossentropy_config():
    revived = keras_serialization_round_trip(StableSigmoidCrossEntropy(name="bce", axis=-1))
    assert revived.name == "bce"
    assert revived.axis == -1


def test_binary_crossentropy_all_correct_unweighted_probabilities():
    y_true = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype="float32")
    bce_obj = StableSigmoidCrossEntropy(from_logits=False)
    loss = bce_obj(y_true, y_true)
    np.testing.assert_almost_equal(native_numpy(loss), 0.0, decimal=3)


def test_binary_crossentropy_all_correct_unweighted_logits():
    y_true = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype="float32")
    logits = np.array(
        [
            [10.0, -10.0, -10.0],
            [-10.0, 10.0, -10.0],
            [-10.0, -10.0, 10.0],
        ]
    )
    bce_obj = StableSigmoidCrossEntropy(from_logits=True)
    loss = bce_obj(y_true, logits)
    np.testing.assert_almost_equal(native_numpy(loss), 0.0, decimal=3)


def test_binary_crossentropy_unweighted_probabilities():
    y_true = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype="float32")
    y_pred = np.array([[0.9, 0.1, 0.2], [0.3, 0.8, 0.1], [0.1, 0.2, 0.7]], dtype="float32")
    bce_obj = StableSigmoidCrossEntropy(from_logits=False)
    loss = bce_obj(y_true, y_pred)
    np.testing.assert_allclose(native_numpy(loss), 0.20046903, atol=1e-6, rtol=1e-6)


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=NO_CLIP)
def test_binary_crossentropy_unweighted_saturated_probabilities():
    bce_obj = StableSigmoidCrossEntropy(from_logits=False)
    _only_the_clip_differs(bce_obj, BCE_PROBS_TRUE, BCE_PROBS_PRED, 3.98559)
    loss = bce_obj(BCE_PROBS_TRUE, BCE_PROBS_PRED)
    np.testing.assert_almost_equal(native_numpy(loss), 3.98559, decimal=3)


def test_binary_crossentropy_unweighted_logits():
    bce_obj = StableSigmoidCrossEntropy(from_logits=True)
    loss = bce_obj(BCE_LOGITS_TRUE, BCE_LOGITS)
    np.testing.assert_almost_equal(native_numpy(loss), 3.3333, decimal=3)


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=NO_CLIP)
def test_binary_crossentropy_scalar_weighted_probabilities():
    bce_obj = StableSigmoidCrossEntropy(from_logits=False)
    _only_the_clip_differs(bce_obj, BCE_PROBS_TRUE, BCE_PROBS_PRED, 9.1668, sample_weight=2.3)
    loss = bce_obj(BCE_PROBS_TRUE, BCE_PROBS_PRED, sample_weight=2.3)
    np.testing.assert_almost_equal(native_numpy(loss), 9.1668, decimal=3)


def test_binary_crossentropy_scalar_weighted_logits():
    bce_obj = StableSigmoidCrossEntropy(from_logits=True)
    loss = bce_obj(BCE_LOGITS_TRUE, BCE_LOGITS, sample_weight=2.3)
    np.testing.assert_almost_equal(native_numpy(loss), 7.666, decimal=3)


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=NO_CLIP)
def test_binary_crossentropy_sample_weighted_probabilities():
    bce_obj = StableSigmoidCrossEntropy(from_logits=False)
    sample_weight = np.array([1.2, 3.4]).reshape((2, 1))
    _only_the_clip_differs(
        bce_obj,
        BCE_PROBS_TRUE,
        BCE_PROBS_PRED,
        4.7827,
        sample_weight=sample_weight,
    )
    loss = bce_obj(BCE_PROBS_TRUE, BCE_PROBS_PRED, sample_weight=sample_weight)
    np.testing.assert_almost_equal(native_numpy(loss), 4.7827, decimal=3)


def test_binary_crossentropy_sample_weighted_logits():
    weights = np.array([4, 3])
    bce_obj = StableSigmoidCrossEntropy(from_logits=True)
    loss = bce_obj(BCE_LOGITS_TRUE, BCE_LOGITS, sample_weight=weights)
    np.testing.assert_almost_equal(native_numpy(loss), 10.0, decimal=3)


def test_binary_crossentropy_no_reduction():
    bce_obj = StableSigmoidCrossEntropy(from_logits=True, reduction=None)
    loss = bce_obj(BCE_LOGITS_TRUE, BCE_LOGITS)
    np.testing.assert_allclose(native_numpy(loss), [0.0, 6.666], atol=1e-3, rtol=1e-6)


def test_binary_crossentropy_label_smoothing():
    logits = np.array([[10.0, -10.0, -10.0]])
    y_true = np.array([[1, 0, 1]])
    label_smoothing = 0.1
    bce_obj = StableSigmoidCrossEntropy(from_logits=True, label_smoothing=label_smoothing)
    loss = bce_obj(y_true, logits)
    expected_value = (10.0 + 5.0 * label_smoothing) / 3.0
    np.testing.assert_almost_equal(native_numpy(loss), expected_value, decimal=3)


def test_binary_crossentropy_shape_mismatch():
    y_true = np.array([[0], [1], [2]])
    y_pred = np.array([[0.9, 0.05, 0.05], [0.5, 0.89, 0.6], [0.05, 0.01, 0.94]])
    cce_obj = StableSigmoidCrossEntropy(from_logits=False)
    with pytest.raises(ValueError, match="must have the same shape"):
        cce_obj(y_true, y_pred)


def test_binary_crossentropy_dtype_arg():
    # Keras skips this on torch; keras_stable runs it on every backend.
    y_true = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype="float32")
    y_pred = np.array([[0.9, 0.1, 0.2], [0.3, 0.8, 0.1], [0.1, 0.2, 0.7]], dtype="float32")
    bce_obj = StableSigmoidCrossEntropy(from_logits=False, dtype="bfloat16")
    loss = bce_obj(y_true, y_pred)
    assert dtype_of(loss) == "bfloat16"


# ---------------------------------------------------------------------------
# Keras: CategoricalCrossentropyTest -> StableSoftmaxCrossEntropy
# ---------------------------------------------------------------------------

CCE_TRUE = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]])
CCE_PROBS = np.array([[0.9, 0.05, 0.05], [0.5, 0.89, 0.6], [0.05, 0.01, 0.94]], dtype="float32")
CCE_LOGITS = np.array([[8.0, 1.0, 1.0], [0.0, 9.0, 1.0], [2.0, 3.0, 5.0]])
CCE_SAMPLE_WEIGHT = np.array([[1.2], [3.4], [5.6]]).reshape((3, 1))


def test_categorical_crossentropy_config():
    revived = keras_serialization_round_trip(StableSoftmaxCrossEntropy(name="cce", axis=-1))
    assert revived.name == "cce"
    assert revived.axis == -1


def test_categorical_crossentropy_all_correct_unweighted_probabilities():
    y_true = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype="int64")
    y_pred = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], dtype="float32")
    cce_obj = StableSoftmaxCrossEntropy(from_logits=False)
    loss = cce_obj(y_true, y_pred)
    np.testing.assert_almost_equal(native_numpy(loss), 0.0, decimal=3)


def test_categorical_crossentropy_all_correct_unweighted_logits():
    y_true = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype="int64")
    logits = np.array([[10.0, 0.0, 0.0], [0.0, 10.0, 0.0], [0.0, 0.0, 10.0]])
    cce_obj = StableSoftmaxCrossEntropy(from_logits=True)
    loss = cce_obj(y_true, logits)
    np.testing.assert_almost_equal(native_numpy(loss), 0.0, decimal=3)


def test_categorical_crossentropy_unweighted_probabilities():
    cce_obj = StableSoftmaxCrossEntropy(from_logits=False)
    loss = cce_obj(CCE_TRUE, CCE_PROBS)
    np.testing.assert_almost_equal(native_numpy(loss), 0.3239, decimal=3)


def test_categorical_crossentropy_unweighted_logits():
    cce_obj = StableSoftmaxCrossEntropy(from_logits=True)
    loss = cce_obj(CCE_TRUE, CCE_LOGITS)
    np.testing.assert_almost_equal(native_numpy(loss), 0.0573, decimal=3)


def test_categorical_crossentropy_scalar_weighted_probabilities():
    cce_obj = StableSoftmaxCrossEntropy(from_logits=False)
    loss = cce_obj(CCE_TRUE, CCE_PROBS, sample_weight=2.3)
    np.testing.assert_almost_equal(native_numpy(loss), 0.7449, decimal=3)


def test_categorical_crossentropy_scalar_weighted_logits():
    cce_obj = StableSoftmaxCrossEntropy(from_logits=True)
    loss = cce_obj(CCE_TRUE, CCE_LOGITS, sample_weight=2.3)
    np.testing.assert_almost_equal(native_numpy(loss), 0.1317, decimal=3)


def test_categorical_crossentropy_sample_weighted_probabilities():
    cce_obj = StableSoftmaxCrossEntropy(from_logits=False)
    loss = cce_obj(CCE_TRUE, CCE_PROBS, sample_weight=CCE_SAMPLE_WEIGHT)
    np.testing.assert_almost_equal(native_numpy(loss), 1.0696, decimal=3)


def test_categorical_crossentropy_sample_weighted_logits():
    cce_obj = StableSoftmaxCrossEntropy(from_logits=True)
    loss = cce_obj(CCE_TRUE, CCE_LOGITS, sample_weight=CCE_SAMPLE_WEIGHT)
    np.testing.assert_almost_equal(native_numpy(loss), 0.31829, decimal=3)


def test_categorical_crossentropy_no_reduction():
    cce_obj = StableSoftmaxCrossEntropy(from_logits=True, reduction=None)
    loss = cce_obj(CCE_TRUE, CCE_LOGITS)
    np.testing.assert_allclose(
        native_numpy(loss), (0.001822, 0.000459, 0.169846), atol=1e-6, rtol=1e-6
    )


@pytest.mark.parametrize("as_ndarray", [False, True], ids=["array", "asarray"])
def test_categorical_crossentropy_label_smoothing(as_ndarray):
    # Keras: test_label_smoothing (np.array) and test_label_smoothing_ndarray
    # (np.asarray).
    make = np.asarray if as_ndarray else np.array
    logits = make([[100.0, -100.0, -100.0]])
    y_true = make([[1, 0, 0]])
    label_smoothing = 0.1
    cce_obj = StableSoftmaxCrossEntropy(from_logits=True, label_smoothing=label_smoothing)
    loss = cce_obj(y_true, logits)
    expected_value = 400.0 * label_smoothing / 3.0
    np.testing.assert_almost_equal(native_numpy(loss), expected_value, decimal=3)


def test_categorical_crossentropy_shape_mismatch():
    y_true = np.array([[0], [1], [2]])
    y_pred = np.array([[0.9, 0.05, 0.05], [0.5, 0.89, 0.6], [0.05, 0.01, 0.94]])
    cce_obj = StableSoftmaxCrossEntropy(from_logits=False)
    with pytest.raises(ValueError, match="must have the same shape"):
        cce_obj(y_true, y_pred)


def test_categorical_crossentropy_dtype_arg():
    y_true = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1]], dtype="int64")
    y_pred = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], dtype="float32")
    cce_obj = StableSoftmaxCrossEntropy(from_logits=False, dtype="bfloat16")
    loss = cce_obj(y_true, y_pred)
    assert dtype_of(loss) == "bfloat16"


# ---------------------------------------------------------------------------
# Keras: SparseCategoricalCrossentropyTest -> StableSparseSoftmaxCrossEntropy
# ---------------------------------------------------------------------------

SCCE_TRUE_COLUMN = np.array([[0], [1], [2]])


def test_sparse_categorical_crossentropy_config():
    revived = keras_serialization_round_trip(StableSparseSoftmaxCrossEntropy(name="scce"))
    assert revived.name == "scce"


def test_sparse_categorical_crossentropy_all_correct_unweighted_probabilities():
    y_true = np.array([[0], [1], [2]], dtype="int64")
    y_pred = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], dtype="float32")
    cce_obj = StableSparseSoftmaxCrossEntropy(from_logits=False)
    loss = cce_obj(y_true, y_pred)
    np.testing.assert_almost_equal(native_numpy(loss), 0.0, decimal=3)


def test_sparse_categorical_crossentropy_all_correct_unweighted_logits():
    y_true = np.array([[0], [1], [2]], dtype="int64")
    logits = np.array([[10.0, 0.0, 0.0], [0.0, 10.0, 0.0], [0.0, 0.0, 10.0]])
    cce_obj = StableSparseSoftmaxCrossEntropy(from_logits=True)
    loss = cce_obj(y_true, logits)
    np.testing.assert_almost_equal(native_numpy(loss), 0.0, decimal=3)


def test_sparse_categorical_crossentropy_unweighted_probabilities():
    cce_obj = StableSparseSoftmaxCrossEntropy(from_logits=False)
    loss = cce_obj(np.array([0, 1, 2]), CCE_PROBS)
    np.testing.assert_almost_equal(native_numpy(loss), 0.3239, decimal=3)


def test_sparse_categorical_crossentropy_unweighted_logits():
    cce_obj = StableSparseSoftmaxCrossEntropy(from_logits=True)
    loss = cce_obj(np.array([0, 1, 2]), CCE_LOGITS)
    np.testing.assert_almost_equal(native_numpy(loss), 0.0573, decimal=3)


def test_sparse_categorical_crossentropy_scalar_weighted_probabilities():
    cce_obj = StableSparseSoftmaxCrossEntropy(from_logits=False)
    loss = cce_obj(SCCE_TRUE_COLUMN, CCE_PROBS, sample_weight=2.3)
    np.testing.assert_almost_equal(native_numpy(loss), 0.7449, decimal=3)


def test_sparse_categorical_crossentropy_scalar_weighted_logits():
    cce_obj = StableSparseSoftmaxCrossEntropy(from_logits=True)
    loss = cce_obj(SCCE_TRUE_COLUMN, CCE_LOGITS, sample_weight=2.3)
    np.testing.assert_almost_equal(native_numpy(loss), 0.1317, decimal=3)


def test_sparse_categorical_crossentropy_sample_weighted_probabilities():
    cce_obj = StableSparseSoftmaxCrossEntropy(from_logits=False)
    loss = cce_obj(SCCE_TRUE_COLUMN, CCE_PROBS, sample_weight=CCE_SAMPLE_WEIGHT)
    np.testing.assert_almost_equal(native_numpy(loss), 1.0696, decimal=3)


def test_sparse_categorical_crossentropy_sample_weighted_logits():
    cce_obj = StableSparseSoftmaxCrossEntropy(from_logits=True)
    loss = cce_obj(SCCE_TRUE_COLUMN, CCE_LOGITS, sample_weight=CCE_SAMPLE_WEIGHT)
    np.testing.assert_almost_equal(native_numpy(loss), 0.31829, decimal=3)


def test_sparse_categorical_crossentropy_no_reduction():
    cce_obj = StableSparseSoftmaxCrossEntropy(from_logits=True, reduction=None)
    loss = cce_obj(SCCE_TRUE_COLUMN, CCE_LOGITS)
    np.testing.assert_allclose(
        native_numpy(loss), (0.001822, 0.000459, 0.169846), atol=1e-6, rtol=1e-6
    )


@pytest.mark.parametrize(
    "y_true",
    [np.array([[-1, 2]]), np.array([[[-1], [2]]])],
    ids=["labels", "labels_with_class_axis"],
)
def test_sparse_categorical_crossentropy_ignore_class(y_true):
    logits = np.array([[[0.854, 0.698, 0.598], [0.088, 0.86, 0.018]]])
    cce_obj = StableSparseSoftmaxCrossEntropy(from_logits=True, ignore_class=-1, reduction=None)
    loss = cce_obj(y_true, logits)
    np.testing.assert_allclose(native_numpy(loss), [[0.0, 1.480129]], atol=1e-6, rtol=1e-6)


SEG_BINARY_TRUE = np.array([[0, 1, 1, 0], [1, 0, 1, 0], [0, 0, 1, 1], [1, 1, 0, 1]])
SEG_BINARY_EXACT = np.array(
    [
        [[1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [1.0, 0.0]],
        [[0.0, 1.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.0]],
        [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]],
        [[0.0, 1.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]],
    ]
)
SEG_BINARY_PRED = np.array(
    [
        [[1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [0.2, 0.8]],
        [[0.0, 1.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.0]],
        [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]],
        [[0.0, 1.0], [0.0, 1.0], [1.0, 0.0], [0.6, 0.4]],
    ]
)
SEG_BINARY_EXPECTED = np.array([-np.log(0.2), -np.log(0.4)]).sum() / 16.0

SEG_MULTI_TRUE = np.array([[0, 1, 2, 0], [1, 0, 1, 0], [0, 0, 1, 1], [1, 1, 0, 1]])
SEG_MULTI_EXACT = np.array(
    [
        [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]],
        [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]],
        [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 1.0, 0.0]],
        [[0.0, 1.0, 0.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]],
    ]
)
SEG_MULTI_PRED = np.array(
    [
        [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.2, 0.0, 0.8]],
        [[0.7, 0.3, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]],
        [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 1.0, 0.0]],
        [[0.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.5, 0.5, 0.0], [0.0, 1.0, 0.0]],
    ]
)
SEG_MULTI_EXPECTED = np.array([-np.log(0.2), -np.log(0.3), -np.log(0.5)]).sum() / 16.0


def test_sparse_categorical_crossentropy_binary_segmentation():
    loss = StableSparseSoftmaxCrossEntropy(from_logits=False)
    output = loss(SEG_BINARY_TRUE, SEG_BINARY_EXACT)
    np.testing.assert_allclose(native_numpy(output), 0.0, atol=1e-6, rtol=1e-6)
    output = loss(SEG_BINARY_TRUE, SEG_BINARY_PRED)
    np.testing.assert_allclose(
        native_numpy(output), SEG_BINARY_EXPECTED, atol=1e-6, rtol=1e-6
    )  # 16 pixels


def test_sparse_categorical_crossentropy_binary_segmentation_different_axis():
    # Keras: values on torch only (TF and JAX raise); all backends here.
    exact = np.moveaxis(SEG_BINARY_EXACT, source=2, destination=0)
    output = StableSparseSoftmaxCrossEntropy(from_logits=False, axis=0)(SEG_BINARY_TRUE, exact)
    np.testing.assert_allclose(native_numpy(output), 0.0, atol=1e-6, rtol=1e-6)

    y_pred_reshaped = np.moveaxis(SEG_BINARY_PRED, source=2, destination=0)
    output = StableSparseSoftmaxCrossEntropy(from_logits=False, axis=0)(
        SEG_BINARY_TRUE, y_pred_reshaped
    )
    np.testing.assert_allclose(native_numpy(output), SEG_BINARY_EXPECTED, atol=1e-6, rtol=1e-6)

    y_true = np.array([SEG_BINARY_TRUE] * 3)
    y_pred_reshaped = np.array([y_pred_reshaped] * 3)
    output = StableSparseSoftmaxCrossEntropy(from_logits=False, axis=1)(y_true, y_pred_reshaped)
    np.testing.assert_allclose(native_numpy(output), SEG_BINARY_EXPECTED, atol=1e-6, rtol=1e-6)


def test_sparse_categorical_crossentropy_squeezes_singleton_class_dim_on_user_axis():
    # Keras: torch only, functional API; here the class with no reduction.
    rng = np.random.default_rng(0)
    y_true = rng.integers(0, 2, size=(2, 1, 4, 4)).astype("float32")
    y_pred = rng.random((2, 2, 4, 4)).astype("float32")
    loss = StableSparseSoftmaxCrossEntropy(from_logits=False, axis=1, reduction="none")(
        y_true, y_pred
    )
    assert tuple(loss.shape) == (2, 4, 4)


def test_sparse_categorical_crossentropy_multi_class_segmentation():
    loss = StableSparseSoftmaxCrossEntropy(from_logits=False)
    output = loss(SEG_MULTI_TRUE, SEG_MULTI_EXACT)
    np.testing.assert_allclose(native_numpy(output), 0.0, atol=1e-6, rtol=1e-6)
    output = loss(SEG_MULTI_TRUE, SEG_MULTI_PRED)
    np.testing.assert_allclose(
        native_numpy(output), SEG_MULTI_EXPECTED, atol=1e-6, rtol=1e-6
    )  # 16 pixels


def test_sparse_categorical_crossentropy_multi_class_segmentation_different_axis():
    # Keras: values on torch only (TF and JAX raise); all backends here.
    exact = np.moveaxis(SEG_MULTI_EXACT, source=2, destination=0)
    output = StableSparseSoftmaxCrossEntropy(from_logits=False, axis=0)(SEG_MULTI_TRUE, exact)
    np.testing.assert_allclose(native_numpy(output), 0.0, atol=1e-6, rtol=1e-6)

    y_pred_reshaped = np.moveaxis(SEG_MULTI_PRED, source=2, destination=0)
    output = StableSparseSoftmaxCrossEntropy(from_logits=False, axis=0)(
        SEG_MULTI_TRUE, y_pred_reshaped
    )
    np.testing.assert_allclose(native_numpy(output), SEG_MULTI_EXPECTED, atol=1e-6, rtol=1e-6)

    y_true = np.array([SEG_MULTI_TRUE] * 3)
    y_pred_reshaped = np.array([y_pred_reshaped] * 3)
    output = StableSparseSoftmaxCrossEntropy(from_logits=False, axis=1)(y_true, y_pred_reshaped)
    np.testing.assert_allclose(native_numpy(output), SEG_MULTI_EXPECTED, atol=1e-6, rtol=1e-6)


def test_sparse_categorical_crossentropy_dtype_arg():
    y_true = np.array([[0], [1], [2]], dtype="int64")
    y_pred = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], dtype="float32")
    cce_obj = StableSparseSoftmaxCrossEntropy(from_logits=False, dtype="bfloat16")
    loss = cce_obj(y_true, y_pred)
    assert dtype_of(loss) == "bfloat16"
