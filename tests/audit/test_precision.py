"""`audit(..., precision=)`: the half-precision pre-flight from one float32 run."""

import keras
import numpy as np
import pytest

from keras_stable.audit import audit
from keras_stable.audit import execution
from keras_stable.audit import tracing
from tests.audit import models


def _half(report):
    return [
        (f.layer, f.stage, f.trap, f.examples) for f in report.findings if f.trap.startswith("half")
    ]


def test_a_layer_reaching_1e5_overflows_float16_not_bfloat16():
    model, x, y, loss = models.reaches_1e5()
    weights = [w.copy() for w in model.get_weights()]
    report = audit(model, x, y, loss=loss, modes=["eager"], precision="mixed_float16")
    assert _half(report) == [("big", "forward", "half_overflow", models.GUILTY)]
    assert report.findings[0].probe == "mixed_float16"
    assert 'dtype="float32"' in report.findings[0].fix
    assert report.headroom["big"] == pytest.approx(1e5 / 65504.0, rel=1e-5)
    assert set(report.headroom) == {"big", "head"}
    assert "headroom" in str(report)
    # The model is left as it was.
    assert model.dtype_policy.name == "float32"
    for a, b in zip(weights, model.get_weights()):
        np.testing.assert_array_equal(a, b)
    bf16 = audit(model, x, y, loss=loss, modes=["eager"], precision="mixed_bfloat16")
    assert bf16.ok and bf16.headroom["big"] < 1e-30


def test_half_underflow():
    model, x, y, loss = models.tiny_activations()
    report = audit(model, x, y, loss=loss, modes=["eager"], precision="mixed_float16")
    assert [(layer, stage, trap) for layer, stage, trap, _ in _half(report)] == [
        ("tiny", "forward", "half_underflow")
    ]


@pytest.mark.parametrize("name", sorted(models.CLEAN_MODELS))
def test_clean_models_have_no_half_finding(name):
    model, x, y, loss = models.CLEAN_MODELS[name]()
    report = audit(model, x, y, loss=loss, modes=["eager"], precision="mixed_float16")
    # No finding at all: every activation fits float16, and so does every
    # gradient at a loss scale of 1. (On these tiny batches gradients of
    # order 1 pass 65504 / 2**15 = 2: dynamic loss scaling skips a first
    # step or two, said in a note, not a finding.)
    assert _half(report) == [], str(report)
    assert report.ok, str(report)
    assert report.headroom and all(0 <= v < 1 for v in report.headroom.values())


def _regression(scale):
    """A float32 regressor of targets around 300, its MSE times `scale`."""
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((8,)),
            keras.layers.Dense(16, activation="relu", name="hidden"),
            keras.layers.Dense(1, name="out"),
        ]
    )
    x = np.random.default_rng(0).standard_normal((32, 8)).astype("float32")
    y = (100 * x[:, :1] + 300).astype("float32")

    def loss(y_true, y_pred):
        return scale * keras.ops.mean((y_true - y_pred) ** 2)

    return model, x, y, loss


def test_gradients_past_the_loss_scale_are_a_note_not_a_finding():
    """Gradients of ~20 reaching the output: times 2**15 past 65504, which
    dynamic loss scaling fixes by itself in a few skipped steps (no layer to
    put in float32): a note with the count, no finding."""
    model, x, y, loss = _regression(1.0)
    report = audit(model, x, y, loss=loss, modes=["eager"], precision="mixed_float16")
    assert report.ok, str(report)
    (note,) = [n for n in report.notes if n.startswith("loss scale")]
    # Largest gradient g = 2 * |p - y| / 32 (the MSE's mean over the batch).
    grad = np.max(2 * np.abs(model.predict(x, verbose=0) - y) / y.size)
    skipped = int(np.ceil(np.log2(grad * 2**15 / 65504)))
    assert f"skips about {skipped} step(s)" in note, (note, grad)


