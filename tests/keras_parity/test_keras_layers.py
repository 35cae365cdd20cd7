"""Keras's own layer tests, run against the keras_stable layers.

Where each case comes from (the Keras 3.15.1 wheel installed in the venv,
`keras/src/...`), and how it was adapted. Strict xfails mark the cases
that fail only because of a deliberate difference; each reason names it.

`layers/activations/softmax_test.py` (`SoftmaxTest`), against `StableSoftmax`:

- every case: `softmax.Softmax` renamed `StableSoftmax`; nothing else
  changed unless listed below.
- `test_softmax`, `test_softmax_correctness`,
  `test_softmax_correctness_with_mask` (`axis=(1, 0)`),
  `test_softmax_correctness_with_axis`,
  `test_softmax_masked_values_are_zero_including_fully_masked`,
  `test_softmax_mask_broadcastable`, `test_softmax_mask_shape_mismatch`,
  `test_softmax_mask_too_many_dims`: verbatim, and they pass (the two
  error cases match the wording of our `ValueError`, which keeps Keras's
  phrases "broadcastable" and "must not have more dimensions").
- `test_softmax_mask_broadcastable_fewer_dims`: verbatim, strict xfail: a
  mask of lower rank than the input covers its *leading* dimensions (the
  Keras mask convention of `Embedding(mask_zero=True)` and `Masking`: a
  `(batch, time)` mask of a `(batch, time, features)` input), so a `(3,)`
  mask of a `(2, 3)` input is a shape error, where `keras.layers.Softmax`
  broadcasts it NumPy-style from the right (pairing `time` with
  `features` for a sequence mask).
- added `test_softmax_correctness_with_mask_single_axis`: the input and
  mask of `test_softmax_correctness_with_mask` with `axis=-1`, also
  against `keras.layers.Softmax`.

`layers/normalization/unit_normalization_test.py` (`UnitNormalizationTest`),
against `L2Normalize` (counterpart of `keras.layers.UnitNormalization`):

- `layers.UnitNormalization` renamed `L2Normalize`; `squared_l2_norm` uses
  `keras.ops.convert_to_numpy` instead of `keras.src.backend`.
- `test_un_basics`, `test_correctness`: verbatim (`axis=(1, 2)` included),
  and they pass.
- `test_invalid_axis`: verbatim, strict xfail: keras_stable raises a
  `ValueError` naming the argument for every bad argument
  (`keras_stable.common.checks`), where Keras raises a `TypeError`.
- added `test_invalid_axis_value_error`: the same call, our exception.

`testing.TestCase.run_layer_test` (`keras/src/testing/test_case.py`) for
each of the four layers (`RunLayerTest`, new): serialization round trips,
`supports_masking=True`, no weights, variables or seed generators, built
after instantiation (and not built when a subclass overrides `build`),
expected output shapes and dtype (symbolic and eager), a compiled training
step (`run_training_check`) and the `mixed_float16` check
(`run_mixed_precision_check`; Keras itself skips it on torch without
CUDA), for an int `axis` and a tuple of axes. The `input_data` cases also
compare the output with the Keras counterpart (`keras.layers.Softmax`,
`keras.ops.log_softmax`, `keras.ops.norm`, `keras.layers.UnitNormalization`)
as `expected_output`.

`KerasCounterpartTest` (new) compares with `keras.layers.Softmax` and
`UnitNormalization` where they are right (defaults, configs, output shapes
and dtypes, values, `0`/`1` masks), and records each deliberate difference
as a strict xfail whose reason names it, so that a change on either side
is noticed.

The module ignores two warnings, both Keras's own, raised by its training
check (warnings are errors in this project): it fits on a generator with
the default `shuffle=True`, and the model of a weightless layer has no
trainable weights.
"""

import inspect

import keras
import numpy as np
import pytest
from keras.src import testing

from keras_stable.layers import L2Normalize
from keras_stable.layers import LogSoftmax
from keras_stable.layers import SafeNorm
from keras_stable.layers import StableSoftmax

# Keras's own `run_training_check` fits on a Python generator with the
# default `shuffle=True`, and Keras 3.15 then warns about itself; on a layer
# without weights it also warns that the model has none (Keras's own Softmax
# and UnitNormalization tests meet both). Warnings are errors here
# (setup.cfg): only these two Keras messages are ignored.
pytestmark = [
    pytest.mark.filterwarnings(
        "ignore:`shuffle=True` was passed, but will be ignored since the "
        "data `x` was provided as a generator:UserWarning"
    ),
    pytest.mark.filterwarnings("ignore:The model does not have any trainable weights:UserWarning"),
]

