"""`keras_stable.audit.audit`: the right layer, stage, trap and mode.

Each trap is built in its plain formulation inside an otherwise ordinary
model (`tests/audit/models.py`); the audit must name the layer ("trap", or
"loss"), the stage and the trap, in the modes where it fires on this
backend. The same models built with keras_stable, and clean Keras models,
must give no finding, stress probes included.

XLA compilation costs a second or more a model, so most tests run the
eager mode only; the compiled mode is tested where it differs (the norm at
zero, hidden by TensorFlow's eager CPU kernels) and once for every kind of
finding that is the same in both modes.
"""

import keras
import numpy as np
import pytest
from keras import ops

from keras_stable import audit as audit_lib
from keras_stable.audit import AuditInputError
from keras_stable.audit import AuditReport
from keras_stable.audit import Finding
from keras_stable.audit import audit
from tests.audit import models

BACKEND = keras.backend.backend()
COMPILED = BACKEND in ("tensorflow", "jax")
BOTH = ["eager", "compiled"]

# The modes in which the norm at zero (bug report 1) goes NaN: TensorFlow's
# eager CPU kernel returns 0 for the 0/0 of the squared norm, XLA does not;
# JAX is NaN either way; torch's norm has a zero gradient at 0.
NORM_MODES = {"tensorflow": ["compiled"], "jax": ["eager", "compiled"], "torch": []}[BACKEND]


def _summary(report):
    return [(f.layer, f.stage, f.trap, f.mode, f.probe) for f in report.findings]


def _run(builder, modes=("eager",), **kwargs):
    build_kwargs = kwargs.pop("build", {})
    model, x, y, loss = builder(**build_kwargs)
    return audit(model, x, y, loss=loss, modes=list(modes), **kwargs)


# -- the two bug reports ---------------------------------------------------


@pytest.mark.parametrize(
    "builder,layer",
    [(models.norm_in_layer, "trap"), (models.norm_in_loss, "loss")],
    ids=["in_a_layer", "in_the_loss"],
)
def test_norm_at_zero_is_named_in_the_modes_where_it_fires(builder, layer):
    report = _run(builder, modes=BOTH)
    assert _summary(report) == [(layer, "gradient", "norm_at_zero", m, None) for m in NORM_MODES]
    assert report.ok == (not NORM_MODES)
    for finding in report.findings:
        assert "all-zero vector" in finding.detail
        assert "safe_norm" in finding.fix or "MaskedMultiTaskDistance" in finding.fix


@pytest.mark.parametrize(
    "builder", [models.softmax_in_layer, models.softmax_in_loss], ids=["layer", "loss"]
)
def test_hand_written_softmax_is_named_in_both_modes(builder):
    report = _run(builder, modes=BOTH)
    layer = "trap" if builder is models.softmax_in_layer else "loss"
    modes = BOTH if COMPILED else ["eager"]
    assert _summary(report) == [(layer, "forward", "unshifted_softmax", m, None) for m in modes]
    assert "StableSoftmax" in report.findings[0].fix


# -- the other traps, eagerly ----------------------------------------------


@pytest.mark.parametrize(
    "builder,stage,trap",
    [
        (models.nan_labels_times_mask, "forward", "zero_times_inf"),
        (models.nan_labels_where, "gradient", "zero_times_inf"),
        (models.masked_attention, "forward", "fully_masked_row"),
        (models.exp_overflow, "forward", "exp_overflow"),
    ],
    ids=lambda v: v.__name__ if callable(v) else None,
)
def test_trap_is_named(builder, stage, trap):
    report = _run(builder)
    assert _summary(report) == [("trap", stage, trap, "eager", None)]


@pytest.mark.parametrize("dtype", ["float16", "mixed_float16"])
def test_epsilon_underflow_in_half_precision(dtype):
    report = _run(models.epsilon_norm, build={"dtype": dtype})
    assert _summary(report) == [("trap", "gradient", "epsilon_underflow", "eager", None)]
    assert "float32" in report.findings[0].detail


def test_epsilon_norm_is_finite_in_float32_and_caught_by_the_mixed_float16_probe():
    report = _run(models.epsilon_norm, stress=["mixed_float16", "mixed_bfloat16"])
    # bfloat16 has float32's range: 1e-12 survives, nothing fires.
    assert _summary(report) == [("trap", "gradient", "epsilon_underflow", "eager", "mixed_float16")]
    assert report.probes == ["mixed_float16", "mixed_bfloat16"]


def test_fully_masked_row_caught_by_the_masked_probe():
    report = _run(models.masked_attention, build={"fully_masked": False}, stress=["masked"])
    assert _summary(report) == [("trap", "forward", "fully_masked_row", "eager", "masked")]


