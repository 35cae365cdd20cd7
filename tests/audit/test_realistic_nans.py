"""The audit on the NaNs users hit, end to end: the model as a user writes
it, trained until it goes NaN, then the audit, then its fix applied as
written, trained finite again."""

import keras
import numpy as np
import pytest
from keras import ops

import keras_stable
from keras_stable.audit import audit
from tests import backend_utils
from tests.audit import models

BACKEND = keras.backend.backend()
# The audit's modes: eager and compiled on TF, as the JAX CI leg narrows
# them (compiled), eager on torch (tests/backend_utils.py).
MODES = list(backend_utils.MODES)


def handwritten_cross_entropy(y_true, p):
    """The StackOverflow loss: `-mean(sum(y * log(p)))` on probabilities."""
    return -ops.mean(ops.sum(y_true * ops.log(p), axis=-1))


def _fit_losses(model, x, y, loss, steps=3, jit_compile=False, optimizer=None):
    optimizer = optimizer or keras.optimizers.SGD(0.1)
    model.compile(optimizer=optimizer, loss=loss, jit_compile=jit_compile)
    history = model.fit(x, y, epochs=steps, batch_size=len(x), shuffle=False, verbose=0)
    return np.asarray(history.history["loss"])


def test_the_softmax_fixed_the_log_of_an_exact_zero_is_named_with_the_cross_entropy_fix():
    # Step two of the StackOverflow case: the softmax is StableSoftmax now,
    # but its output holds exact zeros and the loss takes their log.
    model, x, y, _ = models.softmax_in_layer(stable=True)
    assert not np.all(np.isfinite(_fit_losses(model, x, y, handwritten_cross_entropy)))
    model, x, y, _ = models.softmax_in_layer(stable=True)
    report = audit(model, x, y, loss=handwritten_cross_entropy, modes=MODES)
    traps = {(f.layer, f.trap) for f in report.findings}
    assert traps == {("loss", "log_of_zero")}, str(report)
    finding = report.findings[0]
    assert "StableSoftmaxCrossEntropy(from_logits=False)" in finding.fix
    assert "exact zero" in finding.detail
    assert finding.examples  # the rows whose probabilities underflowed
    assert "norm_at_zero" not in str(report)  # the loss takes no norm
    # The fix as written trains finite, eagerly and compiled.
    for jit in (False, True) if BACKEND != "torch" else (False,):
        model, x, y, _ = models.softmax_in_layer(stable=True)
        fixed = keras_stable.losses.StableSoftmaxCrossEntropy(from_logits=False)
        assert np.all(np.isfinite(_fit_losses(model, x, y, fixed, jit_compile=jit)))


def _logits_model():
    """`softmax_in_layer` without its softmax: the fix's model."""
    model, x, y, _ = models.softmax_in_layer(stable=True)
    return keras.Model(model.inputs[0], model.get_layer("logits").output), x, y


def test_a_softmax_feeding_a_log_loss_gets_the_logits_fix():
    # Step one: the hand-written softmax layer and the hand-written loss.
    model, x, y, _ = models.softmax_in_layer()
    report = audit(model, x, y, loss=handwritten_cross_entropy, modes=MODES)
    assert {(f.layer, f.trap) for f in report.findings} == {("trap", "unshifted_softmax")}
    fix = report.findings[0].fix
    assert "the loss on the logits" in fix and "from_logits=False" in fix, fix
    # Applied as written (the softmax dropped, the loss on the logits).
    model, x, y = _logits_model()
    fixed = keras_stable.losses.StableSoftmaxCrossEntropy()
    assert np.all(np.isfinite(_fit_losses(model, x, y, fixed)))
    # A softmax that feeds no log keeps the softmax fix.
    model, x, y, _ = models.softmax_in_layer()
    report = audit(model, x, y, loss="mse", modes=["eager"])
    assert [f.fix for f in report.findings] == ["keras_stable.ops.softmax / layers.StableSoftmax"]


class PaddedAttention(keras.layers.Layer):
    """Self-attention over padded sequences as users write it: a
    PyTorch-style `-inf` bias, a tutorial's `(1 - keep) * -1e9`, or the fix
    (`keras_stable.ops.dot_product_attention(mask=...)`)."""

    def __init__(self, style, **kwargs):
        super().__init__(**kwargs)
        self.style = style

    def call(self, x, keep):
        if self.style == "fixed":
            heads = x[:, :, None, :]
            mask = ops.greater(keep, 0)[:, None, None, :]
            return keras_stable.ops.dot_product_attention(heads, heads, heads, mask=mask)[:, :, 0]
        scores = ops.matmul(x, ops.transpose(x, (0, 2, 1)))
        k = keep[:, None, :]
        if self.style == "inf":
            scores = scores + ops.where(ops.greater(k, 0), 0.0, float("-inf"))
        else:
            scores = scores + (1.0 - k) * -1e9
        return ops.matmul(ops.softmax(scores, axis=-1), x)


