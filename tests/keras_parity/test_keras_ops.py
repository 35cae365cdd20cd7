"""Keras's own op tests, run against the keras_stable ops.

Where each case comes from (the Keras 3.15.1 wheel installed in the venv,
`keras/src/...`), and how it was adapted. Throughout: the Keras op is
replaced by its keras_stable counterpart (`keras.ops.softmax` ->
`keras_stable.ops.softmax`, `log_softmax` -> `log_softmax`, `logsumexp` ->
`logsumexp`, `keras.ops.norm` / `linalg.norm` -> `safe_norm`,
`keras.ops.normalize` -> `l2_normalize`); `testing.TestCase` methods become
plain pytest functions (parametrized where Keras loops or uses
`parameterized`); `self.assertAllClose(a, b)` becomes `assert_all_close`
(`keras.ops.convert_to_numpy`, then `np.testing.assert_allclose` with
Keras's default `atol=rtol=1e-6`, or the tolerance the case passes);
unseeded `np.random.random`/`rand` become a seeded generator.

`ops/nn_test.py`:

- `NNOpsCorrectnessTest.test_softmax`, `test_log_softmax`: verbatim
  (values for `axis=None`, 0, -1 and the default).
- `NNOpsCorrectnessTest.test_softmax_correctness_with_axis_tuple`,
  `test_log_softmax_correctness_with_axis_tuple`: verbatim, the loop over
  `combinations(range(3), 2)` parametrized.
- `NNOpsCorrectnessTest.test_normalize`: verbatim, split into one test per
  call (`axis=None`, 0, -1, `order=3`, and `epsilon=1e-5` with a norm
  below epsilon).
- `NNOpsStaticShapeTest.test_softmax`, `test_log_softmax`,
  `test_normalize` and `NNOpsDynamicShapeTest.test_softmax`,
  `test_log_softmax`, `test_normalize`: the `KerasTensor` inputs (symbolic
  shapes; keras_stable ops take tensors) are replaced by concrete zeros of
  that shape, with 4 for each `None`; the output shapes are checked as
  before, and `log_softmax(x, axis=3)` still raises a `ValueError`.
- `NNOpsDynamicShapeTest.test_softmax_in_graph`: verbatim, with the layer
  calling `keras_stable.ops.softmax` (a functional model traces the op
  with an unknown dimension, then predicts), and `predict(verbose=0)`.
- `NNOpsDtypeTest.test_softmax`, `test_log_softmax` (dtypes float16,
  float32, bfloat16): the expected dtype is that of `keras.ops.softmax` /
  `keras.ops.log_softmax` on the same tensor instead of JAX's (same
  promotion rules, without importing JAX on other backends); the
  `symbolic_call` half is dropped (no `Operation` class).
- `NNOpsBehaviorTest.test_softmax_on_axis_with_size_one_warns`: `pytest.
  warns` for `assertWarnsRegex`; strict xfail: keras_stable does not warn
  on a softmax over a size-1 axis (documented in `softmax`).
- `NNOpsBehaviorTest.test_softmax_and_normalize_reject_out_of_range_axis`:
  a concrete `(3, 4)` array instead of a `KerasTensor`, and the message
  regex "axis 10 is out of bounds" adapted to keras_stable's wording
  ("Invalid `axis`=10"; the exception type, `ValueError`, is Keras's).
- `NNOpsBehaviorTest.test_normalize_order_validation`: the regex
  "Argument `order` must be an int >= 1" adapted to "`order` must be an int
  >= 1" (keras_stable's messages start with the argument's name); the
  exception type and the four rejected orders are Keras's.

`ops/math_test.py`:

- `MathOpsCorrectnessTest.test_logsumexp`: verbatim (default axis = all
  axes, and `axis=1`).
- `LogsumexpTest.test_logsumexp_call`: `kmath.Logsumexp(axis, keepdims)
  .call(x)` becomes `logsumexp(x, axis=axis, keepdims=keepdims)`.
- `MathOpsStaticShapeTest.test_logsumexp`, `MathOpsDynamicShapeTest.
  test_logsumexp`: concrete zeros instead of `KerasTensor`s (4 for
  `None`), output shapes as before (`axis=None`, 1, `(1, 2)`,
  `keepdims=True`).

`ops/linalg_test.py`:

- `LinalgOpsCorrectnessTest.test_norm` (ndim 1 and 2 x every `ord` x
  `axis` in None, 1, -1, (0, 1) x `keepdims`): verbatim expectations, with
  one adaptation: where Keras expects an `IndexError`/`RuntimeError` on
  torch (a torch error passed through), keras_stable raises a `ValueError`
  on every backend, as Keras does on the others. Strict xfail: the matrix
  norms other than Frobenius (`ord` in "nuc", inf, -inf, 1, -1, 2, -2 over
  2 axes, `axis=None` on a 2-D input included), which `safe_norm` does not
  support and rejects with a `ValueError` naming `ord`.
- `LinalgOpsStaticShapeTest.test_norm`, `LinalgOpsDynamicShapeTest.
  test_norm`: concrete zeros instead of `KerasTensor`s, shapes as before.
- `ops/numpy_test.py` has no norm case (`keras.ops.norm` is tested in
  `linalg_test.py` only), so nothing is taken from it.

`layers/activations/softmax_test.py` (`SoftmaxTest`, Keras's masking
cases for softmax; `keras.ops.softmax` has no mask) and
`activations/activations_test.py` (`ActivationsTest`, whose
`activations.softmax`/`log_softmax` call `keras.ops.softmax`/
`log_softmax`):

- `softmax.Softmax(axis=a)(x, mask=m)` becomes `softmax(x, axis=a,
  mask=m)`: `test_softmax_correctness`, `test_softmax_correctness_with_mask`
  (`axis=(1, 0)`), `test_softmax_correctness_with_axis`,
  `test_softmax_masked_values_are_zero_including_fully_masked`,
  `test_softmax_mask_broadcastable`,
  `test_softmax_mask_broadcastable_fewer_dims`: verbatim otherwise (0/1
  masks; Keras's layer keeps mask > 0.5, keras_stable mask > 0).
- `test_softmax_mask_shape_mismatch`, `test_softmax_mask_too_many_dims`:
  the regexes "broadcastable" and "must not have more dimensions" adapted
  to keras_stable's wording ("does not broadcast", "has a higher rank");
  the exception type is Keras's. `test_softmax` (`run_layer_test`, layer
  machinery) is not an op case and is left out.
- `activations.softmax`/`log_softmax` become `softmax`/`log_softmax`:
  every softmax and log-softmax case of `ActivationsTest` verbatim
  (`test_softmax`, `_2d_axis_0`, `_3d_axis_tuple`, `_1d`, `_higher_dim`,
  `_higher_dim_multiple_axes`, `_negative_axis`, `test_temporal_softmax`
  and their log-softmax twins), each twin pair one function parametrized
  over the op (`test_activations_*`; `test_softmax` has no log-softmax
  twin in Keras, one is added), with the helpers `_ref_softmax` and
  `_ref_log_softmax` copied.

Deliberate differences are recorded as strict xfails whose reason names
them, so that a change on either side is noticed.
"""

