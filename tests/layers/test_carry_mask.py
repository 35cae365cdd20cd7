"""`CarryMask` beyond the harness (tests/specs/blocks.py): the padded steps of
an `Embedding(mask_zero=True) -> LSTM -> Dense` tagger stay out of the loss on
Keras 3.15.1 and 3.16 alike (3.16's RNN drops the mask, keras-team/keras#23235),
the same number as the float64 loss over the real steps and as the
`sample_weight` route; saving; bad input."""

import keras
import numpy as np
import pytest

from keras_stable import losses
from keras_stable.layers import CarryMask
from tests.backend_utils import KERAS_3_16
from tests.backend_utils import assert_close
from tests.backend_utils import to_numpy
from tests.harness.common import save_and_reload

VOCAB, DIM, CLASSES = 12, 6, 4
TOKENS = np.array([[1, 2, 3, 0, 0], [4, 5, 6, 7, 0], [8, 9, 0, 0, 0]], "int32")
TAGS = np.array([[1, 2, 3, 0, 0], [0, 1, 2, 3, 0], [3, 2, 0, 0, 0]], "int32")


def _tagger(carry=True, rnn=keras.layers.LSTM):
    keras.utils.set_random_seed(0)
    tokens = keras.Input((None,), dtype="int32")
    embedded = keras.layers.Embedding(VOCAB, DIM, mask_zero=True, name="embed")(tokens)
    hidden = rnn(DIM, return_sequences=True, name="rnn")(embedded)
    if carry:
        hidden = CarryMask(name="carry")([hidden, embedded])
    return keras.Model(tokens, keras.layers.Dense(CLASSES, name="tags")(hidden))


def _float64_loss_over_real_steps(logits):
    logits = np.asarray(logits, "float64")
    top = logits.max(-1, keepdims=True)
    log_p = logits - top - np.log(np.sum(np.exp(logits - top), -1, keepdims=True))
    picked = -np.take_along_axis(log_p, TAGS[..., None], -1)[..., 0]
    return picked[TOKENS != 0].mean()


def test_the_mask_survives_the_rnn_on_this_keras():
    model = _tagger()
    out = model(TOKENS)
    np.testing.assert_array_equal(to_numpy(out._keras_mask), TOKENS != 0)
    # Without it, Keras 3.16's output has no mask (3.15.1's has).
    bare = _tagger(carry=False)(TOKENS)
    assert (getattr(bare, "_keras_mask", None) is None) == KERAS_3_16


@pytest.mark.parametrize(
    "loss",
    [
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        losses.StableSparseSoftmaxCrossEntropy(from_logits=True),
    ],
    ids=["keras", "keras_stable"],
)
def test_the_loss_counts_only_the_real_steps(loss):
    model = _tagger()
    out = model(TOKENS)
    expected = _float64_loss_over_real_steps(to_numpy(out))
    assert_close(to_numpy(loss(TAGS, out)), expected)
    # `evaluate` (the compiled loss) agrees.
    model.compile(loss=loss, jit_compile=keras.backend.backend() != "torch")
    assert_close(model.evaluate(TOKENS, TAGS, verbose=0), expected)


def test_same_number_as_the_sample_weight_route():
    """The route without the layer: `sample_weight` from the padding and the
    `mean_with_sample_weight` reduction (docs/keras-versions.md)."""
    carried = _tagger()
    carried.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    weighted = _tagger(carry=False)
    weighted.set_weights(carried.get_weights())
    weighted.compile(
        loss=keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="mean_with_sample_weight"
        )
    )
    sample_weight = (TOKENS != 0).astype("float32")
    assert_close(
        weighted.evaluate(TOKENS, TAGS, sample_weight=sample_weight, verbose=0),
        carried.evaluate(TOKENS, TAGS, verbose=0),
    )


@pytest.mark.parametrize("rnn", [keras.layers.GRU, keras.layers.SimpleRNN])
def test_fit_and_the_keras_file(rnn, tmp_path):
    model = _tagger(rnn=rnn)
    model.compile(optimizer="sgd", loss=losses.StableSparseSoftmaxCrossEntropy(from_logits=True))
    model.fit(TOKENS, TAGS, epochs=2, verbose=0)
    before = to_numpy(model(TOKENS))
    loaded = save_and_reload(model, tmp_path)
    out = loaded(TOKENS)
    np.testing.assert_array_equal(to_numpy(out), before)
    np.testing.assert_array_equal(to_numpy(out._keras_mask), TOKENS != 0)


def test_no_mask_to_carry_keeps_its_own():
    x = np.ones((2, 3, 4), "float32")
    out = CarryMask()([x, x])
    assert getattr(out, "_keras_mask", None) is None
    np.testing.assert_array_equal(to_numpy(out), x)


def test_bad_input_names_the_argument_and_the_shapes():
    with pytest.raises(ValueError, match=r"`inputs` of CarryMask must be a list"):
        CarryMask()(np.ones((2, 3), "float32"))
    tokens = keras.Input((5,), dtype="int32")
    embedded = keras.layers.Embedding(VOCAB, DIM, mask_zero=True)(tokens)
    last = keras.layers.LSTM(DIM)(embedded)  # return_sequences=False
    with pytest.raises(
        ValueError, match=r"mask of `inputs\[1\]` has shape \(None, 5\).*\(None, 6\)"
    ):
        CarryMask()([last, embedded])
