"""`label_out_of_range`: labels the loss cannot take, indices an Embedding
cannot look up, with the rows that hold them."""

import keras

from keras_stable.audit import audit
from tests.audit import models


def _labels(report):
    return [
        (f.layer, f.stage, f.examples) for f in report.findings if f.trap == "label_out_of_range"
    ]


def test_labels_3_and_minus_1_for_3_classes():
    model, x, y, _ = models.classifier_with_labels()
    report = audit(model, x, y, modes=["eager"])
    assert _labels(report) == [("loss", "forward", models.GUILTY)]
    assert not report.ok
    finding = [f for f in report.findings if f.trap == "label_out_of_range"][0]
    assert "values [-1, 3]" in finding.detail


def test_ignore_class_is_not_out_of_range():
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=-1)
    model, x, y, _ = models.classifier_with_labels(compile_loss=loss)
    assert _labels(audit(model, x, y, modes=["eager"])) == [("loss", "forward", (1,))]


def test_labels_in_range_are_clean():
    model, x, y, _ = models.classifier_with_labels(labels=(0, 2, 1, 0, 2))
    assert audit(model, x, y, modes=["eager"]).ok


def test_embedding_indices_outside_input_dim():
    model, x, y, loss = models.embedding_with_indices()
    report = audit(model, x, y, loss=loss, modes=["eager"])
    assert _labels(report) == [("embed", "forward", models.GUILTY)]
