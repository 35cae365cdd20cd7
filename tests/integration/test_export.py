"""Export for serving: a model using keras_stable, served without keras_stable.

`model.export(path)` writes a TensorFlow SavedModel whose `serve` endpoint
is a plain TF graph: the serving process needs neither Keras's model code
nor keras_stable. Each test exports the committed fixture model (every
keras_stable layer) and reloads the artifact in a fresh TensorFlow process
that never imports keras_stable, with `tf.saved_model.load` (the `serve`
function and the `serving_default` signature, also under XLA) and with
`keras.layers.TFSMLayer(path, call_endpoint="serve")`.

Backends:
- TensorFlow: supported (the graph is traced from the model).
- JAX: supported through `jax2tf` (TensorFlow must be installed); the batch
  dimension stays dynamic (shape polymorphism).
- PyTorch: `format="tf_saved_model"` needs `torch_xla`, which the CPU test
  environment does not have, so it is skipped; the torch-native export,
  `format="torch"` (a `torch.export` `.pt2` ExportedProgram), is tested
  instead. It has a static batch size unless `dynamic_shapes` is given.
- `TFSMLayer` itself only runs on the TensorFlow backend (a Keras
  limitation), which is why reloading always happens in a TF process.
"""

import importlib.util
import pathlib

import keras
import numpy as np
import pytest

import keras_stable  # noqa: F401  (registers the classes the fixture uses)
from tests.backend_utils import assert_close
from tests.integration._fresh_process import run_fresh

BACKEND = keras.backend.backend()
FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures"
FIXTURE = sorted(FIXTURES.glob("*.keras"))[-1]

# Same math, different graph (traced/jax2tf/XLA vs the eager call): float32
# rounding may differ in the last bits.
TOL = (1e-5, 1e-6)

# Runs in a fresh TensorFlow process that never imports keras_stable.
_SERVE = """
import sys
import numpy as np
import tensorflow as tf
import keras

path = {path!r}
data = np.load({data!r})
results = {{}}
for size in (32, 5):  # the exported batch dimension is dynamic
    x = data["x"][:size]
    loaded = tf.saved_model.load(path)
    served = loaded.serve(tf.constant(x))
    signature = loaded.signatures["serving_default"](tf.constant(x))
    xla = tf.function(loaded.serve, jit_compile=True)(tf.constant(x))
    layer = keras.layers.TFSMLayer(path, call_endpoint="serve")
    from_layer = layer(x)
    for how, outputs in (("serve", served), ("signature", signature), ("xla", xla), ("tfsm", from_layer)):
        for name, value in outputs.items():
            results["%s_%d_%s" % (how, size, name)] = np.asarray(value)
np.savez({out!r}, **results)
report({{"keras_stable_imported": any(m.startswith("keras_stable") for m in sys.modules)}})
"""


def _expected(model, x):
    return {k: keras.ops.convert_to_numpy(v) for k, v in model(x).items()}


def _serve_in_fresh_tf_process(path, tmp_path):
    data = FIXTURE.with_suffix(".npz")
    out = tmp_path / "served.npz"
    child = run_fresh(
        _SERVE.format(path=str(path), data=str(data), out=str(out)),
        "tensorflow",
        cwd=tmp_path,
    )
    assert child["keras_stable_imported"] is False
    return np.load(out)


def _check_served(served, expected_by_size):
    for size, expected in expected_by_size.items():
        for how in ("serve", "signature", "xla", "tfsm"):
            for name, value in expected.items():
                key = f"{how}_{size}_{name}"
                assert key in served.files, (key, served.files)
                assert_close(served[key], value, what=key, tol=TOL)


def _export_and_serve(tmp_path):
    model = keras.models.load_model(FIXTURE)
    x = np.load(FIXTURE.with_suffix(".npz"))["x"]
    expected = {size: _expected(model, x[:size]) for size in (32, 5)}
    path = tmp_path / "saved_model"
    model.export(path, verbose=False)  # format="tf_saved_model"
    _check_served(_serve_in_fresh_tf_process(path, tmp_path), expected)
    return path


@pytest.mark.tensorflow
def test_saved_model_export_from_tensorflow(tmp_path):
    _export_and_serve(tmp_path)


@pytest.mark.jax
def test_saved_model_export_from_jax(tmp_path):
    # jax2tf; the batch dimension is exported as polymorphic.
    path = _export_and_serve(tmp_path)
    # What does not work on JAX: reloading as a Keras layer (Keras supports
    # TFSMLayer on the TensorFlow backend only). Serve from a TF process.
    with pytest.raises(NotImplementedError, match="TensorFlow backend"):
        keras.layers.TFSMLayer(str(path), call_endpoint="serve")


@pytest.mark.torch
@pytest.mark.skipif(
    importlib.util.find_spec("torch_xla") is None,
    reason="tf_saved_model export on the torch backend needs torch_xla (not installed)",
)
def test_saved_model_export_on_torch(tmp_path):  # pragma: no cover - no torch_xla in CI
    model = keras.models.load_model(FIXTURE)
    x = np.load(FIXTURE.with_suffix(".npz"))["x"]
    expected = {32: _expected(model, x)}
    path = tmp_path / "saved_model"
    model.export(path, verbose=False, input_signature=[keras.InputSpec(shape=(32, x.shape[1]))])
    served = _serve_in_fresh_tf_process(path, tmp_path)
    for name, value in expected[32].items():
        assert_close(served[f"serve_32_{name}"], value, what=name, tol=TOL)


# Runs in a fresh process that imports neither Keras nor keras_stable.
_TORCH_PROGRAM = """
import sys
import numpy as np
import torch

program = torch.export.load({path!r})
x = torch.from_numpy(np.load({data!r})["x"])
outputs = program.module()(x)
np.savez({out!r}, **{{k: v.detach().numpy() for k, v in outputs.items()}})
report({{"imported": sorted({{m.split(".")[0] for m in sys.modules}} & {{"keras", "keras_stable"}})}})
"""


@pytest.mark.torch
def test_torch_export_program_runs_without_keras(tmp_path):
    model = keras.models.load_model(FIXTURE)
    x = np.load(FIXTURE.with_suffix(".npz"))["x"]
    expected = _expected(model, x)
    path = tmp_path / "model.pt2"
    # Static shapes: the batch size of the exported program is that of the
    # input signature (32 here).
    model.export(
        path,
        format="torch",
        verbose=False,
        input_signature=[keras.InputSpec(shape=x.shape, dtype="float32")],
    )
    out = tmp_path / "outputs.npz"
    child = run_fresh(
        _TORCH_PROGRAM.format(path=str(path), data=str(FIXTURE.with_suffix(".npz")), out=str(out)),
        "torch",
        cwd=tmp_path,
    )
    assert child["imported"] == []
    served = np.load(out)
    for name, value in expected.items():
        assert_close(served[name], value, what=name, tol=TOL)
