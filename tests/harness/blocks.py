"""The checks of the spec harness for layers with weights of their own
(the attention layers, the large-vocabulary head): `BlockSpec`s in
tests/specs/blocks.py, run by tests/test_harness.py.

Which checks apply (the rest of a block's contract, parity with Keras's
counterpart on every option, the edge cases, lives in its own test file):

1. `config_round_trip`: every constructor argument in `get_config`, the
   class registered, and a copy (`from_config`, Keras (de)serialization)
   with the same weights gives identical outputs.
2. `keras_save_load`: a model holding the block, with random weights,
   reloads from `.keras` (`safe_mode=True`, no `custom_objects`) with
   identical outputs.
3. `symbolic_and_eager`: a call on KerasTensors with an unknown batch size
   gives the eager output's shape and dtype.
4. `fit_step`: one `fit` step (XLA on TF, `jax.jit` on JAX) with finite
   loss, weights and metrics.
5. `precision_sweep[policy]`: under the mixed policies the output is in
   the compute dtype (or float32, where `spec.output_dtype` says so),
   finite, and the float32 model's output to the compute dtype's round-off.
6. `keras_mask`: with masks from `Embedding(mask_zero=True)`, the same
   outputs as the Keras counterpart with the same weights on every
   unpadded row (`spec.keras_mask` names where it is checked instead).
"""

import dataclasses
import warnings
from collections.abc import Callable

import keras
import numpy as np
import pytest

from tests.backend_utils import assert_close
from tests.backend_utils import assert_finite
from tests.backend_utils import dtype_of
from tests.backend_utils import to_numpy
from tests.harness import common

POLICIES = common.MIXED_POLICIES


@dataclasses.dataclass
class BlockSpec:
    """How to exercise one layer that owns weights.

    Attributes:
        id: the pytest id.
        cls: the class under test.
        kwargs: its constructor arguments.
        inputs: `inputs(rng, n)`: the positional arguments of a call, as
            NumPy arrays with `n` samples.
        targets: `targets(rng, n)`: `y` for `fit` with `loss`; None when the
            block adds its own loss (`add_loss`).
        loss: the loss `fit` compiles with (None: the added loss).
        output_dtype: the output's dtype under a mixed policy when it is not
            the compute dtype (a loss the block returns is float32).
        counterpart: the Keras layer it replaces (same arguments, same
            weights): the Keras-mask check compares with it.
        keras_mask: where the Keras-mask contract is checked instead, when
            there is no counterpart to compare with.
        list_input: the block is called on one list of its inputs
            (`GaussianSampling()([mean, log_variance])`, as Keras's merge
            layers), not on them as positional arguments.
        fit_model: `fit_model(spec) -> keras.Model` on the same inputs, for
            the `fit` step of a block without weights of its own (Keras
            warns on a model with nothing to train); None: `model()`.
    """

    id: str
    cls: type
    kwargs: dict
    inputs: Callable
    targets: Callable = None
    loss: object = None
    output_dtype: str = None
    counterpart: type = None
    keras_mask: str = None
    list_input: bool = False
    fit_model: Callable = None

    def make(self, **overrides):
        return self.cls(**{**self.kwargs, **overrides})

    def call(self, layer, args):
        """`layer` called on `args` (a list of tensors) as the block takes them."""
        return layer(list(args)) if self.list_input else layer(*args)

    def data(self, n=8, seed=0):
        rng = np.random.default_rng(seed)
        x = self.inputs(rng, n)
        return x, None if self.targets is None else self.targets(rng, n)

    def model(self):
        """`Input(s) -> block`: a functional model around one instance."""
        inputs = [keras.Input(a.shape[1:], dtype=str(a.dtype)) for a in self.inputs(_rng(), 1)]
        return keras.Model(inputs, self.call(self.make(name="block"), inputs))

    def __repr__(self):
        return self.id


def _rng(seed=0):
    return np.random.default_rng(seed)


def _random_weights(layer, seed=0):
    """Random weights, biases included (Keras starts them at 0, which
    would hide a bias that is lost)."""
    rng = _rng(seed)
    return [rng.normal(0, 0.5, w.shape).astype("float32") for w in layer.get_weights()]


