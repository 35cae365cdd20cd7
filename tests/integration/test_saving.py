"""Saved-model round trips: `.keras` in a fresh process, weights, old files, safety.

What a user relies on when they save a model that uses keras_stable:

- a `.keras` file loads in a new process that only imported keras_stable,
  with `safe_mode=True` and no `custom_objects`, and the loaded model is the
  same model: bit-identical predictions, the same compiled losses and
  metrics (configs and values), and training continues exactly where it
  stopped (optimizer state restored);
- `.weights.h5` files restore the weights into a freshly built model;
- files written by earlier versions (tests/fixtures/*.keras, made by
  tests/fixtures/make_fixture.py) still load and predict the same on every
  backend: registered names and configs are an on-disk format;
- no keras_stable config holds code, lambdas or pickles, and a bad config
  (unknown class, malformed argument) fails when the file is loaded, with a
  `ValueError`/`TypeError` naming the problem, not at the first call.
"""

import json
import pathlib
import re
import zipfile

import keras
import numpy as np
import pytest

import keras_stable
from tests.backend_utils import assert_close
from tests.integration import _models
from tests.integration._fresh_process import run_fresh

BACKEND = keras.backend.backend()
FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures"
FIXTURE_FILES = sorted(FIXTURES.glob("*.keras"))

# The names every saved file of this version uses. Registered names are an
# on-disk format: removing one breaks users' files, so this list only grows.
REGISTERED_NAMES = (
    "keras_stable>L2Normalize",
    "keras_stable>LogSoftmax",
    "keras_stable>SafeNorm",
    "keras_stable>StableSoftmax",
    "keras_stable>MaskedMultiTaskDistance",
    "keras_stable>StableSigmoidCrossEntropy",
    "keras_stable>StableSoftmaxCrossEntropy",
    "keras_stable>StableSparseSoftmaxCrossEntropy",
    "keras_stable>MaskedMultiTaskDistanceMetric",
    "keras_stable>StableCrossEntropy",
    "keras_stable>StableSparseCrossEntropy",
)

BATCH = 16


def _batches(x, y):
    """The two batches the continued training runs on, in order."""
    return [(x[i : i + BATCH], {k: v[i : i + BATCH] for k, v in y.items()}) for i in (0, BATCH)]


def _as_float_dict(values):
    return {k: float(v) for k, v in values.items()}


# --------------------------------------------------------------------------
# .keras round trip in a fresh process
# --------------------------------------------------------------------------

# Runs in a new interpreter. The only keras_stable-specific step is the
# import: no custom_objects, default safe_mode=True. Predictions are direct
# (eager) calls, in the parent too: `predict` would trace one more function
# per process for nothing.
_LOAD_AND_CONTINUE = """
import sys
import numpy as np
import keras
import keras_stable

directory = {directory!r}
model = keras.models.load_model(directory + "/model.keras")
data = np.load(directory + "/data.npz")
x = data["x"]
y = {{k[2:]: data[k] for k in data.files if k.startswith("y_")}}
predictions = model(x)
optimizer_state = [keras.ops.convert_to_numpy(v.value) for v in model.optimizer.variables]
steps = []
for start in (0, {batch}):
    xb = x[start : start + {batch}]
    yb = {{k: v[start : start + {batch}] for k, v in y.items()}}
    logs = model.train_on_batch(xb, yb, return_dict=True)
    steps.append({{k: float(v) for k, v in logs.items()}})
after = model(x)
np.savez(
    directory + "/child.npz",
    **{{"pred_" + k: keras.ops.convert_to_numpy(v) for k, v in predictions.items()}},
    **{{"after_" + k: keras.ops.convert_to_numpy(v) for k, v in after.items()}},
    **{{"opt_%d" % i: v for i, v in enumerate(optimizer_state)}},
)
report({{
    "compile_config": model.get_compile_config(),
    "loss_types": {{k: type(v).__module__ for k, v in model.loss.items()}},
    "optimizer_variables": [v.path for v in model.optimizer.variables],
    "steps": steps,
}})
"""


