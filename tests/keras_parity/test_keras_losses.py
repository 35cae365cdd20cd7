"""Keras's and optax's cross-entropy loss tests, run on keras_stable.

Where the cases come from
-------------------------
1. Keras 3.15.1 (the installed wheel), `keras/src/losses/losses_test.py`:
   every method of `BinaryCrossentropyTest`, `CategoricalCrossentropyTest` and
   `SparseCategoricalCrossentropyTest`, run against
   `keras_stable.losses.StableSigmoidCrossEntropy`,
   `StableSoftmaxCrossEntropy` and `StableSparseSoftmaxCrossEntropy`. Each test
   here is named `test_<keras class>_<keras method>[_<part>]`, with the same
   arrays, the same expected numbers and the same tolerances (Keras's
   `assertAlmostEqual` is `np.testing.assert_almost_equal` with `decimal=3`
   unless given; its `assertAllClose` is `np.testing.assert_allclose` with
   `atol=rtol=1e-6` unless given).
2. optax, `optax/losses/_classification_test.py` (`SoftmaxCrossEntropyTest`,
   `SafeSoftmaxCrossEntropyTest`, `SoftmaxCrossEntropyWithIntegerLabelsTest`,
   `SigmoidCrossEntropyTest`; each test cites its method): the same small
   fixed arrays and expected numbers, against `keras_stable.ops.
   softmax_cross_entropy`, `sparse_softmax_cross_entropy` and
   `sigmoid_cross_entropy`, plus float64 NumPy references written here
   (optax is not installed).

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
- optax passes `(logits, labels)`; keras_stable takes `(labels, logits)`.
  optax's `where=` is keras_stable's `mask=`. optax's `test_mask` draws
  Dirichlet labels that put mass on masked classes, which optax's `where`
  drops and keras_stable scores as `+inf` (documented in
  `keras_stable.ops.softmax_cross_entropy`): the literal case is xfailed and
  an adapted one zeroes those labels. optax's `test_axes` (a tuple of class
  axes) is dropped: keras_stable takes one class axis. optax's
  `check_grads` numerical gradient checks are replaced by the analytic
  gradient `softmax(x) - y` (resp. `sigmoid(x) - y`) through the backend's
  autodiff (`tests.backend_utils.vjp`).
"""

import numpy as np
import pytest

from keras_stable import ops as stable_ops
from keras_stable.losses import StableSigmoidCrossEntropy
from keras_stable.losses import StableSoftmaxCrossEntropy
from keras_stable.losses import StableSparseSoftmaxCrossEntropy
from tests.backend_utils import dtype_of
from tests.backend_utils import keras_clip
from tests.backend_utils import keras_serialization_round_trip
from tests.backend_utils import native_numpy
from tests.backend_utils import vjp