def _randomise(layer, seed=0):
    layer.set_weights(_random_weights(layer, seed))


def check_config_round_trip(spec):
    x, _ = spec.data()
    weights = []

    def run(layer):
        spec.call(layer, x)  # builds it
        if not weights:
            weights.extend(_random_weights(layer))
        layer.set_weights(weights)
        return to_numpy(spec.call(layer, x))

    expected = common.check_config_round_trip(spec.make(), spec.kwargs, run, keys=("name", "dtype"))
    assert_finite(expected, spec.id)


def check_keras_save_load(spec, tmp_path):
    x, _ = spec.data()
    model = spec.model()
    _randomise(model)
    before = to_numpy(model(x))
    loaded = common.save_and_reload(model, tmp_path, spec.id)
    assert type(loaded.get_layer("block")) is spec.cls
    np.testing.assert_array_equal(to_numpy(loaded(x)), before)
    assert_finite(before, spec.id)


def check_symbolic_and_eager(spec):
    x, _ = spec.data()
    eager = spec.call(spec.make(), [keras.ops.convert_to_tensor(a) for a in x])
    symbolic = spec.call(
        spec.make(), [keras.KerasTensor((None,) + a.shape[1:], dtype=str(a.dtype)) for a in x]
    )
    assert isinstance(symbolic, keras.KerasTensor), type(symbolic)
    assert tuple(symbolic.shape) == (None,) + tuple(eager.shape[1:])
    assert symbolic.dtype == keras.backend.standardize_dtype(eager.dtype)


def check_fit_step(spec):
    x, y = spec.data()
    model = spec.model() if spec.fit_model is None else spec.fit_model(spec)
    common.fit_one_step(model, x, y, spec.loss)


def check_precision_sweep(spec, policy):
    x, _ = spec.data()
    reference = spec.model()
    _randomise(reference)
    expected = to_numpy(reference(x)).astype("float64")
    with common.dtype_policy(policy):
        model = spec.model()
        model.set_weights(reference.get_weights())
        out = model(x)
    dtype = common.compute_dtype(policy)
    assert dtype_of(out) == (spec.output_dtype or dtype), (dtype_of(out), policy)
    got = to_numpy(out).astype("float64")
    assert_finite(got, f"{spec.id} under {policy}")
    # A few roundings of the compute dtype per output, relative to the
    # output's scale (the weights are float32 in both models).
    scale = np.max(np.abs(expected))
    np.testing.assert_allclose(got, expected, rtol=0, atol=16 * float(np.finfo(dtype).eps) * scale)


VOCAB, STEPS = 7, 5


def _padded_tokens():
    tokens = _rng(1).integers(1, VOCAB, (3, STEPS)).astype("int32")
    tokens[0, 3:] = 0  # right padding
    tokens[2, 1:] = 0  # one real token
    return tokens


def check_keras_mask(spec):
    if spec.counterpart is None:
        pytest.skip(spec.keras_mask)
    tokens = _padded_tokens()

    def build(cls):
        inputs = keras.Input((None,), dtype="int32")
        width = spec.inputs(_rng(), 1)[0].shape[-1]
        hidden = keras.layers.Embedding(VOCAB, width, mask_zero=True, name="embed")(inputs)
        return keras.Model(inputs, cls(**spec.kwargs, name="block")(hidden, hidden))

    with warnings.catch_warnings():
        # Keras's GroupQueryAttention warns that its projections drop the
        # masks of its inputs (ours does not).
        warnings.filterwarnings("ignore", message=r"(?s).*was passed an input with a mask")
        theirs = build(spec.counterpart)
        _randomise(theirs)
        expected = to_numpy(theirs(tokens))
    ours = build(spec.cls)
    ours.set_weights(theirs.get_weights())
    got = to_numpy(ours(tokens))
    valid = tokens != 0
    assert_close(got[valid], expected[valid], what=f"{spec.id}: unpadded rows")
    assert_finite(got, spec.id)


def mask_checks(spec):
    return (check_keras_mask,)


def edge_cases(spec):
    return {}