def _call(model, x):
    return {k: keras.ops.convert_to_numpy(v) for k, v in model(x).items()}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A trained model saved as `.keras` and `.weights.h5`, and what it did next.

    Returns only files and NumPy values: the autouse fixture clears the
    Keras session after each test, so no model object outlives this.
    """
    directory = tmp_path_factory.mktemp("saved")
    model = _models.compile_model(_models.build_model())
    x, y = _models.make_data(n=32)
    # Four steps (two epochs of two batches). `train_on_batch` rather than
    # `fit`: one traced train function serves the whole test.
    for xb, yb in _batches(x, y) * 2:
        model.train_on_batch(xb, yb)
    model.save(directory / "model.keras")
    model.save_weights(directory / "model.weights.h5")
    np.savez(directory / "data.npz", x=x, **{f"y_{k}": v for k, v in y.items()})
    result = {
        "directory": directory,
        "x": x,
        "predictions": _call(model, x),
        "compile_config": json.loads(json.dumps(model.get_compile_config())),
        "optimizer_variables": [v.path for v in model.optimizer.variables],
        "optimizer_state": [keras.ops.convert_to_numpy(v.value) for v in model.optimizer.variables],
    }
    # The model that was never saved keeps training on the same batches.
    result["steps"] = [
        _as_float_dict(model.train_on_batch(xb, yb, return_dict=True)) for xb, yb in _batches(x, y)
    ]
    result["after"] = _call(model, x)
    return result


def test_keras_file_round_trip_in_fresh_process(saved):
    directory = saved["directory"]
    child = run_fresh(
        _LOAD_AND_CONTINUE.format(directory=str(directory), batch=BATCH),
        BACKEND,
        cwd=directory,
    )
    arrays = np.load(directory / "child.npz")

    # The same model: bit-identical predictions.
    for name, expected in saved["predictions"].items():
        np.testing.assert_array_equal(arrays[f"pred_{name}"], expected, err_msg=name)

    # The same compiled losses and metrics (configs and classes).
    assert child["compile_config"] == saved["compile_config"]
    assert all(m.startswith("keras_stable.losses.") for m in child["loss_types"].values())

    # The optimizer state is restored: step count, Adam's moments.
    assert child["optimizer_variables"] == saved["optimizer_variables"]
    for i, expected in enumerate(saved["optimizer_state"]):
        np.testing.assert_array_equal(
            arrays[f"opt_{i}"], expected, err_msg=saved["optimizer_variables"][i]
        )
    assert int(saved["optimizer_state"][0]) == 4, "4 steps were taken"

    # Training continues where it stopped. The first step's logs are every
    # compiled loss and metric on the restored weights; the second step's
    # depend on the first update, which Adam's restored moments shape.
    for step, (got, expected) in enumerate(zip(child["steps"], saved["steps"])):
        assert got.keys() == expected.keys()
        for name in expected:
            assert_close(got[name], expected[name], what=f"step {step}: {name}", tol=(1e-6, 0))
    for name, expected in saved["after"].items():
        assert_close(arrays[f"after_{name}"], expected, what=f"after: {name}", tol=(1e-6, 1e-7))


def test_weights_h5_round_trip(saved):
    model = _models.build_model(seed=_models.SEED + 1)
    before = _call(model, saved["x"])
    assert not np.array_equal(before["tasks"], saved["predictions"]["tasks"])
    model.load_weights(saved["directory"] / "model.weights.h5")
    after = _call(model, saved["x"])
    for name, expected in saved["predictions"].items():
        np.testing.assert_array_equal(after[name], expected, err_msg=name)


# --------------------------------------------------------------------------
# Files made by earlier versions
# --------------------------------------------------------------------------


def test_fixtures_exist():
    assert FIXTURE_FILES, f"no .keras fixture in {FIXTURES}: run tests/fixtures/make_fixture.py"


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.name)
def test_fixture_loads_and_predicts(path):
    meta = json.loads(path.with_suffix(".json").read_text())
    data = np.load(path.with_suffix(".npz"))
    model = keras.models.load_model(path)  # safe_mode=True, no custom_objects

    # The file uses the names this version still registers.
    assert set(meta["registered_names"]) <= set(keras.saving.get_custom_objects())

    # Made on TensorFlow; other backends and CPUs round differently in the
    # last bits, hence a float32 tolerance rather than bit equality.
    x = data["x"]
    predictions = _call(model, x)
    for name in predictions:
        assert_close(predictions[name], data[f"pred_{name}"], what=name, tol=(1e-5, 1e-6))

    # The compiled losses and metrics come back with the same behaviour.
    y = {f[2:]: data[f] for f in data.files if f.startswith("y_")}
    evaluated = model.evaluate(x, y, batch_size=32, verbose=0, return_dict=True)
    assert evaluated.keys() == meta["evaluate"].keys()
    for name, expected in meta["evaluate"].items():
        assert_close(evaluated[name], expected, what=name, tol=(1e-5, 1e-6))


# --------------------------------------------------------------------------
# Safety: plain configs, loud failures at load
# --------------------------------------------------------------------------


def _registered_classes():
    return {
        name: cls
        for name, cls in keras.saving.get_custom_objects().items()
        if name.startswith("keras_stable>")
    }


def test_every_name_is_registered():
    registered = _registered_classes()
    missing = [name for name in REGISTERED_NAMES if name not in registered]
    assert not missing, f"registered names are an on-disk format; missing: {missing}"
    for name, cls in registered.items():
        assert cls.__module__.startswith("keras_stable."), (name, cls)


# Constructor arguments without a default.
_REQUIRED = {
    "LinearSoftmaxHead": {"vocab_size": 10},
    "StableMultiHeadAttention": {"num_heads": 2, "key_dim": 4},
    "StableGroupedQueryAttention": {"head_dim": 4, "num_query_heads": 4, "num_key_value_heads": 2},
    "Guarded": {"optimizer": "adam", "global_clipnorm": 1.0},
}


# Classes that wrap a model of another library: their save and load is
# tested where that library is (tests/hub/test_fused_causal_lm.py).
_WRAPPERS = {"FusedCausalLM"}


def _instances():
    """Each registered class with its defaults, plus non-default variants."""
    instances = [
        (name, cls(**_REQUIRED.get(cls.__name__, {})))
        for name, cls in _registered_classes().items()
        if cls.__name__ not in _WRAPPERS
    ]
    variants = list(_models.losses(per="task").values())
    variants += [m for ms in _models.metrics(per="task").values() for m in ms]
    variants += [
        keras_stable.layers.SafeNorm(axis=1, keepdims=True, name="n", dtype="mixed_float16"),
        keras_stable.layers.StableSoftmax(axis=-2),
        keras_stable.losses.StableSparseSoftmaxCrossEntropy(
            ignore_class=0, reduction="sum", axis=1
        ),
        keras_stable.losses.StableSoftmaxCrossEntropy(label_smoothing=0.2, axis=0),
        keras_stable.losses.MaskedMultiTaskDistance(task_mask=[True, False], squared=True),
        keras_stable.metrics.StableSparseCrossEntropy(ignore_class=-1, from_logits=False),
    ]
    instances += [(type(obj).__name__ + "(variant)", obj) for obj in variants]
    return instances


_PLAIN = (str, int, float, bool, type(None))


def _assert_plain(value, where):
    """Only JSON values: no callables, bytes, arrays, pickles or code."""
    if isinstance(value, dict):
        assert value.get("class_name") not in ("__lambda__", "function"), where
        for key, item in value.items():
            assert isinstance(key, str), f"{where}: key {key!r}"
            _assert_plain(item, f"{where}.{key}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _assert_plain(item, f"{where}[{i}]")
    else:
        assert isinstance(value, _PLAIN), f"{where}: {type(value).__name__} {value!r}"


def test_configs_are_plain_json_values():
    for label, obj in _instances():
        config = obj.get_config()
        _assert_plain(config, label)
        # JSON round trip changes nothing (no tuples turned lists, no NaN).
        assert json.loads(json.dumps(config, allow_nan=False)) == config, label
        # And the config rebuilds an equal object (every argument stored).
        rebuilt = type(obj).from_config(json.loads(json.dumps(config)))
        assert rebuilt.get_config() == config, label


def _edit_file(source, target, edit):
    """Copies a `.keras` archive, applying `edit(config_dict)` to config.json."""
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename == "config.json":
                config = json.loads(data)
                edit(config)
                data = json.dumps(config).encode()
            dst.writestr(item, data)
    return target


def _objects(node, registered_name):
    """Every serialized object in `node` registered as `registered_name`."""
    if isinstance(node, dict):
        if node.get("registered_name") == registered_name:
            yield node
        for value in node.values():
            yield from _objects(value, registered_name)
    elif isinstance(node, list):
        for value in node:
            yield from _objects(value, registered_name)


def _set(registered_name, **arguments):
    def edit(config):
        found = list(_objects(config, registered_name))
        assert found, registered_name
        for obj in found:
            obj["config"].update(arguments)

    return edit


def _rename(registered_name, new_name):
    def edit(config):
        found = list(_objects(config, registered_name))
        assert found, registered_name
        for obj in found:
            obj["registered_name"] = new_name
            obj["class_name"] = new_name.split(">")[-1]

    return edit


# Keras wraps a layer's constructor error into a `TypeError` ("could not be
# deserialized properly ... Exception encountered: <ours>"); losses and
# metrics raise ours directly. Either way the load fails and the message
# carries keras_stable's text, matched here.
_BAD = (TypeError, ValueError)


@pytest.mark.parametrize(
    "edit, pattern",
    [
        (_set("keras_stable>StableSoftmax", axis="x"), "`axis` must be an int, got 'x'"),
        (_set("keras_stable>LogSoftmax", axis=1.5), "`axis` must be an int, got 1.5"),
        (_set("keras_stable>SafeNorm", keepdims="yes"), "`keepdims` must be a bool"),
        (_set("keras_stable>L2Normalize", axis=7), "Invalid `axis`=7"),
        (_set("keras_stable>MaskedMultiTaskDistance", per="bogus"), "Invalid `per`='bogus'"),
        (
            _set("keras_stable>MaskedMultiTaskDistance", task_weights=[1.0, -1.0, 1.0]),
            "`task_weights` must be finite and >= 0",
        ),
        (_set("keras_stable>MaskedMultiTaskDistanceMetric", per="bogus"), "Invalid `per`='bogus'"),
        (_set("keras_stable>StableSoftmaxCrossEntropy", label_smoothing=-0.5), "label_smoothing"),
        (
            _set("keras_stable>StableSparseSoftmaxCrossEntropy", ignore_class="x"),
            "`ignore_class` must be an int or None",
        ),
        (
            _set("keras_stable>StableSigmoidCrossEntropy", from_logits="no"),
            "`from_logits` must be a bool",
        ),
        (_set("keras_stable>StableSparseCrossEntropy", axis="x"), "axis"),
        (_set("keras_stable>StableCrossEntropy", reduction="bogus"), "reduction"),
        (_rename("keras_stable>SafeNorm", "keras_stable>NoSuchLayer"), "NoSuchLayer"),
        (
            _rename("keras_stable>StableSigmoidCrossEntropy", "keras_stable>NoSuchLoss"),
            "NoSuchLoss",
        ),
    ],
    ids=[
        "softmax-axis-str",
        "log_softmax-axis-float",
        "safe_norm-keepdims-str",
        "l2_normalize-axis-out-of-range",
        "loss-per-bogus",
        "loss-negative-task-weight",
        "metric-per-bogus",
        "negative-label-smoothing",
        "ignore-class-str",
        "from-logits-str",
        "metric-axis-str",
        "metric-unknown-argument",
        "unknown-layer-class",
        "unknown-loss-class",
    ],
)
def test_malformed_config_fails_at_load(tmp_path, edit, pattern):
    path = _edit_file(FIXTURE_FILES[0], tmp_path / "bad.keras", edit)
    with pytest.raises(_BAD, match=re.escape(pattern)):
        keras.models.load_model(path)


def test_saved_configs_hold_no_code(saved):
    """The `.keras` file itself: loads in safe mode, no lambda anywhere."""
    with zipfile.ZipFile(saved["directory"] / "model.keras") as archive:
        names = archive.namelist()
        config = json.loads(archive.read("config.json"))
    assert not [n for n in names if n.endswith((".pkl", ".pickle", ".npy"))], names
    _assert_plain(config, "config.json")