import itertools

import keras
import numpy as np
import pytest

from keras_stable.ops import l2_normalize
from keras_stable.ops import log_softmax
from keras_stable.ops import logsumexp
from keras_stable.ops import safe_norm
from keras_stable.ops import softmax

BACKEND = keras.backend.backend()
rng = np.random.default_rng(1234)

NO_WARNING = "keras_stable.ops.softmax does not warn on a softmax over a size-1 axis"
MATRIX_NORM = (
    "safe_norm supports only the Frobenius matrix norm (ord None/'fro' over "
    "2 axes); other matrix orders raise a ValueError naming `ord`"
)


def _to_numpy(x):
    if isinstance(x, (list, tuple, float, int, np.ndarray, np.generic)):
        return np.asarray(x)
    return keras.ops.convert_to_numpy(x)


def assert_all_close(actual, desired, atol=1e-6, rtol=1e-6):
    """`testing.TestCase.assertAllClose`, without keras.src."""
    np.testing.assert_allclose(_to_numpy(actual), _to_numpy(desired), atol=atol, rtol=rtol)


def _zeros(shape):
    """A concrete stand-in for `KerasTensor(shape)`: 4 for each None."""
    return np.zeros(tuple(4 if d is None else d for d in shape), "float32")


def _shape(shape):
    return tuple(4 if d is None else d for d in shape)


