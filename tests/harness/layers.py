"""The layer checks of the spec harness (ours, no `keras.src`).

Usage: describe the layer once with a `LayerSpec` in `LAYER_SPECS`
(`tests/specs/layers.py`):

    LayerSpec(
        id="safe_norm",
        cls=SafeNorm,
        kwargs={"axis": -1, "keepdims": True},
        reference=lambda x, mask=None, axis=-1, keepdims=False: ...,
    )

`tests/test_harness.py` then runs every `check_*` function below for
that layer, on the backend of the process (`KERAS_BACKEND`). The checks:

1. `config_round_trip`: registered as
   `keras_stable>ClassName`; `get_config` holds every constructor argument;
   `from_config` (and `keras.saving` (de)serialization) rebuilds a layer
   with the same config AND identical outputs (keras core has silently
   dropped hyperparameters in overridden `get_config`s: compare behaviour).
2. `keras_save_load`: a model holding the layer is saved to a `.keras`
   file and reloaded with `safe_mode=True` and no `custom_objects`;
   predictions are identical.
3. `symbolic_and_eager`: a `keras.Input` call gives a KerasTensor of
   `compute_output_shape`'s shape and the compute dtype; eager calls on
   NumPy and on backend tensors agree with the model and with the float64
   reference.
4. `compute_output_shape`: equals the real output's shape for several
   input shapes (unknown batch included).
5. `fit_step`: one `fit` step of `Input -> Masking -> Dense(zeros) ->
   layer` with `jit_compile=True` (XLA on TensorFlow, `jax.jit` on JAX; on
   torch `jit_compile=False`, because Keras's torch `jit_compile` is
   `torch.compile`, not XLA, and is slow and flaky on CPU). The Dense
   kernel starts at zero, so the layer sees the singular point (zero
   vectors, uniform logits) and the last sample is fully padded; the loss,
   the weights and the predictions must stay finite.
6. `precision_sweep[policy]`: under `mixed_float16`, `mixed_bfloat16`,
   `float16` and `bfloat16` (global policy and `dtype=`), the output is in
   the compute dtype and matches the float64 reference of the input as fed
   (float32 inputs are not autocast first; `spec.precision_cases` adds
   exact checks such as float16 `[300] * 4`).
7. `edge_case[name]`: the edge-case grid (`spec.edge_cases`, by
   default `default_edge_cases()`: zeros, +-1e4, -inf, float16 above 11,
   and a masked case with NaN/inf under the mask and a fully masked row).
   Values match the reference and are finite where the contract says so;
   gradients (random cotangent) are finite, eagerly and compiled
   (`tests/backend_utils.vjp`), the two agree, and masked entries get a
   gradient of exactly 0. An `EdgeCase(known_bug=...)` becomes an
   `xfail(strict=True)` case, so a fix is noticed.
8. Masks (`spec.supports_masking`): an explicit mask of the input's shape is
   applied and consumed (`compute_mask` is None); a `(batch, time)` mask
   leaves the math unchanged and is passed on when `axis` is the feature
   axis, and is applied when it covers `axis` (consumed only by reducing
   layers); masks from `Masking` / `Embedding(mask_zero=True)` propagate in
   functional models by that rule; a mismatched mask raises `ValueError`.
9. `bad_axis`: an out-of-range or repeated `axis` raises `ValueError`
   naming `axis` and the input shape at the first (symbolic or eager)
   call; an `axis` that is neither an int nor a non-empty tuple/list of
   ints raises at construction.
10. `multiple_axes`: a tuple/list `axis` (as `keras.layers.Softmax`
    and `UnitNormalization` take) normalises or reduces its axes together
    and matches the reference; `(-1,)` equals `-1`; the config survives
    JSON; a `(batch, time)` mask covering the first axis is applied (zero
    gradient under it) and a `(batch,)` mask leaves the math unchanged.
11. `build`: weightless, the layer is built at instantiation (as
    Keras's stateless layers are); an explicit `build(shape)` checks
    `axis`; a subclass that overrides `build` is not built at
    instantiation and Keras calls its `build` at the first call.

A new layer adds a spec; the shared machinery (parametrisation, policies,
round trips, `fit_one_step`) is in `tests/harness/common.py`.
The reference is a float64 NumPy function `reference(x, mask=None,
**kwargs)`; `mask`, when given, is a boolean array of `x`'s shape
marking the entries that take part.
"""

import dataclasses
import json
from collections.abc import Callable

import keras
import numpy as np
import pytest