def test_a_gradient_past_float16_at_scale_1_is_a_finding():
    """The same model with its loss times 1e5: the output gradient passes
    65504 at any loss scale >= 1: `half_overflow` at the gradient stage,
    every row of the batch."""
    model, x, y, loss = _regression(1e5)
    report = audit(model, x, y, loss=loss, modes=["eager"], precision="mixed_float16")
    # The gradients reaching each output, by hand (float64).
    w1, b1, w2, b2 = (np.asarray(w, "float64") for w in model.get_weights())
    pre = x @ w1 + b1
    g_out = 1e5 * 2 * ((np.maximum(pre, 0) @ w2 + b2) - y) / y.size
    g_hidden = g_out @ w2.T * (pre > 0)
    expected = [
        (name, "gradient", "half_overflow", tuple(np.nonzero(np.abs(g).max(-1) > 65504)[0]))
        for name, g in (("hidden", g_hidden), ("out", g_out))
        if np.abs(g).max() > 65504
    ]
    assert [name for name, *_ in expected] == ["hidden", "out"]
    assert _half(report) == expected, str(report)
    assert "even at a loss scale of 1" in str(report)


def test_unknown_precision():
    model, x, y, loss = models.reaches_1e5()
    with pytest.raises(ValueError, match="precision"):
        audit(model, x, precision="float16")


class _SoftmaxHead(keras.layers.Layer):
    """A custom layer as users write one: its sublayer made in `__init__`
    without a dtype, and a hand-written softmax."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.proj = keras.layers.Dense(units, kernel_initializer="ones", name="proj")

    def build(self, input_shape):
        self.proj.build(input_shape)

    def call(self, x):
        z = keras.ops.exp(self.proj(x))
        return z / keras.ops.sum(z, axis=-1, keepdims=True)

    def get_config(self):
        return {**super().get_config(), "units": self.units}


def _custom_head_model():
    inputs = keras.Input((4,))
    model = keras.Model(inputs, _SoftmaxHead(3, name="head")(inputs))
    # Rows 1 and 3 reach exp(12) = 162755 > 65504: NaN in float16 only.
    x = np.full((4, 4), 0.5, "float32")
    x[1] = x[3] = 3.0
    return model, x


def test_a_custom_layers_sublayers_run_under_the_policy(monkeypatch):
    model, x = _custom_head_model()
    # Registered as a user's module would be, for the rebuild from config.
    monkeypatch.setitem(keras.saving.get_custom_objects(), "_SoftmaxHead", _SoftmaxHead)
    assert np.all(np.isfinite(keras.ops.convert_to_numpy(model(x))))
    # Under mixed_float16 as a user runs it, the model goes NaN.
    keras.config.set_dtype_policy("mixed_float16")
    try:
        real = keras.Model.from_config(model.get_config())
    finally:
        keras.config.set_dtype_policy("float32")
    real.set_weights(model.get_weights())
    assert not np.all(np.isfinite(keras.ops.convert_to_numpy(real(x))))
    # Both the probe and the pre-flight see it (they said "no NaN or inf").
    for kwargs in ({"stress": ["mixed_float16"]}, {"precision": "mixed_float16"}):
        report = audit(model, x, modes=["eager"], **kwargs)
        found = [(f.layer, f.trap, f.probe, f.examples) for f in report.findings]
        assert found == [("head", "half_overflow", "mixed_float16", (1, 3))], str(report)
        assert "dtype=self.dtype_policy" in report.findings[0].detail
    assert keras.config.dtype_policy().name == "float32"
    assert model.get_layer("head").proj.dtype_policy.name == "float32"


class _InfUnlessInference(keras.layers.Layer):
    """inf unless called with `training=False`, as the audit's runs do: a
    rerun that dropped the flag (a dropout in training mode) would show."""

    def call(self, x, training=None):
        return x * (1.0 if training is False else np.inf)


def test_the_rerun_in_float32_passes_the_training_flag_of_the_recorded_call():
    inputs = keras.Input((3,))
    model = keras.Model(inputs, _InfUnlessInference(name="flagged")(inputs))
    x = np.ones((2, 3), "float32")
    with tracing.instrument(tracing.collect_nodes(model)), tracing.Recorder() as recorder:
        model(x, training=False)
    (info,) = [c for c in recorder.calls if c.name == "flagged"]
    assert info.template[1]["training"] is False
    ins = [keras.ops.convert_to_numpy(t) for t in recorder.tensors[info.index][0]]
    assert execution.rerun_in_float32(info, ins, None) == (True, True)