# ==========================================================================
# ops/nn_test.py: NNOpsCorrectnessTest
# ==========================================================================


def test_softmax():
    x = np.array([[1, 2, 3], [1, 2, 3]], dtype=np.float32)
    assert_all_close(
        softmax(x, axis=None),  # Reduce on all axes.
        [[0.045015, 0.122364, 0.33262], [0.045015, 0.122364, 0.33262]],
    )
    assert_all_close(
        softmax(x, axis=0),
        [[0.5, 0.5, 0.5], [0.5, 0.5, 0.5]],
    )
    assert_all_close(
        softmax(x, axis=-1),
        [
            [0.09003057, 0.24472848, 0.66524094],
            [0.09003057, 0.24472848, 0.66524094],
        ],
    )
    assert_all_close(
        softmax(x),  # Default axis should be -1.
        [
            [0.09003057, 0.24472848, 0.66524094],
            [0.09003057, 0.24472848, 0.66524094],
        ],
    )


@pytest.mark.parametrize("axis", list(itertools.combinations(range(3), 2)), ids=str)
def test_softmax_correctness_with_axis_tuple(axis):
    input = np.array([[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]]])
    result = softmax(input, axis=axis)
    normalized_sum_by_axis = np.sum(keras.ops.convert_to_numpy(result), axis=axis)
    assert_all_close(normalized_sum_by_axis, 1.0)


def test_log_softmax():
    x = np.array([[1, 2, 3], [1, 2, 3]], dtype=np.float32)
    assert_all_close(
        log_softmax(x, axis=None),  # Reduce on all axes.
        [
            [-3.100753, -2.100753, -1.100753],
            [-3.100753, -2.100753, -1.100753],
        ],
    )
    assert_all_close(
        log_softmax(x, axis=0),
        [
            [-0.693147, -0.693147, -0.693147],
            [-0.693147, -0.693147, -0.693147],
        ],
    )
    assert_all_close(
        log_softmax(x, axis=-1),
        [
            [-2.407606, -1.407606, -0.407606],
            [-2.407606, -1.407606, -0.407606],
        ],
    )
    assert_all_close(
        log_softmax(x),  # Default axis should be -1.
        [
            [-2.407606, -1.407606, -0.407606],
            [-2.407606, -1.407606, -0.407606],
        ],
    )


@pytest.mark.parametrize("axis", list(itertools.combinations(range(3), 2)), ids=str)
def test_log_softmax_correctness_with_axis_tuple(axis):
    input = np.array([[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]]])
    result = log_softmax(input, axis=axis)
    normalized_sum_by_axis = np.sum(np.exp(keras.ops.convert_to_numpy(result)), axis=axis)
    assert_all_close(normalized_sum_by_axis, 1.0)


NORMALIZE_X = np.array([[1, 2, 3], [1, 2, 3]], dtype=np.float32)


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        (
            {"axis": None},
            [[0.18898225, 0.3779645, 0.56694674], [0.18898225, 0.3779645, 0.56694674]],
        ),
        ({"axis": 0}, [[0.70710677, 0.70710677, 0.70710677], [0.70710677, 0.70710677, 0.70710677]]),
        ({"axis": -1}, [[0.26726124, 0.53452247, 0.8017837], [0.26726124, 0.53452247, 0.8017837]]),
        ({"order": 3}, [[0.30285344, 0.6057069, 0.9085603], [0.30285344, 0.6057069, 0.9085603]]),
    ],
    ids=["axis_None", "axis_0", "axis_-1", "order_3"],
)
def test_normalize(kwargs, expected):
    assert_all_close(l2_normalize(NORMALIZE_X, **kwargs), expected)


