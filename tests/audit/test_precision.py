"""`audit(..., precision=)`: the half-precision pre-flight from one float32 run."""

import numpy as np
import pytest

from keras_stable.audit import audit
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
    # No forward finding: every activation fits float16. Gradient findings
    # are what dynamic loss scaling meets on its first steps on these tiny
    # batches (the mean over 2-4 examples: gradients of order 1, times
    # 2**15 past 65504); they name only gradient stages.
    assert [f for f in report.findings if f.stage == "forward"] == [], str(report)
    assert all(f.trap == "half_overflow" for f in report.findings)
    assert report.headroom and all(0 <= v < 1 for v in report.headroom.values())


def test_unknown_precision():
    model, x, y, loss = models.reaches_1e5()
    with pytest.raises(ValueError, match="precision"):
        audit(model, x, precision="float16")