def _attention_model(style, dtype=None):
    keras.utils.set_random_seed(0)
    tokens = keras.Input((5, 3), name="tokens")
    keep = keras.Input((5,), name="keep")
    h = keras.layers.Dense(4, name="embed", dtype=dtype)(tokens)
    h = PaddedAttention(style, name="attention", dtype=dtype)(h, keep)
    out = keras.layers.Dense(1, name="head", dtype=dtype)(keras.layers.Flatten()(h))
    model = keras.Model([tokens, keep], out)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 5, 3)).astype("float32")
    keep_values = np.ones((4, 5), "float32")
    keep_values[1] = 0.0  # an all-padding sequence: its queries see nothing
    keep_values[3, 3:] = 0.0
    return model, [x, keep_values], rng.normal(size=(4, 1)).astype("float32")


def _attention_findings(report):
    return {(f.layer, f.trap, f.fix, f.page) for f in report.findings}


FIXED = (
    "keras_stable.ops.dot_product_attention(mask=...) / layers.StableMultiHeadAttention",
    "attention",
)


def test_a_fully_masked_attention_row_names_the_attention_fix_and_page():
    model, x, y = _attention_model("inf")
    assert not np.all(np.isfinite(_fit_losses(model, x, y, "mse")))
    model, x, y = _attention_model("inf")
    report = audit(model, x, y, loss="mse", modes=MODES)
    assert _attention_findings(report) == {("attention", "fully_masked_row", *FIXED)}, str(report)
    assert report.findings[0].examples == (1,)
    assert '"Attention' in str(report) and "--explain attention" in str(report)
    model, x, y = _attention_model("fixed")
    assert np.all(np.isfinite(_fit_losses(model, x, y, "mse")))


# NumPy warns as it casts -1e9 to float16 (TF, JAX), as in the user's run.
@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
def test_a_mask_constant_that_overflows_float16_is_half_overflow_of_the_layer():
    model, x, y = _attention_model("-1e9")
    assert np.all(np.isfinite(_fit_losses(model, x, y, "mse")))  # float32: finite
    model, x, y = _attention_model("-1e9", dtype="mixed_float16")
    assert not np.all(np.isfinite(_fit_losses(model, x, y, "mse")))
    model, x, y = _attention_model("-1e9", dtype="mixed_float16")
    report = audit(model, x, y, loss="mse", modes=["eager"])
    assert _attention_findings(report) == {("attention", "half_overflow", *FIXED)}, str(report)
    assert "-1e9" in report.findings[0].detail and "65504" in report.findings[0].detail
    model, x, y = _attention_model("fixed", dtype="mixed_float16")
    assert np.all(np.isfinite(_fit_losses(model, x, y, "mse")))


class EntropyBonus(keras.layers.Layer):
    """An entropy over the allowed classes, as written by hand, or the fix."""

    def __init__(self, fixed=False, **kwargs):
        super().__init__(**kwargs)
        self.fixed = fixed

    def call(self, logits, allowed):
        if self.fixed:
            return keras_stable.ops.entropy(logits, mask=allowed)[:, None]
        masked = ops.where(allowed, logits, float("-inf"))
        p = ops.softmax(masked, axis=-1)
        return -ops.sum(p * ops.log_softmax(masked, axis=-1), axis=-1, keepdims=True)


def _entropy_model(fixed=False):
    keras.utils.set_random_seed(0)
    x, allowed = keras.Input((4,), name="x"), keras.Input((4,), dtype="bool", name="allowed")
    logits = keras.layers.Dense(4, name="policy")(x)
    model = keras.Model([x, allowed], EntropyBonus(fixed, name="entropy_bonus")(logits, allowed))
    xs = np.random.default_rng(0).normal(size=(3, 4)).astype("float32")
    mask = np.ones((3, 4), bool)
    mask[1, 2:] = False  # two masked actions
    return model, [xs, mask], np.full((3, 1), 0.5, "float32")