def test_large_probe_finds_the_latent_overflow():
    inputs = keras.Input((4,))
    logits = keras.layers.Dense(3, kernel_initializer="ones", name="logits")(inputs)
    probs = keras.layers.Lambda(
        lambda s: ops.exp(s) / ops.sum(ops.exp(s), axis=-1, keepdims=True), name="trap"
    )(logits)
    model = keras.Model(inputs, probs)
    x = np.abs(np.random.default_rng(0).normal(size=(4, 4))).astype("float32")
    report = audit(model, x, modes=["eager"], stress=["large"])
    assert _summary(report) == [("trap", "forward", "unshifted_softmax", "eager", "large")]


@pytest.mark.skipif(not COMPILED, reason="no compiled mode on torch")
def test_compiled_mode_names_the_same_gradient_trap():
    report = _run(models.nan_labels_where, modes=BOTH)
    assert _summary(report) == [("trap", "gradient", "zero_times_inf", m, None) for m in BOTH]


# -- no false alarms -------------------------------------------------------


@pytest.mark.parametrize(
    "builder",
    [
        models.norm_in_layer,
        models.norm_in_loss,
        models.softmax_in_layer,
        models.softmax_in_loss,
        models.nan_labels_times_mask,
        models.nan_labels_where,
        models.masked_attention,
        models.exp_overflow,
    ],
    ids=lambda b: b.__name__,
)
def test_the_keras_stable_formulation_is_clean(builder):
    # The input probes are those that make the plain formulations fire
    # (the precision probes: test_safe_norm_under_mixed_float16_is_clean).
    report = _run(
        builder, build={"stable": True}, stress=["zeros", "coincident", "large", "masked"]
    )
    assert report.ok, str(report)


@pytest.mark.skipif(not COMPILED, reason="no compiled mode on torch")
def test_the_keras_stable_norm_is_clean_under_xla():
    report = _run(models.norm_in_layer, modes=["compiled"], build={"stable": True})
    assert report.ok, str(report)


def test_safe_norm_under_mixed_float16_is_clean():
    report = _run(models.epsilon_norm, build={"stable": True, "dtype": "mixed_float16"})
    assert report.ok, str(report)


def _clean_probes(name):
    """Every probe, except on JAX, where the op-by-op (eager) run compiles
    each primitive again for a new dtype (~4 s a precision probe on 2 CPUs):
    there the transformer and the LSTM get the input probes only (their
    precision probes run on the other backends)."""
    if BACKEND == "jax" and name != "small_cnn":
        return ["zeros", "coincident", "large", "masked"]
    return True


@pytest.mark.parametrize("name", sorted(models.CLEAN_MODELS))
def test_clean_keras_models_give_no_finding_under_every_probe(name):
    report = _run(models.CLEAN_MODELS[name], stress=_clean_probes(name))
    assert report.ok, str(report)
    assert "coincident" in report.probes
    if _clean_probes(name) is True:
        assert "mixed_float16" in report.probes and "mixed_bfloat16" in report.probes
    assert not [n for n in report.notes if "failed" in n or "could not" in n], report.notes


@pytest.mark.skipif(not COMPILED, reason="no compiled mode on torch")
def test_clean_cnn_is_clean_compiled():
    report = _run(models.small_cnn, modes=["compiled"])
    assert report.ok and report.modes == ["compiled"], str(report)


# -- model structures ------------------------------------------------------


class _Subclassed(keras.Model):
    """A norm in a sublayer, or in the model's own call (between layers)."""

    def __init__(self, norm_in_call):
        super().__init__(name="subclassed")
        self.dense = keras.layers.Dense(4, kernel_initializer="ones", name="dense")
        self.norm = keras.layers.Lambda(lambda t: ops.sqrt(ops.sum(t**2, axis=-1)), name="norm")
        self.norm_in_call = norm_in_call

    def build(self, input_shape):
        self.dense.build(input_shape)

    def call(self, x):
        h = self.dense(x)
        if self.norm_in_call:
            return ops.sqrt(ops.sum(h**2, axis=-1))
        return self.norm(h)


@pytest.mark.parametrize("norm_in_call,layer", [(False, "norm"), (True, "subclassed")])
def test_subclassed_model(norm_in_call, layer):
    x = np.ones((3, 5), "float32")
    x[1] = 0.0
    model = _Subclassed(norm_in_call)
    model.build((None, 5))
    model.dense.bias.assign(np.zeros(4, "float32"))
    report = audit(model, x, modes=["eager"])
    assert _summary(report) == [(layer, "gradient", "norm_at_zero", "eager", None)]
    if norm_in_call:
        assert "own call()" in report.findings[0].detail