from tests import backend_utils as bu
from tests.harness import common
from tests.harness.common import keras_mask
from tests.harness.common import random_input


@dataclasses.dataclass
class EdgeCase:
    """One input of the edge-case grid.

    Attributes:
        x: the input (NumPy, rank 2: rows are vectors along `axis=-1`).
        mask: optional boolean mask of `x`'s shape.
        dtype: the input dtype.
        finite_value: whether the contract says the output is finite.
        known_bug: a reason (pointing to /work/notes/ops_bugs.md) when the
            gradient is known to be non-finite today; the case becomes a
            strict xfail.
    """

    x: np.ndarray
    mask: np.ndarray | None = None
    dtype: str = "float32"
    finite_value: bool = True
    known_bug: str | None = None


def default_edge_cases():
    """The grid every layer runs: rows of 4 entries along the last axis."""
    return {
        "zeros": EdgeCase(np.zeros((2, 4))),
        "large": EdgeCase(np.array([[1e4, -1e4, 0.0, 1.0], [1e4] * 4])),
        "neg_inf": EdgeCase(np.array([[-np.inf, 0.0, 1.0, 2.0], [-np.inf] * 4])),
        "float16_large": EdgeCase(
            np.array([[12.0, 11.0, 0.0, -12.0], [300.0] * 4]), dtype="float16"
        ),
        # Row 0: NaN and inf under the mask; row 1: every entry masked.
        "masked": EdgeCase(
            np.array([[1.0, 2.0, np.nan, np.inf], [np.nan, -np.inf, 1e4, 0.0]]),
            mask=np.array([[True, True, False, False], [False] * 4]),
        ),
    }


@dataclasses.dataclass
class PrecisionCase:
    """An exact check run under every policy of the precision sweep.

    Attributes:
        x: the input values (float32).
        expected: the true output (float64).
        feeds: how `x` is fed: `"float32"` as is (the layer must not
            autocast it before computing in float32) and/or `"compute"`
            cast to the policy's compute dtype first.
    """

    x: list
    expected: list
    feeds: tuple = ("float32", "compute")


@dataclasses.dataclass
class LayerSpec:
    """Everything the harness needs to know about one layer.

    Attributes:
        id: the pytest id.
        cls: the layer class.
        kwargs: constructor arguments used by the checks; use
            non-default values where they exist so that a dropped
            hyperparameter shows up after a round trip.
        reference: float64 NumPy `reference(x, mask=None, **kwargs)`.
        input_shape: the input shape of most checks, `(batch, time, features)`.
        reduces_axis: whether the layer reduces `axis` (the output loses it).
        supports_masking: whether the layer takes a `mask` call argument.
        edge_cases: name -> `EdgeCase` (default: `default_edge_cases()`).
        precision_cases: `PrecisionCase`s checked (within the compute
            dtype's tolerance) under every policy.
    """

    id: str
    cls: type
    kwargs: dict
    reference: Callable
    input_shape: tuple = (3, 2, 4)
    reduces_axis: bool = False
    supports_masking: bool = True
    edge_cases: dict = dataclasses.field(default_factory=default_edge_cases)
    precision_cases: list = dataclasses.field(default_factory=list)

    def make(self, **overrides):
        return self.cls(**{**self.kwargs, **overrides})

    def expected(self, x, mask=None, **overrides):
        kwargs = {**self.kwargs, **overrides}
        kwargs.pop("name", None)
        kwargs.pop("dtype", None)
        return self.reference(np.asarray(x, "float64"), mask, **kwargs)

    def __repr__(self):
        return self.id


def sequence_loss(y_true, y_pred):
    """Squared error, reduced to `(batch, time)` so a time mask applies."""
    err = keras.ops.square(y_pred - y_true)
    while len(err.shape) > 2:
        err = keras.ops.mean(err, axis=-1)
    return err


def _time_mask(spec):
    """A `(batch, time)` mask (one step of sample 0 and all of sample 1
    masked) and its broadcast to the input's shape."""
    steps = np.ones(spec.input_shape[:2], bool)
    steps[0, 0] = False
    steps[1] = False
    return steps, np.broadcast_to(steps[:, :, None], spec.input_shape)


# ------------------------------------------------------------ serialization
def check_config_round_trip(spec):
    cls = spec.cls
    assert keras.saving.get_registered_name(cls) == f"keras_stable>{cls.__name__}"
    layer = spec.make(name="under_test")
    x = random_input(spec.input_shape)
    common.check_config_round_trip(layer, spec.kwargs, lambda obj: bu.to_numpy(obj(x)))
    assert layer.built and not layer.weights


