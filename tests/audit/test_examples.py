"""The audit names the right trap and the guilty rows of the batch."""

import pytest

from keras_stable.audit import audit
from tests.audit import models


def _findings(builder, **kwargs):
    model, x, y, loss = builder()
    report = audit(model, x, y, loss=loss, modes=["eager"], **kwargs)
    return [(f.layer, f.stage, f.trap, f.examples) for f in report.findings]


def test_left_padding_under_a_causal_mask_is_a_fully_masked_row():
    assert _findings(models.left_padded_causal_attention) == [
        ("attention", "forward", "fully_masked_row", models.GUILTY)
    ]


def test_masked_attention_row_names_its_example():
    model, x, y, loss = models.masked_attention()
    report = audit(model, x, y, loss=loss, modes=["eager"])
    assert [(f.layer, f.trap, f.examples) for f in report.findings] == [
        ("trap", "fully_masked_row", (1,))
    ]


@pytest.mark.parametrize(
    "builder,stage,trap",
    [
        (models.row_norm, "gradient", "norm_at_zero"),
        (models.row_overflow, "forward", "exp_overflow"),
    ],
    ids=["gradient", "forward"],
)
def test_exactly_the_guilty_rows(builder, stage, trap):
    model, x, y, loss = builder()
    report = audit(model, x, y, loss=loss, modes=["eager"])
    found = [(f.layer, f.stage, f.trap, f.examples) for f in report.findings]
    if builder is models.row_norm and not report.findings:
        pytest.skip("this backend's sqrt gradient at 0 is finite eagerly")
    assert found == [("trap", stage, trap, models.GUILTY)]
    assert "examples (rows of the batch): 1, 3" in str(report)
    assert report.as_dict()["findings"][0]["examples"] == [1, 3]


def test_a_trap_coupled_across_the_batch_has_no_guilty_row():
    found = _findings(models.batch_coupled_overflow)
    assert [(layer, stage, examples) for layer, stage, _, examples in found] == [
        ("trap", "forward", ())
    ]


def test_clean_models_stay_clean():
    for builder in models.CLEAN_MODELS.values():
        model, x, y, loss = builder()
        assert audit(model, x, y, loss=loss, modes=["eager"]).ok