def test_nested_model_layers_are_named_by_path():
    inner = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(3, name="d"),
            keras.layers.Activation("exponential", name="exp"),
        ],
        name="inner",
    )
    outer = keras.Sequential(
        [keras.Input((4,)), inner, keras.layers.Dense(1, name="head")], name="outer"
    )
    inner.get_layer("d").set_weights([np.full((4, 3), 50.0, "float32"), np.zeros(3, "float32")])
    report = audit(outer, np.ones((2, 4), "float32"), modes=["eager"])
    assert _summary(report) == [("inner/exp", "forward", "exp_overflow", "eager", None)]


def test_non_finite_weights_are_named():
    model, x, _, _ = models.exp_overflow(stable=True)
    kernel, bias = model.get_layer("logits").get_weights()
    kernel[0, 0] = np.nan
    model.get_layer("logits").set_weights([kernel, bias])
    report = audit(model, x, modes=["eager"])
    assert _summary(report) == [("logits", "forward", "unknown", "eager", None)]
    assert "weights are not finite" in report.findings[0].detail


def test_non_finite_batch_is_named_not_blamed_on_a_trap():
    model, x, _, _ = models.exp_overflow(stable=True)
    x = x.copy()
    x[0, 0] = np.nan
    finding = audit(model, x, modes=["eager"]).findings[0]
    assert (finding.layer, finding.stage, finding.trap) == ("logits", "forward", "unknown")
    assert "already NaN/inf" in finding.detail


# -- costs nothing when not used -------------------------------------------


def _instance_calls(model):
    return [layer.name for layer in model.layers if "call" in vars(layer)]


def test_the_audit_leaves_no_hook_behind():
    model, x, _, _ = models.norm_in_layer()
    assert not _instance_calls(model)
    audit(model, x, modes=["eager"])
    assert not _instance_calls(model)
    assert not audit_lib.tracing._ACTIVE


def test_hooks_are_removed_when_the_model_fails():
    model, x, _, _ = models.exp_overflow()
    with pytest.raises(AuditInputError):
        audit(model, x, y=np.zeros((len(x), 4), "float32"), loss=lambda y, p: ops.sum(p, axis=99))
    assert not _instance_calls(model)
    assert not audit_lib.tracing._ACTIVE


def test_the_model_and_its_weights_are_unchanged():
    model, x, _, _ = models.small_cnn()
    before = [w.copy() for w in model.get_weights()]
    audit(model, x, modes=["eager"], stress=["zeros", "mixed_float16"])
    for a, b in zip(before, model.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert model.dtype_policy.name == "float32"
    assert keras.config.dtype_policy().name == "float32"


def _dropout_lstm():
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((5, 3)),
            keras.layers.LSTM(4, dropout=0.2, recurrent_dropout=0.1),
            keras.layers.Dropout(0.3),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer="sgd", loss="mse")
    return model


def test_a_fit_after_the_audit_is_the_fit_without_it():
    # An LSTM with dropout: on JAX the compiled run used to leave a tracer
    # in its seed generator (the next fit raised UnexpectedTracerError);
    # on TF and torch it moved the random state.
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 5, 3)).astype("float32")
    y = rng.normal(size=(8, 1)).astype("float32")
    trained = []
    for audited in (False, True):
        model = _dropout_lstm()
        if audited:
            assert audit(model, x, y, modes=BOTH if COMPILED else ["eager"]).ok
        model.fit(x, y, epochs=2, batch_size=4, shuffle=False, verbose=0)
        trained.append(model.get_weights())
    for a, b in zip(*trained):
        np.testing.assert_array_equal(a, b)


# -- the report ------------------------------------------------------------


def test_report_table_and_dict():
    report = _run(models.softmax_in_layer)
    text = str(report)
    assert text.splitlines()[0].startswith(f"keras_stable audit on {BACKEND}: 1 finding")
    for column in ("layer", "stage", "mode", "probe", "trap", "fix"):
        assert column in text
    assert "unshifted_softmax" in text
    # The page as installed: its title and the command that prints it.
    assert 'Read: "Hand-written softmax" (python -m keras_stable.audit --explain' in text
    assert "docs/traps" not in text
    as_dict = report.as_dict()
    assert as_dict["ok"] is False
    assert as_dict["findings"][0]["trap"] == "unshifted_softmax"
    assert isinstance(report.findings[0], Finding)