def check_keras_save_load(spec, tmp_path):
    inputs = keras.Input(spec.input_shape[1:])
    model = keras.Model(inputs, spec.make()(inputs))
    x = random_input(spec.input_shape, seed=1)
    expected = bu.to_numpy(model.predict(x, verbose=0))
    loaded = common.save_and_reload(model, tmp_path)
    assert type(loaded.layers[-1]) is spec.cls
    assert loaded.layers[-1].get_config() == model.layers[-1].get_config()
    np.testing.assert_array_equal(bu.to_numpy(loaded.predict(x, verbose=0)), expected)


# ---------------------------------------------------------- calls and shapes
def check_symbolic_and_eager(spec):
    layer = spec.make()
    inputs = keras.Input(spec.input_shape[1:])
    symbolic = layer(inputs)
    expected_shape = layer.compute_output_shape((None,) + tuple(spec.input_shape[1:]))
    assert tuple(symbolic.shape) == tuple(expected_shape)
    assert bu.dtype_of(symbolic) == layer.compute_dtype
    model = keras.Model(inputs, symbolic)
    x = random_input(spec.input_shape, seed=2)
    eager_np = layer(x)
    eager_tensor = layer(keras.ops.convert_to_tensor(x))
    assert bu.dtype_of(eager_np) == layer.compute_dtype
    bu.assert_close(bu.to_numpy(eager_np), spec.expected(x), what="eager vs reference")
    np.testing.assert_array_equal(bu.to_numpy(eager_tensor), bu.to_numpy(eager_np))
    bu.assert_close(bu.to_numpy(model(x)), bu.to_numpy(eager_np), what="model vs eager")


def check_compute_output_shape(spec):
    layer = spec.make()
    for shape in (spec.input_shape, (1,) + tuple(spec.input_shape[1:]), (2, 5, 3, 4)):
        out = layer(np.ones(shape, "float32"))
        assert tuple(layer.compute_output_shape(shape)) == tuple(out.shape)
    unknown = (None,) + tuple(spec.input_shape[1:])
    assert layer.compute_output_shape(unknown)[0] is None


# ------------------------------------------------------------------ training
def check_fit_step(spec):
    batch, time, features = spec.input_shape
    head = common.dense_model((time, features), features, masking=True, kernel_initializer="zeros")
    outputs = spec.make()(head.output)
    model = keras.Model(head.input, outputs)
    x = random_input((batch, time, features), seed=3)
    x[-1] = 0.0  # a fully padded sequence: Masking masks every step
    y = np.zeros((batch,) + tuple(outputs.shape[1:]), "float32")
    common.fit_one_step(model, x, y, sequence_loss, learning_rate=0.1)
    bu.assert_finite(bu.to_numpy(model.predict(x, verbose=0)), what="predictions")


# ----------------------------------------------------------------- precision
def check_precision_sweep(spec, policy):
    compute = common.compute_dtype(policy)
    x32 = random_input(spec.input_shape, seed=4)
    with common.dtype_policy(policy):
        global_layer = spec.make()
    assert global_layer.compute_dtype == compute
    layer = spec.make(dtype=policy)
    assert layer.compute_dtype == compute
    for x in (x32, keras.ops.cast(x32, compute)):
        out = layer(x)
        assert bu.dtype_of(out) == compute
        bu.assert_close(
            bu.to_numpy(out),
            spec.expected(bu.to_numpy(x)),
            compute,
            what=f"{policy}, input {x.dtype}",
        )
    # In a model built under the global policy, with a float32 Input.
    inputs = keras.Input(spec.input_shape[1:])
    out = keras.Model(inputs, global_layer(inputs))(x32)
    assert bu.dtype_of(out) == compute
    bu.assert_close(bu.to_numpy(out), spec.expected(x32), compute, what=f"{policy}, model")
    for case in spec.precision_cases:
        for feed in case.feeds:
            x = np.asarray(case.x, "float32")
            x = x if feed == "float32" else keras.ops.cast(x, compute)
            out = layer(x)
            assert bu.dtype_of(out) == compute
            bu.assert_close(
                bu.to_numpy(out), case.expected, compute, what=f"{policy}, {feed} input {case.x}"
            )