def test_normalize_norm_below_epsilon():
    # linalg.norm(x, ...) < epsilon
    x = np.array([[1e-6, 1e-8]], dtype=np.float32)
    assert_all_close(
        l2_normalize(x, axis=-1, order=2, epsilon=1e-5),
        [[1e-1, 1e-3]],
    )


# ==========================================================================
# ops/nn_test.py: NNOpsStaticShapeTest / NNOpsDynamicShapeTest
# ==========================================================================


@pytest.mark.parametrize("shape", [(1, 2, 3), (None, 2, 3)], ids=["static", "dynamic"])
def test_softmax_shape(shape):
    x = _zeros(shape)
    assert tuple(softmax(x).shape) == _shape(shape)
    assert tuple(softmax(x, axis=1).shape) == _shape(shape)
    assert tuple(softmax(x, axis=-1).shape) == _shape(shape)


@pytest.mark.parametrize("shape", [(1, 2, 3), (None, 2, 3)], ids=["static", "dynamic"])
def test_log_softmax_shape(shape):
    x = _zeros(shape)
    assert tuple(log_softmax(x).shape) == _shape(shape)
    assert tuple(log_softmax(x, axis=1).shape) == _shape(shape)
    assert tuple(log_softmax(x, axis=-1).shape) == _shape(shape)
    if None in shape:  # the dynamic-shape case also checks a bad axis
        with pytest.raises(ValueError):
            log_softmax(x, axis=3)


@pytest.mark.parametrize("shape", [(1, 2, 3), (None, 2, 3)], ids=["static", "dynamic"])
def test_normalize_shape(shape):
    assert tuple(l2_normalize(_zeros(shape)).shape) == _shape(shape)


def test_softmax_in_graph():
    class SoftmaxLayer(keras.Layer):
        def call(self, x):
            return softmax(x, axis=-1)

    class Model(keras.Model):
        def __init__(self):
            x = keras.Input(shape=(None,))
            y = SoftmaxLayer()(x)
            super().__init__(inputs=x, outputs=y)

    # Make sure Keras is able to compile the model graph
    model = Model()
    x = keras.ops.array([[1.0, 2.0, 3.0, 4.0]])
    model.predict(x, verbose=0)


# ==========================================================================
# ops/nn_test.py: NNOpsDtypeTest
# ==========================================================================

FLOAT_DTYPES = ["float16", "float32", "bfloat16"]  # Keras's list, less float64


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_softmax_dtype(dtype):
    x = keras.ops.ones((10,), dtype=dtype)
    expected_dtype = keras.backend.standardize_dtype(keras.ops.softmax(x).dtype)
    assert keras.backend.standardize_dtype(softmax(x).dtype) == expected_dtype


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_log_softmax_dtype(dtype):
    x = keras.ops.ones((10,), dtype=dtype)
    expected_dtype = keras.backend.standardize_dtype(keras.ops.log_softmax(x).dtype)
    assert keras.backend.standardize_dtype(log_softmax(x).dtype) == expected_dtype


# ==========================================================================
# ops/nn_test.py: NNOpsBehaviorTest
# ==========================================================================


@pytest.mark.xfail(strict=True, reason=NO_WARNING)
def test_softmax_on_axis_with_size_one_warns():
    x = np.array([[1.0]])
    # Applying softmax on the second axis, which has size 1
    axis = 1

    # Expected warning message
    expected_warning_regex = (
        r"You are using a softmax over axis 1 "
        r"of a tensor of shape \(1, 1\)\. This axis "
        r"has size 1\. The softmax operation will always return "
        r"the value 1, which is likely not what you intended\. "
        r"Did you mean to use a sigmoid instead\?"
    )

    with pytest.warns(UserWarning, match=expected_warning_regex):
        softmax(x, axis)


