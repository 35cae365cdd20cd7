"""`metrics.CTCInfeasibleLabels`: how `StableCTC` tells the user about the
labels no alignment fits (it scores them 0, so training goes on silently).
The count against a plain-Python reference, the Keras mask's frames, the
sample weights, the counts in `fit`'s logs per epoch (compiled), and the
loss unchanged. (Its spec for the harness is in tests/specs/losses.py.)"""

import keras
import numpy as np
import pytest

from keras_stable import losses
from keras_stable import metrics
from tests.backend_utils import to_numpy

TIME, CLASSES = 6, 4


def _needed_frames(label):
    """Frames a CTC label needs: its classes plus a blank between equal
    neighbours (plain Python)."""
    kept = [int(c) for c in label if c != 0]
    return len(kept) + sum(a == b for a, b in zip(kept, kept[1:]))


def _reference(labels, frames):
    return sum(_needed_frames(row) > n for row, n in zip(labels, frames))


def _count(labels, logits, sample_weight=None):
    m = metrics.CTCInfeasibleLabels()
    m.update_state(labels, logits, sample_weight=sample_weight)
    return float(to_numpy(m.result()))


def test_counts_the_labels_longer_than_their_frames():
    rng = np.random.default_rng(0)
    # Classes 1 and 2 (many equal neighbours), padded with 0 at the end.
    labels = rng.integers(1, 3, size=(64, 5)).astype("int32")
    labels[np.arange(5)[None, :] >= rng.integers(0, 6, size=(64, 1))] = 0
    labels[:4] = [[1, 1, 1, 0, 0], [1, 2, 1, 2, 0], [2, 2, 2, 2, 0], [0, 0, 0, 0, 0]]
    logits = rng.normal(size=(64, TIME, CLASSES)).astype("float32")
    expected = _reference(labels, [TIME] * 64)
    assert 0 < expected < 64
    assert _count(labels, logits) == expected
    # The samples it counts are those StableCTC scores 0 (and Keras's
    # CTC does not: about 709 on TF, 1e5 on JAX, inf on torch).
    per_sample = to_numpy(losses.StableCTC(reduction="none")(labels, logits))
    needed = np.array([_needed_frames(row) for row in labels])
    np.testing.assert_array_equal(per_sample[needed > TIME], 0.0)
    assert np.all(per_sample[(needed <= TIME) & (needed > 0)] > 0)


def test_a_repeated_class_needs_a_blank_frame_between():
    # [1, 1] needs 3 frames (a blank between the two), [1, 2] needs 2.
    logits = np.zeros((2, 2, CLASSES), "float32")
    labels = np.array([[1, 1, 0], [1, 2, 0]], "int32")
    assert _count(labels, logits) == 1


def test_the_keras_mask_gives_the_frames():
    # Frames masked by a Masking layer are not input, as for StableCTC.
    frames = np.array([6, 3, 2, 5])
    x = np.ones((4, TIME, CLASSES), "float32")
    for row, n in zip(x, frames):
        row[n:] = 0.0
    labels = np.array([[1, 2, 3], [1, 1, 0], [1, 2, 3], [2, 2, 2]], "int32")
    inputs = keras.Input((TIME, CLASSES))
    model = keras.Model(inputs, keras.layers.Masking()(inputs))
    model.compile(loss=losses.StableCTC(), metrics=[metrics.CTCInfeasibleLabels()])
    logs = model.evaluate(x, labels, verbose=0, return_dict=True)
    # Row 1: 3 frames for [1, 1] (needs 3); row 2: 2 frames for 3 labels;
    # row 3: 5 frames for [2, 2, 2] (needs 5).
    assert _reference(labels, frames) == 1
    assert logs["ctc_infeasible_labels"] == 1


def test_a_sample_of_weight_zero_is_not_counted():
    logits = np.zeros((3, 2, CLASSES), "float32")
    labels = np.array([[1, 2, 3], [1, 1, 0], [1, 0, 0]], "int32")
    assert _count(labels, logits) == 2
    assert _count(labels, logits, np.array([1.0, 0.0, 1.0], "float32")) == 1
    assert _count(labels, logits, np.array([[0.5], [2.0], [1.0]], "float32")) == 2


def test_accumulates_until_reset():
    m = metrics.CTCInfeasibleLabels()
    logits = np.zeros((2, 2, CLASSES), "float32")
    m.update_state(np.array([[1, 2, 3], [1, 0, 0]], "int32"), logits)
    m.update_state(np.array([[1, 1, 0], [3, 3, 3]], "int32"), logits)
    assert float(to_numpy(m.result())) == 3
    m.reset_state()
    assert float(to_numpy(m.result())) == 0


def _ctc_model():
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(TIME * CLASSES)(inputs)
    return keras.Model(inputs, keras.layers.Reshape((TIME, CLASSES))(hidden))


def test_fit_logs_the_count_each_epoch_and_the_loss_is_unchanged():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(32, 4)).astype("float32")
    labels = np.zeros((32, 5), "int32")
    labels[:, :3] = rng.integers(1, CLASSES, size=(32, 3))  # at most 5 frames
    labels[::4, :3] = 1  # [1, 1, 1]: 5 frames, feasible in 6
    labels[2::8, :4] = 3  # [3, 3, 3, 3]: 7 frames, 4 such rows
    expected = _reference(labels, [TIME] * 32)
    assert expected == 4

    keras.utils.set_random_seed(0)
    plain = _ctc_model()
    counted = _ctc_model()
    counted.set_weights(plain.get_weights())
    plain.compile(optimizer=keras.optimizers.SGD(0.1), loss=losses.StableCTC())
    counted.compile(
        optimizer=keras.optimizers.SGD(0.1),
        loss=losses.StableCTC(),
        metrics=[metrics.CTCInfeasibleLabels()],
        jit_compile="auto",
    )
    a = plain.fit(x, labels, batch_size=8, epochs=2, shuffle=False, verbose=0)
    b = counted.fit(x, labels, batch_size=8, epochs=2, shuffle=False, verbose=0)
    assert b.history["ctc_infeasible_labels"] == [expected, expected]
    np.testing.assert_allclose(b.history["loss"], a.history["loss"], rtol=1e-6)
    for w_a, w_b in zip(plain.get_weights(), counted.get_weights()):
        np.testing.assert_array_equal(w_a, w_b)


@pytest.mark.parametrize(
    "labels, logits, weights, message",
    [
        (np.ones((2, 3, 1), "int32"), np.zeros((2, 6, 4)), None, r"y_true.shape=\(2, 3, 1\)"),
        (np.ones((2, 3), "int32"), np.zeros((2, 6)), None, r"y_pred.shape=\(2, 6\)"),
        (np.ones((2, 3), "int32"), np.zeros((3, 6, 4)), None, r"y_true.shape=\(2, 3\)"),
        (np.ones((2, 3), "int32"), np.zeros((2, 6, 4)), np.ones(3), r"sample_weight"),
    ],
    ids=["labels_rank", "logits_rank", "batch", "sample_weight"],
)
def test_bad_input_names_the_argument_and_the_shapes(labels, logits, weights, message):
    with pytest.raises(ValueError, match=message):
        _count(labels, logits.astype("float32"), weights)


def test_config_round_trip():
    m = metrics.CTCInfeasibleLabels(name="bad_labels")
    copy = metrics.CTCInfeasibleLabels.from_config(m.get_config())
    assert copy.name == "bad_labels"
    restored = keras.metrics.deserialize(keras.metrics.serialize(m))
    assert type(restored) is metrics.CTCInfeasibleLabels
