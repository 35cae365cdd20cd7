"""The machinery the layer and loss harnesses share.

A spec is a dataclass with an `id` (the pytest id) and a `make(**overrides)`
that builds the class under test; tests/test_harness.py parametrises each
check by the specs whose kind has it.
"""

import contextlib
import os

import keras
import numpy as np

from tests import backend_utils as bu

# The dtype policies of the precision sweep (the layers run all four; a loss
# reads half-precision predictions, so the losses run the mixed two).
POLICIES = ("mixed_float16", "mixed_bfloat16", "float16", "bfloat16")
MIXED_POLICIES = POLICIES[:2]
# `fit` compiles with XLA on TensorFlow and `jax.jit` on JAX. On torch it
# runs eagerly: Keras's torch `jit_compile` is `torch.compile`, not XLA, and
# is slow and flaky on CPU. (`bu.vjp_all_modes` runs eager and compiled.)
FIT_JIT = bu.BACKEND != "torch"


# ------------------------------------------------------------------- dtypes
@contextlib.contextmanager
def dtype_policy(policy):
    """The global dtype policy inside the block (float32 again after it)."""
    keras.config.set_dtype_policy(policy)
    try:
        yield
    finally:
        keras.config.set_dtype_policy("float32")


def compute_dtype(policy):
    return keras.DTypePolicy(policy).compute_dtype


def random_input(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32") * 3


def finite_vjp(fn, args, what, **kwargs):
    """`bu.vjp_all_modes` (eager and compiled agree); every gradient is
    finite. Returns `(value, grads)`."""
    value, grads = bu.vjp_all_modes(fn, args, **kwargs)
    for grad in grads:
        bu.assert_finite(grad, what=f"{what}: gradient")
    return value, grads


# -------------------------------------------------------------------- masks
def keras_mask(x):
    """The Keras mask attached to a (symbolic or eager) tensor, or None."""
    return getattr(x, "_keras_mask", None)


def dense_model(input_shape, units, masking=False, **dense_kwargs):
    """`Input -> [Masking(0.0)] -> Dense(units)`: with `masking`, every
    all-zero sample (or time step) is masked, and the mask rides on the
    output to whatever reads it next."""
    inputs = keras.Input(input_shape)
    hidden = keras.layers.Masking(0.0)(inputs) if masking else inputs
    return keras.Model(inputs, keras.layers.Dense(units, **dense_kwargs)(hidden))


# ------------------------------------------------------------ serialization
def check_config_round_trip(obj, kwargs, run, keys=()):
    """`get_config` holds every constructor argument of `kwargs` (with its
    value) and every name of `keys`; the class is registered under
    `keras_stable>`; `from_config` and Keras (de)serialization rebuild an
    object with the same config AND identical behaviour: `run(copy)` equals
    `run(obj)` exactly (Keras core has silently dropped hyperparameters in
    overridden `get_config`s: compare behaviour). Returns `run(obj)`."""
    cls = type(obj)
    config = obj.get_config()
    for key in keys:
        assert key in config, f"`{key}` missing from {cls.__name__}.get_config()"
    for key, value in kwargs.items():
        assert key in config, f"`{key}` missing from {cls.__name__}.get_config()"
        assert config[key] == value, f"get_config lost `{key}`: {config[key]} != {value}"
    copy = cls.from_config(config)
    assert copy.get_config() == config
    serialized = keras.saving.serialize_keras_object(obj)
    assert serialized["registered_name"].startswith("keras_stable>")
    assert keras.saving.get_registered_object(serialized["registered_name"]) is cls
    revived = keras.saving.deserialize_keras_object(serialized)
    assert type(revived) is cls
    assert revived.get_config() == config
    expected = run(obj)
    for other in (copy, revived):
        np.testing.assert_array_equal(run(other), expected)
    return expected


def save_and_reload(model, tmp_path, name="model"):
    """The model saved as `.keras` and loaded with `safe_mode=True` and no
    `custom_objects` (the registered names must be enough)."""
    path = os.path.join(str(tmp_path), f"{name}.keras")
    model.save(path)
    return keras.saving.load_model(path, safe_mode=True)


# ----------------------------------------------------------------- training
def fit_one_step(model, x, y, loss, metrics=None, sample_weight=None, learning_rate=0.01):
    """Compiles (`jit_compile=FIT_JIT`) and fits one step on the whole batch;
    the history (loss and metrics) and the weights after the step must be
    finite. Returns the history."""
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate),
        loss=loss,
        metrics=metrics,
        jit_compile=FIT_JIT,
    )
    history = model.fit(
        x, y, sample_weight=sample_weight, batch_size=len(x), epochs=1, verbose=0
    ).history
    for key, values in history.items():
        assert np.all(np.isfinite(values)), (key, values)
    for w in model.weights:
        bu.assert_finite(bu.to_numpy(w.value), what=f"weight {w.path} after one step")
    return history