def test_softmax_and_normalize_reject_out_of_range_axis():
    a = np.zeros((3, 4), "float32")
    with pytest.raises(ValueError, match=r"Invalid `axis`=10"):
        softmax(a, axis=10)
    with pytest.raises(ValueError, match=r"Invalid `axis`=10"):
        l2_normalize(a, axis=10)


@pytest.mark.parametrize(
    "order", ["a", -1, 0, 2.5], ids=["non_integer", "negative", "zero", "float"]
)
def test_normalize_order_validation(order):
    with pytest.raises(ValueError, match="`order` must be an int >= 1"):
        l2_normalize(np.array([1, 2, 3]), order=order)


# ==========================================================================
# ops/math_test.py
# ==========================================================================


def test_logsumexp():
    x = rng.random((5, 5))
    outputs = logsumexp(x)
    expected = np.log(np.sum(np.exp(x)))
    assert_all_close(outputs, expected)

    outputs = logsumexp(x, axis=1)
    expected = np.log(np.sum(np.exp(x), axis=1))
    assert_all_close(outputs, expected)


def test_logsumexp_call():
    x = np.array([[1, 2], [3, 4]], dtype=np.float32)
    axis = 0
    keepdims = True
    output = logsumexp(x, axis=axis, keepdims=keepdims)
    expected_output = np.log(np.sum(np.exp(x), axis=axis, keepdims=keepdims))
    assert_all_close(output, expected_output)


def test_logsumexp_static_shape():
    x = _zeros((1, 2, 3))
    assert tuple(logsumexp(x).shape) == ()


def test_logsumexp_dynamic_shape():
    x = _zeros((None, 2, 3))
    assert tuple(logsumexp(x).shape) == ()
    assert tuple(logsumexp(x, axis=1).shape) == _shape((None, 3))
    assert tuple(logsumexp(x, axis=(1, 2)).shape) == _shape((None,))
    assert tuple(logsumexp(x, keepdims=True).shape) == (1, 1, 1)


# ==========================================================================
# ops/linalg_test.py
# ==========================================================================


def _norm_cases():
    for ndim, ord, axis, keepdims in itertools.product(
        [1, 2],
        [None, "fro", "nuc", -np.inf, -2, -1, 0, 1, 2, np.inf, 3],
        [None, 1, -1, (0, 1)],
        [False, True],
    ):
        vector_norm = (ndim == 1) or isinstance(axis, int)
        matrix = not vector_norm and not (ndim == 1 and isinstance(axis, tuple))
        unsupported = matrix and ord not in (None, "fro", 0, 3)
        marks = (
            [pytest.mark.xfail(strict=True, raises=ValueError, reason=MATRIX_NORM)]
            if unsupported
            else []
        )
        name = f"ndim{ndim}-ord{ord}-axis{axis}-keepdims{keepdims}".replace(" ", "")
        yield pytest.param(ndim, ord, axis, keepdims, marks=marks, id=name)


@pytest.mark.parametrize("ndim, ord, axis, keepdims", list(_norm_cases()))
def test_norm(ndim, ord, axis, keepdims):
    if ndim == 1:
        x = rng.random((5,)).astype("float32")
    else:
        x = rng.random((5, 6)).astype("float32")

    vector_norm = (ndim == 1) or isinstance(axis, int)

    axis_out_of_bounds = ndim == 1 and (axis == 1 or isinstance(axis, tuple))
    expected_error = None
    if (
        axis_out_of_bounds
        or (vector_norm and isinstance(axis, tuple))  # inv. axis for vector
        or (vector_norm and ord in ("fro", "nuc"))  # invalid ord for vector
        or (not vector_norm and ord in (0, 3))  # invalid ord for matrix
    ):
        # Keras: IndexError/RuntimeError on torch, ValueError elsewhere;
        # keras_stable: ValueError on every backend.
        expected_error = ValueError

    if expected_error is not None:
        with pytest.raises(expected_error):
            safe_norm(x, ord=ord, axis=axis, keepdims=keepdims)
        return
    output = safe_norm(x, ord=ord, axis=axis, keepdims=keepdims)
    expected_result = np.linalg.norm(x, ord=ord, axis=axis, keepdims=keepdims)
    assert_all_close(output, expected_result, atol=1e-5)