NO_CLIP = (
    "Deliberate difference (documented): no epsilon clipping of "
    "probabilities. A predicted probability of exactly 1 on a 0 label (or 0 "
    "on a 1 label) gives the saturated -log(1.18e-38) = 87.34 (the true value "
    "is +inf); Keras clips to [1e-7, 1 - 1e-7] and reports "
    "-log(1.19e-7) = 15.94 for that entry."
)
MASKED_LABEL_MASS = (
    "Deliberate difference (documented in keras_stable.ops."
    "softmax_cross_entropy): a nonzero label on a masked class gives +inf; "
    "optax's `where=` drops the label mass of masked classes."
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


# ---------------------------------------------------------------------------
# optax: optax/losses/_classification_test.py -> keras_stable.ops
# ---------------------------------------------------------------------------


def _ref_log_softmax(logits, axis=-1, mask=None):
    """float64 log-softmax; masked and -inf classes get -inf."""
    x = np.asarray(logits, "float64")
    valid = np.isfinite(x) | (x > 0)
    if mask is not None:
        valid = valid & np.broadcast_to(mask, x.shape)
    x = np.where(valid, x, -np.inf)
    top = np.max(np.where(valid, x, -np.inf), axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        lse = top + np.log(np.sum(np.exp(x - top), axis=axis, keepdims=True))
    return x - lse, valid


def _ref_softmax_cross_entropy(labels, logits, axis=-1, mask=None):
    """float64 `-sum(labels * log_softmax)`: a zero label adds 0 anywhere."""
    labels = np.asarray(labels, "float64")
    log_p, _ = _ref_log_softmax(logits, axis, mask)
    with np.errstate(invalid="ignore"):
        terms = np.where(labels == 0, 0.0, labels * log_p)
    loss = -np.sum(terms, axis=axis)
    if mask is not None:
        nonempty = np.any(np.broadcast_to(mask, np.shape(logits)), axis=axis)
        loss = np.where(nonempty, loss, 0.0)
    return loss


def _ref_sparse_softmax_cross_entropy(labels, logits, axis=-1, mask=None):
    labels = np.asarray(labels)
    n = np.shape(logits)[axis]
    one_hot = np.moveaxis(np.eye(n)[labels], -1, axis)
    return _ref_softmax_cross_entropy(one_hot, logits, axis, mask)


def _ref_sigmoid_cross_entropy(labels, logits):
    x = np.asarray(logits, "float64")
    y = np.asarray(labels, "float64")
    return np.maximum(x, 0.0) - x * y + np.log1p(np.exp(-np.abs(x)))


def _ref_softmax(logits, axis=-1):
    log_p, _ = _ref_log_softmax(logits, axis)
    return np.exp(log_p)


# optax SoftmaxCrossEntropyTest.setUp (argument order: optax has logits first).
OPTAX_YS = np.array([[10.0, 1.0, -2.0], [1.0, 4.0, 0.2]], dtype=np.float32)
OPTAX_TS = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]], dtype=np.float32)
OPTAX_EXP = np.array([9.00013, 3.0696733], dtype=np.float32)
OPTAX_PER_LOGIT_MASK = np.array([[1, 0, 0], [0, 0, 0]]).astype(bool)
OPTAX_INT_TS = np.array([1, 0], dtype=np.int32)


def test_optax_softmax_cross_entropy_scalar():
    # optax SoftmaxCrossEntropyTest.test_scalar
    out = native_numpy(stable_ops.softmax_cross_entropy(OPTAX_TS[0], OPTAX_YS[0]))
    assert out.shape == ()
    np.testing.assert_allclose(out, OPTAX_EXP[0], atol=1e-4)
    np.testing.assert_allclose(out, _ref_softmax_cross_entropy(OPTAX_TS[0], OPTAX_YS[0]), rtol=1e-6)


def test_optax_softmax_cross_entropy_batched():
    # optax SoftmaxCrossEntropyTest.test_batched
    out = native_numpy(stable_ops.softmax_cross_entropy(OPTAX_TS, OPTAX_YS))
    np.testing.assert_allclose(out, OPTAX_EXP, atol=1e-4)
    np.testing.assert_allclose(out, _ref_softmax_cross_entropy(OPTAX_TS, OPTAX_YS), rtol=1e-6)


def test_optax_softmax_cross_entropy_per_logit_mask():
    # optax SoftmaxCrossEntropyTest.test_per_logit_mask: a fully masked
    # example gives 0.
    where = OPTAX_PER_LOGIT_MASK
    out = native_numpy(stable_ops.softmax_cross_entropy(OPTAX_TS, OPTAX_YS, mask=where))
    np.testing.assert_array_equal(np.where(np.any(where, -1), 0.0, out), 0)


