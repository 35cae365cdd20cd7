"""`keras_stable.losses.StableCTC`: Keras's CTC where Keras is right, the
Keras mask of `y_pred` as the input lengths, infeasible samples as 0. (Its
spec for the harness is in tests/specs/losses.py.)"""

import warnings

import keras
import numpy as np
import pytest

import keras_stable
from tests import reference_sequences as ref
from tests.backend_utils import BACKEND
from tests.backend_utils import assert_close
from tests.backend_utils import only_jax
from tests.backend_utils import only_tensorflow
from tests.backend_utils import to_numpy
from tests.backend_utils import vjp_all_modes

TIME, CLASSES = 6, 4


def _reference(y_true, logits, frames=None, zero_infinity=True):
    y_true = np.asarray(y_true)
    lengths = np.sum(y_true != 0, axis=1)
    frames = np.full(len(y_true), logits.shape[1]) if frames is None else frames
    return ref.ctc_loss(y_true, logits, lengths, frames, 0, zero_infinity)


def _batch(seed=0):
    rng = np.random.default_rng(seed)
    logits = (2.0 * rng.normal(size=(5, TIME, CLASSES))).astype("float32")
    y_true = np.array([[1, 2, 0], [2, 2, 2], [0, 0, 0], [3, 1, 3], [1, 1, 0]], "int32")
    return y_true, logits


def test_values_gradients_and_reductions():
    y_true, logits = _batch()
    weights = np.array([1.0, 0.5, 2.0, 0.0, 3.0], "float32")
    expected, expected_grad = _reference(y_true, logits)
    for reduction, total in [
        ("none", expected),
        ("sum", np.sum(expected)),
        ("sum_over_batch_size", np.mean(expected)),
    ]:
        loss = keras_stable.losses.StableCTC(reduction=reduction)
        out, (grad,) = vjp_all_modes(lambda yp, loss=loss: loss(y_true, yp), [logits])
        assert_close(out, total, "float32", reduction)
        if reduction == "sum":
            assert_close(grad, expected_grad, "float32", "gradient")
    weighted = keras_stable.losses.StableCTC()(y_true, logits, sample_weight=weights)
    assert_close(to_numpy(weighted), np.sum(weights * expected) / 5, "float32")


def test_infeasible_sample_counts_as_zero_in_the_batch_mean():
    y_true, logits = _batch(1)
    short = logits[:, :3]  # [2, 2, 2] needs 5 frames; [3, 1, 3], [1, 1] fit in 3
    expected, _ = _reference(y_true, short)
    feasible = ref.ctc_feasible(y_true, np.sum(y_true != 0, axis=1), [3] * 5)
    assert feasible.tolist() == [True, False, True, True, True]
    out, (grad,) = vjp_all_modes(lambda yp: keras_stable.losses.StableCTC()(y_true, yp), [short])
    assert_close(out, np.sum(expected) / 5, "float32")
    assert np.all(grad[~feasible] == 0.0)
    assert np.all(np.isfinite(grad))
    inf_loss = keras_stable.losses.StableCTC(zero_infinity=False, reduction="none")
    values = to_numpy(inf_loss(y_true, short))
    assert np.all(np.isinf(values[~feasible])) and np.all(np.isfinite(values[feasible]))


def test_keras_parity_on_feasible_labels():
    y_true, logits = _batch(2)
    keep = ref.ctc_feasible(y_true, np.sum(y_true != 0, axis=1), [TIME] * 5)
    ours = keras_stable.losses.StableCTC(reduction="none")(y_true[keep], logits[keep])
    theirs = keras.losses.CTC(reduction="none")(y_true[keep], logits[keep])
    assert_close(to_numpy(ours), to_numpy(theirs), "float32", tol=(1e-5, 1e-5))


def _sequence_model():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((TIME, 2))
    hidden = keras.layers.Masking(0.0)(inputs)
    return keras.Model(inputs, keras.layers.Dense(CLASSES)(hidden))