def test_the_header_counts_the_rows_of_the_table():
    same = dict(layer="dense", stage="forward", trap="exp_overflow", fix="StableSoftmax")
    report = AuditReport(
        findings=[Finding(mode="eager", **same), Finding(mode="compiled", **same)],
        modes=["eager", "compiled"],
        backend=BACKEND,
    )
    lines = str(report).splitlines()
    assert lines[0].startswith(f"keras_stable audit on {BACKEND}: 1 finding (")
    table = lines[2 : lines.index("", 2)]
    assert len(table) == 2 + 1  # the column names, the rule, one row
    assert "eager, compiled" in table[2]


def test_clean_report_says_so():
    report = AuditReport(modes=["eager"], backend=BACKEND)
    assert report.ok
    assert "no NaN or inf" in str(report)


def test_every_trap_has_a_fix_and_a_page():
    for trap, entry in audit_lib.report.TRAPS.items():
        assert entry["fix"] and entry["doc"], trap


# -- bad input -------------------------------------------------------------


def test_bad_inputs_are_clear_errors():
    model, x, _, _ = models.exp_overflow()
    with pytest.raises(AuditInputError, match="expects shape"):
        audit(model, np.ones((2, 3), "float32"))
    with pytest.raises(AuditInputError, match="keras.Model"):
        audit(keras.layers.Dense(2), x)
    with pytest.raises(AuditInputError, match="different batch sizes|examples"):
        audit(model, x, y=np.zeros((len(x) + 1, 4), "float32"), loss="mse")
    with pytest.raises(AuditInputError, match="without a loss"):
        audit(model, x, y=np.zeros((len(x), 4), "float32"))
    with pytest.raises(AuditInputError, match="without `y`"):
        audit(model, x, loss="mse")
    with pytest.raises(AuditInputError, match="takes 1 input"):
        audit(model, [x, x])
    with pytest.raises(ValueError, match="Unknown stress probe"):
        audit(model, x, stress=["nope"])
    with pytest.raises(ValueError, match="modes"):
        audit(model, x, modes=["jit"])


def test_a_model_that_cannot_be_called_on_x():
    model = _Subclassed(norm_in_call=False)
    model.build((None, 5))
    with pytest.raises(AuditInputError, match="cannot be called on x"):
        audit(model, np.ones((2, 3), "float32"))
    assert not _instance_calls(model)


def test_compiled_loss_is_used():
    model, x, y, _ = models.softmax_in_loss()
    model.compile(loss=models.plain_softmax_cross_entropy)
    report = audit(model, x, y, modes=["eager"])
    assert _summary(report) == [("loss", "forward", "unshifted_softmax", "eager", None)]


def _two_outputs():
    """The keras-io miniature GPT's shape: logits and a second output that
    has no loss (`compile(loss=[loss_fn, None])`)."""
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(5, name="hidden")(inputs)
    logits = keras.layers.Dense(3, name="logits")(hidden)
    return keras.Model(inputs, [logits, hidden])


def test_a_list_of_losses_with_none_entries_is_audited_as_fit_trains_it():
    model = _two_outputs()
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer="sgd", loss=[loss_fn, None])
    x = np.random.default_rng(0).normal(size=(6, 4)).astype("float32")
    y = np.array([0, 1, 2, 0, 1, 2])
    report = audit(model, x, y, modes=["eager"])
    assert report.ok, str(report)
    # The loss audited is the loss fit trains on.
    expected = float(keras.ops.convert_to_numpy(loss_fn(y, model(x)[0])))
    assert report.findings == [] and abs(models.audited_loss(model, x, y) - expected) < 1e-5


class _AddsItsLoss(keras.layers.Layer):
    """The keras-io captcha OCR's `CTCLayer` pattern: the loss is added with
    `add_loss` and the layer returns its input."""

    def call(self, y_true, y_pred):
        self.add_loss(keras.ops.exp(keras.ops.mean(keras.ops.square(y_true - y_pred)) * 100.0))
        return y_pred


def test_add_loss_terms_are_part_of_the_audited_loss():
    inputs, labels = keras.Input((4,)), keras.Input((2,))
    outputs = _AddsItsLoss()(labels, keras.layers.Dense(2)(inputs))
    model = keras.Model([inputs, labels], outputs)
    model.compile(optimizer="sgd")
    x = [np.ones((3, 4), "float32"), np.full((3, 2), 5.0, "float32")]
    # exp(100 * 25) overflows: fit's loss is inf, and so is the audited one.
    assert models.audited_loss(model, x, None) == np.inf
    report = audit(model, x, modes=["eager"])
    assert not report.ok, str(report)


def test_audit_section_for_the_demo():
    model, x, y, loss = models.softmax_in_loss()
    text = audit_lib.audit_section([("2-3-2 classifier", model, x, y, loss)], modes=["eager"])
    assert text.startswith("2-3-2 classifier\n================")
    assert "unshifted_softmax" in text