@pytest.mark.parametrize("batch", [10, None], ids=["static", "dynamic"])
def test_norm_shape(batch):
    x = _zeros((batch, 3))
    assert tuple(safe_norm(x).shape) == ()

    x = _zeros((batch, 3, 3))
    assert tuple(safe_norm(x, axis=1).shape) == _shape((batch, 3))
    assert tuple(safe_norm(x, axis=1, keepdims=True).shape) == _shape((batch, 1, 3))


# ==========================================================================
# layers/activations/softmax_test.py: SoftmaxTest (masking), as ops
# ==========================================================================


def test_softmax_layer_correctness():
    input = np.array([[1.0, 2.0, 1.0], [1.0, 2.0, 1.0]])
    expected_output = np.array(
        [
            [0.21194157, 0.5761169, 0.21194157],
            [0.21194157, 0.5761169, 0.21194157],
        ]
    )
    result = softmax(input)
    assert_all_close(result, expected_output)


def test_softmax_correctness_with_mask():
    input = np.array([[1.0, 2.0, 1.0], [1.0, 2.0, 1.0]])
    mask = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    expected_output = np.array([[0.21194154, 0.0, 0.21194154], [0.0, 0.57611686, 0.0]])
    result = softmax(input, axis=(1, 0), mask=mask)
    assert_all_close(result, expected_output)


def test_softmax_correctness_with_axis():
    input = np.array([[1.0, 2.0, 1.0], [1.0, 2.0, 1.0]])
    expected_output = np.array(
        [
            [0.21194157, 0.5761169, 0.21194157],
            [0.21194157, 0.5761169, 0.21194157],
        ]
    )
    result = softmax(input, axis=(1))
    assert_all_close(result, expected_output)


def test_softmax_masked_values_are_zero_including_fully_masked():
    input = np.array(
        [
            [1.0, 2.0, 5.0, 1.0],
            [1.0, 1.0, 1.0, 1.0],
            [3.0, 1.0, 2.0, 4.0],
        ],
        dtype=np.float32,
    )
    mask = np.array(
        [
            [True, True, False, False],  # Partially masked
            [False, False, False, False],  # Fully masked
            [True, True, True, True],  # Not masked
        ],
        dtype=bool,
    )
    expected_output = np.array(
        [
            [0.268941, 0.731059, 0.0, 0.0],  # last two masked
            [0.0, 0.0, 0.0, 0.0],  # Fully masked row should be all zeros
            [0.236883, 0.032059, 0.087144, 0.643914],
        ]
    )
    result = softmax(input, mask=mask)
    assert_all_close(result, expected_output)


def test_softmax_mask_broadcastable():
    # mask (1, 3) broadcastable to inputs (2, 3) — should work
    inputs = np.array([[1.0, 2.0, 1.0], [3.0, 4.0, 5.0]])
    mask = np.array([[1.0, 0.0, 1.0]])
    result = keras.ops.convert_to_numpy(softmax(inputs, mask=mask))
    # Masked position (column 1) should be 0
    assert_all_close(result[:, 1], [0.0, 0.0])


def test_softmax_mask_broadcastable_fewer_dims():
    # mask (3,) broadcastable to inputs (2, 3) — should work
    inputs = np.array([[1.0, 2.0, 1.0], [3.0, 4.0, 5.0]])
    mask = np.array([1.0, 0.0, 1.0])
    result = keras.ops.convert_to_numpy(softmax(inputs, axis=-1, mask=mask))
    assert_all_close(result[:, 1], [0.0, 0.0])