def test_optax_softmax_cross_entropy_gradient():
    # optax SoftmaxCrossEntropyTest.test_gradient (check_grads replaced by the
    # analytic gradient softmax(x) - y; finite with a per-example mask).
    out, (grad,) = vjp(lambda x: stable_ops.softmax_cross_entropy(OPTAX_TS, x), [OPTAX_YS])
    np.testing.assert_allclose(grad, _ref_softmax(OPTAX_YS) - OPTAX_TS, atol=1e-6)
    mask = np.array([True, False])[:, None]
    _, (grad,) = vjp(
        lambda x: stable_ops.softmax_cross_entropy(OPTAX_TS, x, mask=mask),
        [OPTAX_YS],
    )
    assert np.all(np.isfinite(grad))
    np.testing.assert_array_equal(grad[1], 0.0)


def _optax_mask_case(size, seed):
    rng = np.random.default_rng(seed)
    preds = rng.normal(size=size)
    targets = rng.dirichlet(np.ones(size))
    mask = rng.integers(2, size=size).astype(bool)
    mask[0] = True  # optax's np.random may leave no class; keep one
    return preds, targets, mask


@pytest.mark.parametrize("size", [5, 10])
def test_optax_softmax_cross_entropy_mask_zero_labels_on_masked(size):
    # optax SoftmaxCrossEntropyTest.test_mask, adapted: the labels of masked
    # classes are zeroed (keras_stable scores label mass on a masked class as
    # +inf, see the xfailed literal case below).
    preds, targets, mask = _optax_mask_case(size, seed=size)
    targets = np.where(mask, targets, 0.0)
    x = stable_ops.softmax_cross_entropy(targets[mask], preds[mask])
    y = stable_ops.softmax_cross_entropy(targets, preds, mask=mask)
    np.testing.assert_allclose(native_numpy(x), native_numpy(y), atol=1e-4)
    np.testing.assert_allclose(
        native_numpy(y), _ref_softmax_cross_entropy(targets, preds, mask=mask), rtol=1e-6
    )


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=MASKED_LABEL_MASS)
@pytest.mark.parametrize("size", [5, 10])
def test_optax_softmax_cross_entropy_mask(size):
    # optax SoftmaxCrossEntropyTest.test_mask, literal.
    preds, targets, mask = _optax_mask_case(size, seed=size)
    y = native_numpy(stable_ops.softmax_cross_entropy(targets, preds, mask=mask))
    if not np.isposinf(y):
        raise RuntimeError(f"expected the documented +inf, got {y}")
    x = stable_ops.softmax_cross_entropy(targets[mask], preds[mask])
    np.testing.assert_allclose(native_numpy(x), y, atol=1e-4)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_optax_softmax_cross_entropy_axis(axis):
    # optax SoftmaxCrossEntropyTest.test_axis
    shape = [4, 5, 6]
    rng = np.random.default_rng(axis)
    preds = rng.normal(size=shape)
    targets = rng.dirichlet(np.ones(shape[-1]), size=shape[:-1])
    x = stable_ops.softmax_cross_entropy(targets, preds, axis=axis)
    y = stable_ops.softmax_cross_entropy(
        np.moveaxis(targets, axis, -1), np.moveaxis(preds, axis, -1)
    )
    np.testing.assert_allclose(native_numpy(x), native_numpy(y), atol=1e-4)
    np.testing.assert_allclose(
        native_numpy(x), _ref_softmax_cross_entropy(targets, preds, axis=axis), rtol=1e-5
    )


# optax SafeSoftmaxCrossEntropyTest.setUp: -inf logits with zero labels give
# a finite loss, a nonzero label on a -inf logit gives +inf.
SAFE_YS = np.array(
    [
        [10.0, 1.0, -2.0],
        [1.0, 4.0, 0.2],
        [-np.inf, 0.0, 0.0],
        [-np.inf, 0.0, 0.0],
        [-np.inf, 0.0, -np.inf],
    ],
    dtype=np.float32,
)
SAFE_TS = np.array(
    [
        [0.0, 1.0, 0.0],
        [1.0, 0.0, 0.0],
        [0.0, 0.5, 0.5],
        [0.4, 0.3, 0.3],
        [0.0, 1.0, 0.0],
    ],
    dtype=np.float32,
)
SAFE_EXP = np.array([9.00013, 3.0696733, 0.693147, np.inf, 0.0], np.float32)