LEADING_MASK = (
    "deliberate: a lower-rank mask covers the input's leading dimensions "
    "(the Keras mask convention of Embedding/Masking), so a (3,) mask of a "
    "(2, 3) input is a shape error; keras.layers.Softmax broadcasts it from "
    "the right"
)
VALUE_ERROR = (
    "deliberate: keras_stable raises ValueError naming the argument for every "
    "bad argument (keras_stable.common.checks); Keras raises TypeError"
)


def squared_l2_norm(x):
    x = keras.ops.convert_to_numpy(x)
    return np.sum(x**2)


# ----------------------------------------------------------------------------
# keras/src/layers/activations/softmax_test.py
# ----------------------------------------------------------------------------
class SoftmaxTest(testing.TestCase):
    def test_softmax(self):
        self.run_layer_test(
            StableSoftmax,
            init_kwargs={},
            input_shape=(2, 3, 4),
            supports_masking=True,
            assert_built_after_instantiation=True,
        )

    def test_softmax_correctness(self):
        softmax_layer = StableSoftmax()
        input = np.array([[1.0, 2.0, 1.0], [1.0, 2.0, 1.0]])
        expected_output = np.array(
            [
                [0.21194157, 0.5761169, 0.21194157],
                [0.21194157, 0.5761169, 0.21194157],
            ]
        )
        result = softmax_layer(input)
        self.assertAllClose(result, expected_output)

    def test_softmax_correctness_with_mask(self):
        softmax_layer = StableSoftmax(axis=(1, 0))
        input = np.array([[1.0, 2.0, 1.0], [1.0, 2.0, 1.0]])
        mask = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
        expected_output = np.array([[0.21194154, 0.0, 0.21194154], [0.0, 0.57611686, 0.0]])
        result = softmax_layer(input, mask=mask)
        self.assertAllClose(result, expected_output)

    def test_softmax_correctness_with_mask_single_axis(self):
        # Adapted from test_softmax_correctness_with_mask: axis=-1.
        softmax_layer = StableSoftmax(axis=-1)
        input = np.array([[1.0, 2.0, 1.0], [1.0, 2.0, 1.0]])
        mask = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
        expected_output = np.array([[0.5, 0.0, 0.5], [0.0, 1.0, 0.0]])
        result = softmax_layer(input, mask=mask)
        self.assertAllClose(result, expected_output)
        self.assertAllClose(result, keras.layers.Softmax(axis=-1)(input, mask=mask))

    def test_softmax_correctness_with_axis(self):
        softmax_layer = StableSoftmax(axis=(1))
        input = np.array([[1.0, 2.0, 1.0], [1.0, 2.0, 1.0]])
        expected_output = np.array(
            [
                [0.21194157, 0.5761169, 0.21194157],
                [0.21194157, 0.5761169, 0.21194157],
            ]
        )
        result = softmax_layer(input)
        self.assertAllClose(result, expected_output)

    def test_softmax_masked_values_are_zero_including_fully_masked(self):
        """
        Tests softmax with mask on default axis (-1).
        Ensures output is 0 where mask is False.
        Includes a row where all elements are masked.
        """
        softmax_layer = StableSoftmax()  # Default axis = -1

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

        result = softmax_layer(input, mask=mask)

        self.assertAllClose(result, expected_output)

    def test_softmax_mask_broadcastable(self):
        softmax_layer = StableSoftmax()
        # mask (1, 3) broadcastable to inputs (2, 3) — should work
        inputs = np.array([[1.0, 2.0, 1.0], [3.0, 4.0, 5.0]])
        mask = np.array([[1.0, 0.0, 1.0]])
        result = softmax_layer(inputs, mask=mask)
        # Masked position (column 1) should be 0
        self.assertAllClose(result[:, 1], [0.0, 0.0])

    @pytest.mark.xfail(strict=True, raises=ValueError, reason=LEADING_MASK)
    def test_softmax_mask_broadcastable_fewer_dims(self):
        softmax_layer = StableSoftmax(axis=-1)
        # mask (3,) broadcastable to inputs (2, 3) — should work
        inputs = np.array([[1.0, 2.0, 1.0], [3.0, 4.0, 5.0]])
        mask = np.array([1.0, 0.0, 1.0])
        result = softmax_layer(inputs, mask=mask)
        self.assertAllClose(result[:, 1], [0.0, 0.0])

    def test_softmax_mask_shape_mismatch(self):
        softmax_layer = StableSoftmax()
        # mask (2, 3) with inputs (1, 3) — mask is larger, not allowed
        inputs = np.array([[1.0, 2.0, 1.0]])
        mask = np.array([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
        with self.assertRaisesRegex(ValueError, "broadcastable"):
            softmax_layer(inputs, mask=mask)

    def test_softmax_mask_too_many_dims(self):
        softmax_layer = StableSoftmax()
        # mask has more dimensions than inputs — not allowed
        inputs = np.array([[1.0, 2.0, 1.0]])
        mask = np.array([[[1.0, 0.0, 1.0]]])
        with self.assertRaisesRegex(ValueError, "must not have more dimensions"):
            softmax_layer(inputs, mask=mask)


# ----------------------------------------------------------------------------
# keras/src/layers/normalization/unit_normalization_test.py
# ----------------------------------------------------------------------------
class UnitNormalizationTest(testing.TestCase):
    def test_un_basics(self):
        self.run_layer_test(
            L2Normalize,
            init_kwargs={"axis": -1},
            input_shape=(2, 3),
            expected_output_shape=(2, 3),
            supports_masking=True,
            assert_built_after_instantiation=True,
        )
        self.run_layer_test(
            L2Normalize,
            init_kwargs={"axis": (1, 2)},
            input_shape=(1, 3, 3),
            expected_output_shape=(1, 3, 3),
            supports_masking=True,
            assert_built_after_instantiation=True,
        )

    @pytest.mark.xfail(strict=True, raises=ValueError, reason=VALUE_ERROR)
    def test_invalid_axis(self):
        with self.assertRaisesRegex(
            TypeError,
            ("Invalid value for `axis` argument: expected an int or a list/tuple of ints."),
        ):
            L2Normalize(axis={"axis": -1})

    def test_invalid_axis_value_error(self):
        # Adapted from test_invalid_axis: our exception and wording.
        with self.assertRaisesRegex(ValueError, "`axis` must be an int"):
            L2Normalize(axis={"axis": -1})

    def test_correctness(self):
        layer = L2Normalize(axis=-1)
        inputs = np.random.normal(size=(2, 3))
        outputs = layer(inputs)
        self.assertAllClose(squared_l2_norm(outputs[0, :]), 1.0)
        self.assertAllClose(squared_l2_norm(outputs[1, :]), 1.0)

        layer = L2Normalize(axis=(1, 2))
        inputs = np.random.normal(size=(2, 3, 3))
        outputs = layer(inputs)
        self.assertAllClose(squared_l2_norm(outputs[0, :, :]), 1.0)
        self.assertAllClose(squared_l2_norm(outputs[1, :, :]), 1.0)

        layer = L2Normalize(axis=1)
        inputs = np.random.normal(size=(2, 3, 2))
        outputs = layer(inputs)
        self.assertAllClose(squared_l2_norm(outputs[0, :, 0]), 1.0)
        self.assertAllClose(squared_l2_norm(outputs[1, :, 0]), 1.0)
        self.assertAllClose(squared_l2_norm(outputs[0, :, 1]), 1.0)
        self.assertAllClose(squared_l2_norm(outputs[1, :, 1]), 1.0)


# ----------------------------------------------------------------------------
# keras.src.testing.TestCase.run_layer_test, for each layer
# ----------------------------------------------------------------------------
NO_STATE = {
    "expected_num_trainable_weights": 0,
    "expected_num_non_trainable_weights": 0,
    "expected_num_non_trainable_variables": 0,
    "expected_num_seed_generators": 0,
    "expected_num_losses": 0,
    "supports_masking": True,
    "assert_built_after_instantiation": True,
    "run_training_check": True,
    "run_mixed_precision_check": True,
}


def _data(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


class RunLayerTest(testing.TestCase):
    def run_shapes(self, layer_cls, cases):
        for init_kwargs, input_shape, output_shape in cases:
            self.run_layer_test(
                layer_cls,
                init_kwargs=init_kwargs,
                input_shape=input_shape,
                expected_output_shape=output_shape,
                expected_output_dtype="float32",
                **NO_STATE,
            )

    def run_values(self, layer_cls, init_kwargs, x, expected):
        self.run_layer_test(
            layer_cls,
            init_kwargs=init_kwargs,
            input_data=x,
            expected_output=expected,
            expected_output_dtype="float32",
            **NO_STATE,
        )

    def test_stable_softmax(self):
        self.run_shapes(
            StableSoftmax,
            [
                ({}, (2, 3, 4), (2, 3, 4)),
                ({"axis": 1}, (2, 3, 4), (2, 3, 4)),
                ({"axis": 0}, (5,), (5,)),
                ({"axis": (1, 2)}, (2, 3, 4), (2, 3, 4)),
            ],
        )
        x = _data((2, 3, 4))
        self.run_values(StableSoftmax, {}, x, keras.layers.Softmax()(x))
        self.run_values(StableSoftmax, {"axis": 1}, x, keras.layers.Softmax(axis=1)(x))
        self.run_values(StableSoftmax, {"axis": (1, 2)}, x, keras.layers.Softmax(axis=(1, 2))(x))

    def test_log_softmax(self):
        self.run_shapes(
            LogSoftmax,
            [
                ({}, (2, 3, 4), (2, 3, 4)),
                ({"axis": 1}, (2, 3, 4), (2, 3, 4)),
                ({"axis": [0, 2]}, (2, 3, 4), (2, 3, 4)),
            ],
        )
        x = _data((2, 3, 4), seed=1)
        self.run_values(LogSoftmax, {}, x, keras.ops.log_softmax(x))
        self.run_values(LogSoftmax, {"axis": 1}, x, keras.ops.log_softmax(x, axis=1))
        self.run_values(LogSoftmax, {"axis": (1, 2)}, x, keras.ops.log_softmax(x, axis=(1, 2)))

    def test_safe_norm(self):
        self.run_shapes(
            SafeNorm,
            [
                ({}, (2, 3, 4), (2, 3)),
                ({"axis": -1, "keepdims": True}, (2, 3, 4), (2, 3, 1)),
                ({"axis": 1, "keepdims": False}, (2, 3, 4), (2, 4)),
                ({"axis": 1, "keepdims": True}, (2, 3, 4), (2, 1, 4)),
                ({"axis": (1, 2)}, (2, 3, 4), (2,)),
                ({"axis": [0, 2], "keepdims": True}, (2, 3, 4), (1, 3, 1)),
            ],
        )
        x = _data((2, 3, 4), seed=2)
        self.run_values(SafeNorm, {}, x, keras.ops.norm(x, axis=-1))
        # Over two axes, keras.ops.norm's default is the Frobenius norm.
        self.run_values(SafeNorm, {"axis": (1, 2)}, x, keras.ops.norm(x, axis=(1, 2)))
        self.run_values(
            SafeNorm,
            {"axis": 1, "keepdims": True},
            x,
            keras.ops.norm(x, axis=1, keepdims=True),
        )

    def test_l2_normalize(self):
        self.run_shapes(
            L2Normalize,
            [
                ({"axis": -1}, (2, 3), (2, 3)),
                ({"axis": 1}, (2, 3, 4), (2, 3, 4)),
                ({"axis": (1, 2)}, (1, 3, 3), (1, 3, 3)),
            ],
        )
        x = _data((2, 3, 4), seed=3)
        self.run_values(L2Normalize, {}, x, keras.layers.UnitNormalization()(x))
        self.run_values(
            L2Normalize, {"axis": [1, 2]}, x, keras.layers.UnitNormalization(axis=[1, 2])(x)
        )
        self.run_values(
            L2Normalize,
            {"axis": 1},
            x,
            keras.layers.UnitNormalization(axis=1)(x),
        )


# ----------------------------------------------------------------------------
# The Keras counterparts: the same answer where Keras is right
# ----------------------------------------------------------------------------
PAIRS = (
    (StableSoftmax, keras.layers.Softmax),
    (L2Normalize, keras.layers.UnitNormalization),
)


class KerasCounterpartTest(testing.TestCase):
    def test_defaults_and_config(self):
        for ours, theirs in PAIRS:
            ours_default = inspect.signature(ours).parameters["axis"].default
            theirs_default = inspect.signature(theirs).parameters["axis"]
            self.assertEqual(ours_default, theirs_default.default)
            config = ours(axis=1, name="x", dtype="mixed_float16").get_config()
            reference = theirs(axis=1, name="x", dtype="mixed_float16")
            # Every key of the Keras config, with the same value.
            for key, value in reference.get_config().items():
                self.assertEqual(config[key], value, msg=f"{ours}: {key}")
            self.assertTrue(ours().supports_masking)
            # Several axes: the same axes (UnitNormalization keeps a list).
            config = ours(axis=(1, 2)).get_config()
            reference = theirs(axis=(1, 2)).get_config()
            self.assertEqual(list(config["axis"]), list(reference["axis"]))

    def test_output_shapes_and_dtypes(self):
        shapes = ((None, 3), (None, 5, 4), (2, None, 4))
        for ours, theirs in PAIRS:
            for policy in ("float32", "mixed_float16", "bfloat16"):
                for shape in shapes:
                    for axis in (-1, 1, (0, -1)):
                        a, b = ours(axis=axis, dtype=policy), theirs(axis=axis, dtype=policy)
                        self.assertEqual(
                            tuple(a.compute_output_shape(shape)),
                            tuple(b.compute_output_shape(shape)),
                        )
                        x = keras.Input(shape[1:])
                        out_a, out_b = a(x), b(x)
                        self.assertEqual(tuple(out_a.shape), out_b.shape)
                        self.assertEqual(out_a.dtype, out_b.dtype)
                x = _data((2, 3, 4))
                out_a, out_b = ours(dtype=policy)(x), theirs(dtype=policy)(x)
                self.assertEqual(
                    keras.backend.standardize_dtype(out_a.dtype),
                    keras.backend.standardize_dtype(out_b.dtype),
                )
                tolerance = 1e-5 if policy == "float32" else 1e-2
                self.assertAllClose(
                    keras.ops.cast(out_a, "float32"),
                    keras.ops.cast(out_b, "float32"),
                    atol=tolerance,
                    rtol=tolerance,
                )

    def test_softmax_masks_like_keras(self):
        rng = np.random.default_rng(4)
        x = rng.normal(size=(4, 3, 5)).astype("float32") * 4
        mask = rng.random((4, 3, 5)) > 0.4
        mask[0, 0] = False  # a fully masked row: zeros in both
        mask[1, 2] = True
        for axis in (-1, 1, 0, (1, 2), (0, 2)):
            for m in (mask, mask.astype("float32"), mask.astype("int32")):
                self.assertAllClose(
                    StableSoftmax(axis=axis)(x, mask=m),
                    keras.layers.Softmax(axis=axis)(x, mask=m),
                )
        # Dimensions of 1 broadcast.
        for m in (mask[:1], mask[:, :1], mask[:, :, :1]):
            self.assertAllClose(StableSoftmax()(x, mask=m), keras.layers.Softmax()(x, mask=m))

    @pytest.mark.xfail(
        strict=True,
        reason="deliberate: a mask of the input's own shape is applied and "
        "consumed (compute_mask returns None) so that a loss does not read "
        "a class mask as sample weights; keras.layers.Softmax passes it on",
    )
    def test_softmax_passes_full_mask_on(self):
        logits = keras.Input((3,))
        classes = keras.Input((3,), dtype="bool")
        out = StableSoftmax()(logits, mask=classes)
        self.assertIsNotNone(getattr(out, "_keras_mask", None))

    @pytest.mark.xfail(
        strict=True,
        reason="deliberate: a numeric mask keeps the entries > 0 (the rule "
        "of every keras_stable mask); keras.layers.Softmax keeps those "
        "> 0.5, so a fractional mask value in (0, 0.5] differs",
    )
    def test_softmax_fractional_mask(self):
        x = np.array([[1.0, 2.0, 3.0]], "float32")
        mask = np.array([[1.0, 0.25, 1.0]], "float32")
        self.assertAllClose(StableSoftmax()(x, mask=mask), keras.layers.Softmax()(x, mask=mask))

    @pytest.mark.xfail(
        strict=True,
        reason="deliberate: no epsilon, so a vector of norm below 1e-12 is "
        "scaled to unit norm; UnitNormalization divides by "
        "max(||x||, 1e-12) and returns a shorter vector",
    )
    def test_l2_normalize_tiny_vector(self):
        x = np.array([[3e-14, 4e-14]], "float32")
        self.assertAllClose(L2Normalize()(x), keras.layers.UnitNormalization()(x))

    @pytest.mark.xfail(
        strict=True,
        reason="deliberate: L2Normalize applies a mask of the input's shape "
        "(masked entries are 0 and leave the norm); UnitNormalization "
        "ignores masks (its call takes none) and normalises every entry",
    )
    def test_l2_normalize_mask(self):
        x = np.array([[3.0, 4.0, 12.0]], "float32")
        mask = np.array([[True, True, False]])
        # In a model, Keras hands UnitNormalization the mask of its input
        # only to pass it on.
        values = keras.Input((3,))
        entries = keras.Input((3,), dtype="bool")
        keras_model = keras.Model(
            [values, entries],
            keras.layers.UnitNormalization()(keras.layers.Identity()(values, mask=entries)),
        )
        self.assertAllClose(L2Normalize()(x, mask=mask), keras_model([x, mask]))
