"""The audit's warning for padded steps that reach the loss unmasked: a
padded batch (`Embedding(mask_zero=True)`) while `y_pred` has no mask, as
after Keras 3.16's RNN layers (keras-team/keras#23235; emulated on 3.15.1 by
setting `supports_masking=False` on the LSTM, which is all 3.16 changes)."""

import keras
import numpy as np

from keras_stable.audit import audit
from keras_stable.layers import CarryMask

TOKENS = np.array([[1, 2, 3, 0, 0], [4, 5, 6, 7, 0], [8, 9, 0, 0, 0]], "int32")
TAGS = np.array([[1, 2, 3, 0, 0], [0, 1, 2, 3, 0], [3, 2, 0, 0, 0]], "int32")
LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _tagger(carry=False, return_sequences=True):
    tokens = keras.Input((None,), dtype="int32")
    embedded = keras.layers.Embedding(12, 6, mask_zero=True, name="embed")(tokens)
    lstm = keras.layers.LSTM(6, return_sequences=return_sequences, name="lstm")
    lstm.supports_masking = False  # Keras 3.16's LSTM
    hidden = lstm(embedded)
    if carry:
        hidden = CarryMask()([hidden, embedded])
    return keras.Model(tokens, keras.layers.Dense(4, name="tags")(hidden))


def test_padded_steps_reaching_the_loss_are_a_warning():
    report = audit(_tagger(), TOKENS, TAGS, loss=LOSS)
    assert report.ok  # no NaN: the loss is finite, and wrong
    (warning,) = report.warnings
    assert warning.startswith("6 of the 15 steps of this batch are padding")
    assert "layer 'embed'" in warning and "layer 'lstm' drops it" in warning
    assert "CarryMask" in warning and "sample_weight" in warning
    assert f"warning: {warning}" in str(report)
    assert report.as_dict()["warnings"] == [warning]


def test_no_warning_when_the_mask_is_carried_or_nothing_is_padded():
    assert audit(_tagger(carry=True), TOKENS, TAGS, loss=LOSS).warnings == []
    unpadded = TOKENS + 1
    assert audit(_tagger(), unpadded, TAGS, loss=LOSS).warnings == []


def test_no_warning_without_time_steps_in_the_output():
    """A sequence classifier: the LSTM's last state, one label per sequence."""
    model = _tagger(return_sequences=False)
    report = audit(model, TOKENS, np.array([1, 0, 3]), loss=LOSS)
    assert report.warnings == []