def test_optax_safe_softmax_cross_entropy_scalar():
    # optax SafeSoftmaxCrossEntropyTest.test_scalar
    out = native_numpy(stable_ops.softmax_cross_entropy(SAFE_TS[0], SAFE_YS[0]))
    np.testing.assert_allclose(out, SAFE_EXP[0], atol=1e-4)


def test_optax_safe_softmax_cross_entropy_batched():
    # optax SafeSoftmaxCrossEntropyTest.test_batched
    out = native_numpy(stable_ops.softmax_cross_entropy(SAFE_TS, SAFE_YS))
    np.testing.assert_allclose(out, SAFE_EXP, atol=1e-4)
    np.testing.assert_allclose(out, _ref_softmax_cross_entropy(SAFE_TS, SAFE_YS), rtol=1e-6)
    assert np.all(np.isfinite(out[[0, 1, 2, 4]]))


def test_optax_safe_softmax_cross_entropy_gradient():
    # optax SafeSoftmaxCrossEntropyTest.test_gradient and
    # test_against_plain_implementation, extended to the -inf rows with
    # zero labels there: the gradient is softmax(x) - y, 0 on -inf classes.
    rows = [0, 1, 2, 4]
    ys, ts = SAFE_YS[rows], SAFE_TS[rows]
    out, (grad,) = vjp(lambda x: stable_ops.softmax_cross_entropy(ts, x), [ys])
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(grad, _ref_softmax(ys) - ts, atol=1e-6)
    np.testing.assert_array_equal(grad[~np.isfinite(ys)], 0.0)


def test_optax_integer_labels_consistent_with_softmax_cross_entropy_scalar():
    # optax SoftmaxCrossEntropyWithIntegerLabelsTest.
    # test_consistent_with_softmax_cross_entropy_scalar
    exp = stable_ops.softmax_cross_entropy(np.eye(3)[OPTAX_INT_TS[0]], OPTAX_YS[0])
    out = stable_ops.sparse_softmax_cross_entropy(OPTAX_INT_TS[0], OPTAX_YS[0])
    np.testing.assert_allclose(native_numpy(out), native_numpy(exp), rtol=1e-6)
    np.testing.assert_allclose(
        native_numpy(out),
        _ref_sparse_softmax_cross_entropy(OPTAX_INT_TS[0], OPTAX_YS[0]),
        rtol=1e-6,
    )


def test_optax_integer_labels_consistent_with_softmax_cross_entropy_batched():
    # optax SoftmaxCrossEntropyWithIntegerLabelsTest.
    # test_consistent_with_softmax_cross_entropy_batched
    exp = stable_ops.softmax_cross_entropy(np.eye(3)[OPTAX_INT_TS], OPTAX_YS)
    out = stable_ops.sparse_softmax_cross_entropy(OPTAX_INT_TS, OPTAX_YS)
    np.testing.assert_allclose(native_numpy(out), native_numpy(exp), rtol=1e-6)
    np.testing.assert_allclose(
        native_numpy(out), _ref_sparse_softmax_cross_entropy(OPTAX_INT_TS, OPTAX_YS), rtol=1e-6
    )


def test_optax_integer_labels_gradient():
    # optax SoftmaxCrossEntropyWithIntegerLabelsTest.test_gradient
    # (check_grads replaced by the analytic gradient softmax(x) - one_hot).
    _, (grad,) = vjp(
        lambda x: stable_ops.sparse_softmax_cross_entropy(OPTAX_INT_TS, x),
        [OPTAX_YS],
    )
    np.testing.assert_allclose(grad, _ref_softmax(OPTAX_YS) - np.eye(3)[OPTAX_INT_TS], atol=1e-6)
    mask = np.array([True, False])[:, None]
    _, (grad,) = vjp(
        lambda x: stable_ops.sparse_softmax_cross_entropy(OPTAX_INT_TS, x, mask=mask),
        [OPTAX_YS],
    )
    assert np.all(np.isfinite(grad))