def test_keras_mask_gives_the_input_lengths():
    y_true, _ = _batch(3)
    rng = np.random.default_rng(3)
    x = rng.normal(size=(5, TIME, 2)).astype("float32")
    frames = np.array([6, 4, 0, 5, 3])
    x[np.arange(TIME)[None, :] >= frames[:, None]] = 0.0  # padded frames
    x[0, 2] = 0.0  # a masked frame inside the sequence is skipped too
    model = _sequence_model()
    loss = keras_stable.losses.StableCTC(reduction="none")
    values = to_numpy(loss(y_true, model(x)))
    logits = to_numpy(model(x))
    kept = [np.delete(logits[0], 2, axis=0)] + [logits[b] for b in range(1, 5)]
    expected = [
        _reference(y_true[b : b + 1], kept[b][None], [len(kept[b]) if b == 0 else frames[b]])[0][0]
        for b in range(5)
    ]
    assert_close(values, expected, "float32")
    assert values[2] == 0.0  # an empty label over no frames


def test_fit_with_masked_frames_and_infeasible_labels():
    y_true, _ = _batch(4)
    rng = np.random.default_rng(4)
    x = rng.normal(size=(5, TIME, 2)).astype("float32")
    x[:, 3:] = 0.0  # 3 frames: [2, 2, 2] cannot fit
    model = _sequence_model()
    model.compile(
        optimizer=keras.optimizers.SGD(0.1),
        loss=keras_stable.losses.StableCTC(),
        jit_compile=BACKEND in ("tensorflow", "jax"),
    )
    history = model.fit(x, y_true, batch_size=5, epochs=3, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    assert history.history["loss"][-1] < history.history["loss"][0]


@pytest.mark.parametrize(
    "y_true, y_pred, message",
    [
        (np.zeros((2, 3, 1)), np.zeros((2, 4, 3)), "`y_true` must have shape"),
        (np.zeros((2, 3)), np.zeros((2, 4)), "`y_pred` must have shape"),
        (np.zeros((3, 3)), np.zeros((2, 4, 3)), "same batch size"),
    ],
)
def test_bad_input(y_true, y_pred, message):
    with pytest.raises(ValueError, match=message):
        keras_stable.losses.StableCTC()(y_true.astype("int32"), y_pred.astype("float32"))
    with pytest.raises(ValueError, match="`zero_infinity` must be a bool"):
        keras_stable.losses.StableCTC(zero_infinity="yes")


def _softmax_warnings(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn()
    return [w for w in caught if "softmax" in str(w.message)], result


def test_a_softmax_output_warns_once_per_instance():
    # Issue 38: both Keras CTC tutorials end the model with a softmax; the
    # loss reads logits (as keras.losses.CTC does) and was silently off.
    y_true, logits = _batch(5)
    probs = keras.activations.softmax(keras.ops.convert_to_tensor(logits))
    loss = keras_stable.losses.StableCTC()
    caught, value = _softmax_warnings(lambda: loss(y_true, probs))
    assert len(caught) == 1 and "StableCTC" in str(caught[0].message)
    assert _softmax_warnings(lambda: loss(y_true, probs))[0] == []
    # The numbers are unchanged: those of the same values read as logits.
    plain = keras.ops.convert_to_tensor(to_numpy(probs).astype("float32"))
    assert_close(to_numpy(value), to_numpy(loss(y_true, plain)), "float32")
    assert len(_softmax_warnings(lambda: keras_stable.losses.StableCTC()(y_true, probs))[0]) == 1
    fresh = keras_stable.losses.StableCTC()
    assert _softmax_warnings(lambda: fresh(y_true, logits))[0] == []


def test_a_softmax_model_warns_and_a_logits_model_does_not():
    y_true, _ = _batch(6)
    x = np.random.default_rng(6).normal(size=(5, TIME, 2)).astype("float32")
    for activation, expected in (("softmax", 1), (None, 0)):
        inputs = keras.Input((TIME, 2))
        model = keras.Model(inputs, keras.layers.Dense(CLASSES, activation=activation)(inputs))
        loss = keras_stable.losses.StableCTC()
        caught, _ = _softmax_warnings(lambda: loss(y_true, model(x)))  # noqa: B023
        assert len(caught) == expected, activation


@only_tensorflow
def test_a_softmax_warns_in_a_tensorflow_graph():
    """In a `tf.function` (TF's `fit`) the mark is the `Softmax` op."""
    import tensorflow as tf

    y_true, logits = _batch(7)
    loss = keras_stable.losses.StableCTC()
    value = tf.function(lambda x: loss(y_true, keras.activations.softmax(x)))
    caught, _ = _softmax_warnings(lambda: value(tf.constant(logits)))
    assert len(caught) == 1


@pytest.mark.parametrize("known", [True, False])
def test_symbolic_call(known):
    batch, label, time = (5, 3, TIME) if known else (None, None, None)
    y_true = keras.KerasTensor((batch, label), dtype="int32")
    y_pred = keras.KerasTensor((batch, time, CLASSES), dtype="float32")
    values = keras_stable.losses.StableCTC(reduction="none")(y_true, y_pred)
    assert tuple(values.shape) == (batch,) and values.dtype == "float32"
    assert tuple(keras_stable.losses.StableCTC()(y_true, y_pred).shape) == ()


@only_tensorflow
@pytest.mark.parametrize("jit_compile", [False, True])
def test_fit_on_a_padded_batch_pipeline(jit_compile):
    """Issue 38: the ASR tutorial's `padded_batch` labels and
    `Input(shape=(None, features))` frames: label and time lengths are
    unknown until run time."""
    import tensorflow as tf

    rng = np.random.default_rng(8)
    xs = [rng.normal(size=(n, 3)).astype("float32") for n in (7, 9, 8, 10, 6, 9)]
    ys = [rng.integers(1, CLASSES, size=(m,)).astype("int32") for m in (2, 3, 1, 3, 2, 3)]
    data = tf.data.Dataset.from_tensor_slices(
        (tf.ragged.constant(xs, ragged_rank=1), tf.ragged.constant(ys))
    )
    data = data.map(lambda x, y: (x, y)).padded_batch(3).repeat()
    keras.utils.set_random_seed(8)
    inputs = keras.Input((None, 3))
    model = keras.Model(inputs, keras.layers.Dense(CLASSES)(inputs))
    model.compile(
        optimizer=keras.optimizers.SGD(0.1),
        loss=keras_stable.losses.StableCTC(),
        jit_compile=jit_compile,
    )
    history = model.fit(data, steps_per_epoch=2, epochs=3, verbose=0, shuffle=False)
    assert np.all(np.isfinite(history.history["loss"]))
    assert history.history["loss"][-1] < history.history["loss"][0]
    # The same losses as for the static shapes of each batch.
    x, y = next(iter(data))
    expected = keras_stable.losses.StableCTC()(y.numpy(), model(x.numpy()))
    assert_close(to_numpy(model.compute_loss(x, y, model(x))), to_numpy(expected), "float32")


@only_jax
def test_jax_rank_promotion_raise_and_debug_infs_are_silent():
    """Issue 38: StableCTC relied on implicit rank promotion (the
    posteriors of the kernel), eager and jitted."""
    import jax

    y_true, logits = _batch(9)
    expected, expected_grad = _reference(y_true, logits)
    flags = {"jax_numpy_rank_promotion": "raise", "jax_debug_infs": True, "jax_debug_nans": True}
    old = {k: getattr(jax.config, k) for k in flags}
    try:
        for k, v in flags.items():
            jax.config.update(k, v)
        for zero_infinity in (True, False):
            loss = keras_stable.losses.StableCTC(zero_infinity=zero_infinity, reduction="sum")
            out, (grad,) = vjp_all_modes(lambda yp, loss=loss: loss(y_true, yp), [logits])
            assert_close(out, np.sum(expected), "float32", "value")
            assert_close(grad, expected_grad, "float32", "gradient")
    finally:
        for k, v in old.items():
            jax.config.update(k, v)