# ----------------------------------------------------------------- edge grid
def check_edge_case(spec, name):
    case = spec.edge_cases[name]
    layer = spec.make()
    x = bu.cast_tensor(case.x, case.dtype)
    expected = spec.expected(bu.to_numpy(x), case.mask)
    args = [x] if case.mask is None else [x, case.mask]
    fn = (lambda t: layer(t)) if case.mask is None else (lambda t, m: layer(t, mask=m))
    out_shape = tuple(layer.compute_output_shape(tuple(x.shape)))
    cotangent = np.random.default_rng(5).normal(size=out_shape).astype(case.dtype)
    value, (grad,) = common.finite_vjp(
        fn, args, name, wrt=(0,), cotangent=cotangent, dtype=case.dtype
    )
    bu.assert_close(value, expected, case.dtype, what=f"{name}: value vs reference")
    if case.finite_value:
        bu.assert_finite(value, what=f"{name}: value")
    else:
        assert not np.isnan(value[~np.isnan(expected)]).any()
    if case.mask is not None:
        # Masked entries get no gradient (NaN under the mask included).
        np.testing.assert_array_equal(grad[~case.mask], 0.0)


# --------------------------------------------------------------------- masks
# Run for the specs with `supports_masking`.
def check_full_shape_mask_is_applied_and_consumed(spec):
    layer = spec.make()
    x = random_input(spec.input_shape, seed=6)
    mask = np.random.default_rng(6).random(spec.input_shape) > 0.3
    mask[0, 0] = False  # one fully masked vector
    out = layer(x, mask=mask)
    bu.assert_close(bu.to_numpy(out), spec.expected(x, mask), what="masked output")
    assert layer.compute_mask(x, mask) is None
    assert keras_mask(out) is None
    # Symbolic: the mask does not reach a downstream loss.
    values = keras.Input(spec.input_shape[1:])
    entries = keras.Input(spec.input_shape[1:], dtype="bool")
    assert keras_mask(layer(values, mask=entries)) is None


def check_time_step_mask(spec):
    layer = spec.make()
    x = random_input(spec.input_shape, seed=7)
    steps = np.ones(spec.input_shape[:2], bool)
    steps[-1] = False
    # The feature axis is not masked: the math is unchanged.
    bu.assert_close(
        bu.to_numpy(layer(x, mask=steps)), spec.expected(x), what="time mask on features"
    )
    assert layer.compute_mask(x, steps) is steps
    # From a Masking layer in a functional model: passed on.
    inputs = keras.Input(spec.input_shape[1:])
    out = layer(keras.layers.Masking(0.0)(inputs))
    assert keras_mask(out) is not None
    assert tuple(keras_mask(out).shape) == (None, spec.input_shape[1])


def check_mask_covering_axis(spec):
    layer = spec.make(axis=1)
    x = random_input(spec.input_shape, seed=8)
    steps, full = _time_mask(spec)
    out = layer(x, mask=steps)
    bu.assert_close(bu.to_numpy(out), spec.expected(x, full, axis=1), what="time mask along axis")
    passed_on = layer.compute_mask(x, steps)
    assert passed_on is None if spec.reduces_axis else passed_on is steps
    _, (grad,) = common.finite_vjp(lambda t, m: layer(t, mask=m), [x, steps], "time mask")
    np.testing.assert_array_equal(grad[~full], 0.0)


def check_embedding_mask_in_model(spec):
    tokens = keras.Input((5,), dtype="int32")
    hidden = keras.layers.Embedding(7, spec.input_shape[-1], mask_zero=True)(tokens)
    out = spec.make()(hidden)
    assert tuple(keras_mask(out).shape) == (None, 5)
    model = keras.Model(tokens, out)
    ids = np.array([[1, 2, 3, 0, 0], [0, 0, 0, 0, 0]], "int32")
    bu.assert_finite(bu.to_numpy(model(ids)), what="output")


def check_bad_mask_shape(spec):
    layer = spec.make()
    x = random_input(spec.input_shape)
    bad = (
        np.ones(spec.input_shape[:1] + (spec.input_shape[1] + 1,), bool),
        np.ones(spec.input_shape[:-1] + (spec.input_shape[-1] + 1,), bool),
        np.ones(spec.input_shape + (1,), bool),
    )
    for mask in bad:
        with pytest.raises(ValueError, match="mask") as info:
            layer(x, mask=mask)
        assert str(mask.shape) in str(info.value) and str(x.shape) in str(info.value)
    values = keras.Input(spec.input_shape[1:])
    with pytest.raises(ValueError, match="mask"):
        layer(values, mask=keras.Input((spec.input_shape[1] + 1,), dtype="bool"))


