"""The audit on the NaNs users hit, end to end: the model as a user writes
it, trained until it goes NaN, then the audit, then its fix applied as
written, trained finite again."""

import keras
import numpy as np
from keras import ops

import keras_stable
from keras_stable.audit import audit
from tests.audit import models

BACKEND = keras.backend.backend()
MODES = ["eager", "compiled"] if BACKEND in ("tensorflow", "jax") else ["eager"]


def handwritten_cross_entropy(y_true, p):
    """The StackOverflow loss: `-mean(sum(y * log(p)))` on probabilities."""
    return -ops.mean(ops.sum(y_true * ops.log(p), axis=-1))


def _fit_losses(model, x, y, loss, steps=3, jit_compile=False):
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss, jit_compile=jit_compile)
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