def test_optax_integer_labels_per_logit_mask():
    # optax SoftmaxCrossEntropyWithIntegerLabelsTest.test_per_logit_mask
    where = OPTAX_PER_LOGIT_MASK
    out = native_numpy(stable_ops.sparse_softmax_cross_entropy(OPTAX_INT_TS, OPTAX_YS, mask=where))
    np.testing.assert_array_equal(np.where(np.any(where, -1), 0.0, out), 0)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_optax_integer_labels_axis(axis):
    # optax SoftmaxCrossEntropyWithIntegerLabelsTest.test_axis
    shape = [4, 5, 6]
    rng = np.random.default_rng(10 + axis)
    preds = rng.normal(size=shape)
    targets = rng.integers(shape[axis], size=shape[:axis] + shape[axis + 1 :])
    f = stable_ops.sparse_softmax_cross_entropy
    x = f(targets, preds, axis=axis)
    y = f(targets, np.moveaxis(preds, axis, -1))
    np.testing.assert_allclose(native_numpy(x), native_numpy(y), atol=1e-4)
    np.testing.assert_allclose(
        native_numpy(x), _ref_sparse_softmax_cross_entropy(targets, preds, axis), rtol=1e-5
    )


def test_optax_integer_labels_with_inf_logits():
    # The -inf rows of optax SafeSoftmaxCrossEntropyTest with integer labels:
    # a -inf logit on another class adds nothing, on the label gives +inf.
    logits = SAFE_YS[2:]
    labels = np.array([1, 0, 1], "int32")
    out = native_numpy(stable_ops.sparse_softmax_cross_entropy(labels, logits))
    np.testing.assert_allclose(out, [np.log(2.0), np.inf, 0.0], atol=1e-6)
    np.testing.assert_allclose(out, _ref_sparse_softmax_cross_entropy(labels, logits), rtol=1e-6)


@pytest.mark.parametrize(
    "preds, labels, expected",
    [
        ([-1e09, -1e-09], [1.0, 0.0], 5e08),
        ([-1e09, -1e-09], [0.0, 1.0], 0.3465736),
        ([1e09, 1e-09], [1.0, 0.0], 0.3465736),
        ([1e09, 1e-09], [0.0, 1.0], 5e08),
        ([-1e09, 1e-09], [1.0, 0.0], 5e08),
        ([-1e09, 1e-09], [0.0, 1.0], 0.3465736),
        ([1e09, -1e-09], [1.0, 0.0], 0.3465736),
        ([1e09, -1e-09], [0.0, 1.0], 5e08),
        ([0.0, 0.0], [1.0, 0.0], 0.6931472),
        ([0.0, 0.0], [0.0, 1.0], 0.6931472),
    ],
)
def test_optax_sigmoid_cross_entropy(preds, labels, expected):
    # optax SigmoidCrossEntropyTest.test_sigmoid_cross_entropy
    preds, labels = np.array(preds), np.array(labels)
    out = native_numpy(stable_ops.sigmoid_cross_entropy(labels, preds))
    np.testing.assert_allclose(np.mean(out), expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out, _ref_sigmoid_cross_entropy(labels, preds), rtol=1e-6, atol=1e-6)


def test_optax_sigmoid_cross_entropy_gradient():
    # Analytic gradient sigmoid(x) - y at the optax test points (optax checks
    # no gradient here; keras_stable's op promises it, 0.5 - y at x = 0).
    preds = np.array([-30.0, -1e-09, 0.0, 1e-09, 30.0], "float32")
    labels = np.array([1.0, 0.0, 1.0, 0.0, 0.0], "float32")
    _, (grad,) = vjp(lambda x: stable_ops.sigmoid_cross_entropy(labels, x), [preds])
    sigmoid = 1.0 / (1.0 + np.exp(-preds.astype("float64")))
    np.testing.assert_allclose(grad, sigmoid - labels, atol=1e-6)