def test_an_entropy_with_masked_classes_names_ops_entropy():
    model, x, y = _entropy_model()
    assert not np.all(np.isfinite(_fit_losses(model, x, y, "mse")))
    model, x, y = _entropy_model()
    report = audit(model, x, y, loss="mse", modes=MODES)
    found = {(f.layer, f.trap, f.fix, f.page) for f in report.findings}
    fix = ("keras_stable.ops.entropy(logits, mask=...)", "entropy")
    assert found == {("entropy_bonus", "zero_times_inf", *fix)}, str(report)
    assert report.findings[0].examples == (1,)
    model, x, y = _entropy_model(fixed=True)
    assert np.all(np.isfinite(_fit_losses(model, x, y, "mse")))


def handwritten_mixture_nll(y_true, y_pred):
    """`-log(sum(pi * N(y)))` of a two-component 1-D mixture, laid out as
    `MixtureDensityNLL` reads it: `[logits | means | log-scales]`."""
    pi = ops.softmax(y_pred[:, :2], axis=-1)
    mean, sigma = y_pred[:, 2:4], ops.exp(y_pred[:, 4:6])
    density = ops.exp(-0.5 * ops.square((y_true - mean) / sigma)) / (sigma * np.sqrt(2 * np.pi))
    return -ops.log(ops.sum(pi * density, axis=-1))


def _mixture_model():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Dense(6, name="mdn")(inputs))
    x = np.random.default_rng(0).normal(size=(4, 3)).astype("float32")
    return model, x, np.array([[0.0], [40.0], [1.0], [80.0]], "float32")


def test_a_mixture_density_that_underflows_names_mixture_density_nll():
    model, x, y = _mixture_model()
    assert not np.all(np.isfinite(_fit_losses(model, x, y, handwritten_mixture_nll)))
    model, x, y = _mixture_model()
    report = audit(model, x, y, loss=handwritten_mixture_nll, modes=MODES)
    found = {(f.layer, f.trap, f.page) for f in report.findings}
    assert found == {("loss", "log_of_zero", "mixture-densities")}, str(report)
    assert "MixtureDensityNLL" in report.findings[0].fix
    assert report.findings[0].examples == (1, 3)
    model, x, y = _mixture_model()
    fixed = keras_stable.losses.MixtureDensityNLL(2)
    # Adam: targets 80 scales away give gradients of 6400 (exact ones).
    losses = _fit_losses(model, x, y, fixed, steps=5, optimizer=keras.optimizers.Adam(0.01))
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]


def _ctc_model():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((4, 3))
    model = keras.Model(inputs, keras.layers.Dense(5, name="frames")(inputs))
    x = np.random.default_rng(0).normal(size=(3, 4, 3)).astype("float32")
    # Row 1's label needs 5 frames of the 4 (2, 2 needs a blank between).
    y = np.array([[1, 2, 0, 0], [1, 2, 2, 3], [4, 0, 0, 0]], "int32")
    return model, x, y


def test_a_ctc_label_longer_than_its_frames_is_named_also_where_the_loss_is_finite():
    model, x, y = _ctc_model()
    losses = _fit_losses(model, x, y, keras.losses.CTC(), steps=1)
    # TF 709 and JAX 1e5 (finite, silently wrong); torch inf.
    assert (BACKEND == "torch") != bool(np.all(np.isfinite(losses)))
    model, x, y = _ctc_model()
    model.compile(loss=keras.losses.CTC())
    report = audit(model, x, y, modes=MODES)
    assert {(f.layer, f.trap) for f in report.findings} == {("loss", "ctc_infeasible")}, str(report)
    finding = report.findings[0]
    assert finding.examples == (1,) and "row 1: 5 > 4" in finding.detail
    assert "StableCTC" in finding.fix
    model, x, y = _ctc_model()
    assert np.all(np.isfinite(_fit_losses(model, x, y, keras_stable.losses.StableCTC(), steps=2)))