def test_softmax_mask_shape_mismatch():
    # mask (2, 3) with inputs (1, 3) — mask is larger, not allowed
    inputs = np.array([[1.0, 2.0, 1.0]])
    mask = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    with pytest.raises(ValueError, match="does not broadcast"):
        softmax(inputs, mask=mask)


def test_softmax_mask_too_many_dims():
    # mask has more dimensions than inputs — not allowed
    inputs = np.array([[1.0, 2.0, 1.0]])
    mask = np.array([[[1.0, 0.0, 1.0]]])
    with pytest.raises(ValueError, match="has a higher rank"):
        softmax(inputs, mask=mask)


# ==========================================================================
# activations/activations_test.py: ActivationsTest (softmax, log_softmax)
# ==========================================================================


def _ref_softmax(values):
    m = np.max(values)
    e = np.exp(values - m)
    return e / np.sum(e)


def _ref_log_softmax(values):
    max_val = np.max(values)  # for numerical stability
    stabilized_values = values - max_val
    log_sum_exp = np.log(np.sum(np.exp(stabilized_values)))
    return stabilized_values - log_sum_exp


ACTIVATIONS = pytest.mark.parametrize(
    "op, ref",
    [(softmax, _ref_softmax), (log_softmax, _ref_log_softmax)],
    ids=["softmax", "log_softmax"],
)


@ACTIVATIONS
def test_activations_default_axis(op, ref):
    x = rng.random((2, 5))
    result = keras.ops.convert_to_numpy(op(x[np.newaxis, :]))[0]
    expected = ref(x[0])
    assert_all_close(result[0], expected, rtol=1e-5)


@ACTIVATIONS
def test_activations_2d_axis_0(op, ref):
    x = rng.random((2, 5))
    result = keras.ops.convert_to_numpy(op(x[np.newaxis, :], axis=1))[0]
    expected = np.zeros((2, 5))
    for i in range(5):
        expected[:, i] = ref(x[:, i])
    assert_all_close(result, expected, rtol=1e-5)


@ACTIVATIONS
def test_activations_3d_axis_tuple(op, ref):
    x = rng.random((2, 3, 5))
    result = op(x, axis=(1, 2))
    expected = np.zeros((2, 3, 5))
    for i in range(2):
        expected[i, :, :] = ref(x[i, :, :])
    assert_all_close(result, expected, rtol=1e-5)


@ACTIVATIONS
def test_activations_1d(op, ref):
    x = rng.random(5)
    result = op(x)
    expected = ref(x)
    assert_all_close(result, expected, rtol=1e-5)


@ACTIVATIONS
def test_activations_higher_dim(op, ref):
    x = rng.random((2, 3, 4, 5))
    result = op(x, axis=(2, 3))
    expected = np.zeros((2, 3, 4, 5))
    for i in range(2):
        for j in range(3):
            expected[i, j, :, :] = ref(x[i, j, :, :])
    assert_all_close(result, expected, rtol=1e-5)


@ACTIVATIONS
def test_activations_higher_dim_multiple_axes(op, ref):
    x = rng.random((2, 3, 4, 5, 6))
    result = op(x, axis=(2, 3, 4))
    expected = np.zeros((2, 3, 4, 5, 6))
    for i in range(2):
        for j in range(3):
            expected[i, j, :, :, :] = ref(x[i, j, :, :, :])
    assert_all_close(result, expected, rtol=1e-5)


@ACTIVATIONS
def test_activations_negative_axis(op, ref):
    x = rng.random((2, 5))
    result = op(x, axis=-1)
    expected = np.zeros((2, 5))
    for i in range(2):
        expected[i, :] = ref(x[i, :])
    assert_all_close(result, expected, rtol=1e-5)


@ACTIVATIONS
def test_activations_temporal(op, ref):
    x = rng.random((2, 2, 3)) * 10
    result = keras.ops.convert_to_numpy(op(x[np.newaxis, :]))[0]
    expected = ref(x[0, 0])
    assert_all_close(result[0, 0], expected, rtol=1e-5)