MASK_CHECKS = (
    check_full_shape_mask_is_applied_and_consumed,
    check_time_step_mask,
    check_mask_covering_axis,
    check_embedding_mask_in_model,
    check_bad_mask_shape,
)


# --------------------------------------------------------------------- build
def check_build(spec):
    layer = spec.make()
    assert layer.built and not layer.weights
    layer.build(spec.input_shape)
    assert layer.built
    with pytest.raises(ValueError, match="axis"):
        spec.make(axis=len(spec.input_shape)).build(spec.input_shape)
    calls = []

    class Subclass(spec.cls):
        def build(self, input_shape):
            calls.append(tuple(input_shape))
            super().build(input_shape)

    x = random_input(spec.input_shape)
    eager = Subclass(**spec.kwargs)
    assert not eager.built
    np.testing.assert_array_equal(bu.to_numpy(eager(x)), bu.to_numpy(layer(x)))
    assert eager.built and calls == [tuple(spec.input_shape)]
    symbolic = Subclass(**spec.kwargs)
    symbolic(keras.Input(spec.input_shape[1:]))
    assert symbolic.built and calls[-1] == (None,) + tuple(spec.input_shape[1:])


# -------------------------------------------------------------- several axes
def check_multiple_axes(spec):
    x = random_input(spec.input_shape, seed=9)
    np.testing.assert_array_equal(
        bu.to_numpy(spec.make(axis=(-1,))(x)), bu.to_numpy(spec.make(axis=-1)(x))
    )
    for axis in ((1, 2), [2, 1], (0, -1)):
        layer = spec.make(axis=axis)
        out = layer(x)
        assert tuple(out.shape) == tuple(layer.compute_output_shape(spec.input_shape))
        bu.assert_close(bu.to_numpy(out), spec.expected(x, axis=tuple(axis)), what=f"axis={axis}")
    layer = spec.make(axis=(1, 2))
    config = layer.get_config()
    assert config["axis"] == [1, 2] and json.loads(json.dumps(config)) == config
    restored = spec.cls.from_config(config)
    assert restored.axis == (1, 2) and restored.get_config() == config
    inputs = keras.Input(spec.input_shape[1:])
    symbolic = layer(inputs)
    assert tuple(symbolic.shape) == tuple(layer.compute_output_shape(inputs.shape))
    bu.assert_close(bu.to_numpy(keras.Model(inputs, symbolic)(x)), bu.to_numpy(layer(x)))
    # A (batch, time) mask covers the first axis, 1: applied.
    steps, full = _time_mask(spec)
    value, (grad,) = common.finite_vjp(lambda t, m: layer(t, mask=m), [x, steps], "time mask")
    bu.assert_close(value, spec.expected(x, full, axis=(1, 2)), what="time mask")
    np.testing.assert_array_equal(grad[~full], 0.0)
    passed_on = layer.compute_mask(x, steps)
    assert passed_on is None if spec.reduces_axis else passed_on is steps
    # A (batch,) mask stops before axes (1, 2): the math is unchanged.
    samples = np.array([True, False, True])[: spec.input_shape[0]]
    bu.assert_close(bu.to_numpy(layer(x, mask=samples)), bu.to_numpy(layer(x)))
    assert layer.compute_mask(x, samples) is samples


# ----------------------------------------------------------------- bad input
def check_bad_axis(spec):
    rank = len(spec.input_shape)
    layer = spec.make(axis=rank)
    x = random_input(spec.input_shape)
    with pytest.raises(ValueError, match="axis") as info:
        layer(x)
    assert str(tuple(x.shape)) in str(info.value)
    with pytest.raises(ValueError, match="axis"):
        layer(keras.Input(spec.input_shape[1:]))
    with pytest.raises(ValueError, match="axis"):
        layer.compute_output_shape(spec.input_shape)
    for bad in (1.0, "last", (), [], (0, 1.0), None, True):
        with pytest.raises(ValueError, match="axis"):
            spec.make(axis=bad)
    for bad in ((0, rank), (1, 1 - rank)):  # out of range; repeated
        with pytest.raises(ValueError, match="axis") as info:
            spec.make(axis=bad)(x)
        assert str(tuple(x.shape)) in str(info.value)
    config = spec.make(axis=np.int64(-1)).get_config()
    assert type(config["axis"]) is int


# --- what the driver (tests/test_harness.py) runs ---------------------------------

POLICIES = common.POLICIES


def edge_cases(spec):
    return spec.edge_cases


def mask_checks(spec):
    return MASK_CHECKS if spec.supports_masking else ()