class _CTCLayer(keras.layers.Layer):
    """The keras-io captcha OCR tutorial's endpoint layer: the CTC loss of
    the labels (a model input) is computed in `call` and added with
    `add_loss`. `form` is how: `keras.ops.ctc_loss`, `keras.losses.CTC`,
    the tutorial's `tf.compat.v1.nn.ctc_loss` (TF), or the fix,
    `keras_stable.ops.ctc_loss`."""

    def __init__(self, form, **kwargs):
        super().__init__(**kwargs)
        self.form = form

    def call(self, y_true, y_pred):
        batch = ops.shape(y_pred)[0]
        frames = ops.shape(y_pred)[1] * ops.ones((batch,), "int32")
        lengths = ops.sum(ops.cast(ops.not_equal(y_true, 0), "int32"), axis=-1)
        if self.form == "keras.ops":
            loss = keras.ops.ctc_loss(y_true, y_pred, lengths, frames)
        elif self.form == "keras.losses":
            loss = keras.losses.CTC(reduction="none")(y_true, y_pred)
        elif self.form == "keras_stable":
            loss = keras_stable.ops.ctc_loss(y_true, y_pred, lengths, frames)
        else:  # the tutorial's ctc_batch_cost, TensorFlow only
            import tensorflow as tf

            sparse = tf.sparse.from_dense(y_true)
            log_probs = ops.log(ops.transpose(ops.softmax(y_pred), (1, 0, 2)) + 1e-7)
            loss = tf.compat.v1.nn.ctc_loss(
                labels=tf.cast(sparse, "int32"), inputs=log_probs, sequence_length=frames
            )
        self.add_loss(ops.mean(loss))
        return y_pred


def _captcha_model(form):
    keras.utils.set_random_seed(0)
    images, labels = keras.Input((4, 3)), keras.Input((4,), dtype="int32")
    frames = keras.layers.Dense(5, name="frames")(images)
    outputs = _CTCLayer(form, name="ctc_loss")(labels, frames)
    model = keras.Model([images, labels], outputs)
    # Eager: the loss in a layer is the point, not XLA (minutes of compile).
    model.compile(optimizer=keras.optimizers.SGD(0.1), jit_compile=False)
    _, x, y = _ctc_model()
    return model, [x, y]


_FORMS = ["keras.ops", "keras.losses"] + (["tf.compat.v1"] if BACKEND == "tensorflow" else [])


@pytest.mark.parametrize("form", _FORMS)
def test_a_ctc_loss_added_in_a_layer_names_its_infeasible_labels(form):
    model, x = _captcha_model(form)
    history = model.fit(x, epochs=1, batch_size=3, verbose=0)
    # Row 1's label does not fit: inf on torch (and in the tutorial's TF
    # op), a large finite loss elsewhere.
    assert history.history["loss"][0] > 10 or not np.isfinite(history.history["loss"][0])
    model, x = _captcha_model(form)
    # The labels are read in the eager run before the modes: one is enough.
    report = audit(model, x, modes=["eager"])
    assert {(f.layer, f.trap) for f in report.findings} == {("ctc_loss", "ctc_infeasible")}, str(
        report
    )
    (finding,) = report.findings
    assert finding.examples == (1,) and "row 1: 5 > 4" in finding.detail
    assert "keras_stable.ops.ctc_loss" in finding.fix
    # The fix as written: keras_stable.ops.ctc_loss in the layer.
    model, x = _captcha_model("keras_stable")
    history = model.fit(x, epochs=2, batch_size=3, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    # Still named: the label stays wrong, its sample is 0 now.
    report = audit(model, x, modes=["eager"])
    assert [(f.layer, f.trap, f.examples) for f in report.findings] == [
        ("ctc_loss", "ctc_infeasible", (1,))
    ], str(report)


def test_a_feasible_ctc_loss_in_a_layer_is_clean():
    model, (x, y) = _captcha_model("keras.ops")
    y = y.copy()
    y[1] = [1, 2, 3, 0]
    assert audit(model, [x, y], modes=["eager"]).ok


def test_a_linear_softmax_head_is_audited_at_the_scale_fit_trains_it():
    # The head adds the mean of its per-token losses with `add_loss`; the
    # audit differentiated the sum of its outputs (the per-token losses),
    # a gradient `tokens` times too large, which the float16 pre-flight
    # read as overflows.
    keras.utils.set_random_seed(0)
    tokens, labels = keras.Input((20,), dtype="int32"), keras.Input((20,), dtype="int32")
    embed = keras.layers.Embedding(50, 8, name="embed")
    head = keras_stable.layers.LinearSoftmaxHead(50, tied_embedding=embed, name="head")
    model = keras.Model([tokens, labels], head(embed(tokens), labels))
    model.compile(optimizer="sgd")
    rng = np.random.default_rng(0)
    x = [rng.integers(1, 50, (8, 20)).astype("int32"), rng.integers(0, 50, (8, 20)).astype("int32")]
    per_token = keras.ops.convert_to_numpy(model(x))
    assert abs(models.audited_loss(model, x, None) - float(np.mean(per_token))) < 1e-5
    report = audit(model, x, modes=["eager"], precision="mixed_float16")
    assert not [f for f in report.findings if f.trap.startswith("half")], str(report)
