"""`StableMultiHeadAttention` and `StableGroupedQueryAttention` against
`keras.layers.MultiHeadAttention` and `GroupQueryAttention`.

With the same weights (`set_weights(keras_layer.get_weights())`), the same
outputs and gradients (inputs and every weight) wherever a query row has a
key to attend to: no mask, Keras masks from `Embedding(mask_zero=True)`
(right and left padding), `attention_mask`, `use_causal_mask` (`T != S`
too), `attention_axes`, returned scores, dropout in training. Rows with
nothing to attend to give 0 before the output projection (the output
bias after it), zero scores and exactly zero gradients, where Keras gives
the mean of the values; float16 `q . k` beyond 65504 stays exact under
`mixed_float16`; a tiny model trains finite under `mixed_float16` with
`jit_compile=True` (not on torch: Keras's torch `jit_compile` is
`torch.compile`); `.keras` files round-trip with `safe_mode=True`.

Gradients use `Model.stateless_call` (Keras masks propagate through
`Functional.call`) and the backend's autodiff (`tests/backend_utils.vjp`).
A padded query row's output differs by design, so its cotangent is 0 in
the parity checks; the zero-gradient checks give it the only non-zero one.
"""

import contextlib
import os
import warnings

import keras
import numpy as np
import pytest

from keras_stable.layers import StableGroupedQueryAttention
from keras_stable.layers import StableMultiHeadAttention
from tests import backend_utils as bu

JIT = bu.BACKEND != "torch"
DIM, VOCAB = 8, 7

PAIRS = {
    "mha": (
        keras.layers.MultiHeadAttention,
        StableMultiHeadAttention,
        {"num_heads": 2, "key_dim": 4},
    ),
    "gqa": (
        keras.layers.GroupQueryAttention,
        StableGroupedQueryAttention,
        {"head_dim": 4, "num_query_heads": 4, "num_key_value_heads": 2},
    ),
}


@contextlib.contextmanager
def _keras_side():
    """Keras's GQA makes its projections warn that they drop the Keras
    masks of its inputs (ours does not); silenced for Keras's layer only."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=r"(?s).*EinsumDense\) was passed an input with a mask"
        )
        yield


def _rng(seed=0):
    return np.random.default_rng(seed)


def _randomise(layer, seed=0):
    """Random weights, biases included (Keras starts them at 0, which
    would hide a missing bias)."""
    rng = _rng(seed)
    layer.set_weights([rng.normal(0, 0.5, w.shape).astype("float32") for w in layer.get_weights()])


def _models(kind, build, weights_seed=0, **overrides):
    """`(keras_model, our_model)` from `build(layer) -> (inputs, outputs)`,
    the same weights in both."""
    theirs_cls, ours_cls, kwargs = PAIRS[kind]
    kwargs = {**kwargs, **overrides}
    with _keras_side():
        theirs_in, theirs_out = build(theirs_cls(**kwargs, name="attention"))
    ours_in, ours_out = build(ours_cls(**kwargs, name="attention"))
    theirs, ours = keras.Model(theirs_in, theirs_out), keras.Model(ours_in, ours_out)
    _randomise(theirs, weights_seed)
    ours.set_weights(theirs.get_weights())
    return theirs, ours


def _vjp(model, inputs, float_inputs, cotangent, mode="eager"):
    """Value and gradients w.r.t. the float inputs and every weight."""
    weights = [keras.ops.convert_to_numpy(w) for w in model.trainable_variables]
    state = [keras.ops.convert_to_numpy(w) for w in model.non_trainable_variables]
    n = len(inputs)

    def fn(*args):
        ins = list(args[:n]) if n > 1 else args[0]
        out, _ = model.stateless_call(list(args[n:]), state, ins)
        return out

    wrt = tuple(float_inputs) + tuple(range(n, n + len(weights)))
    return bu.vjp(fn, list(inputs) + weights, wrt=wrt, cotangent=cotangent, mode=mode)


def _assert_parity(theirs, ours, inputs, float_inputs=(), valid_rows=None, modes=("eager",)):
    """Outputs on the valid rows and all gradients, with the cotangent 0
    on the other rows (eagerly; `modes=bu.MODES` adds compiled on TF, JAX)."""
    out = bu.to_numpy(ours(inputs if len(inputs) > 1 else inputs[0]))
    cotangent = _rng(5).normal(size=out.shape).astype("float32")
    if valid_rows is not None:
        cotangent *= valid_rows[..., None]
    for mode in modes:
        with _keras_side():
            ref, ref_grads = _vjp(theirs, inputs, float_inputs, cotangent, mode)
        got, got_grads = _vjp(ours, inputs, float_inputs, cotangent, mode)
        rows = np.ones(out.shape[:2], bool) if valid_rows is None else valid_rows
        bu.assert_close(got[rows], ref[rows], what=f"{mode} output")
        assert len(got_grads) == len(ref_grads)
        for i, (g, r) in enumerate(zip(got_grads, ref_grads)):
            bu.assert_finite(g, f"{mode} gradient {i}")
            bu.assert_close(g, r, what=f"{mode} gradient {i}", tol=(1e-4, 1e-5))


def _tokens(left_padding=False):
    tokens = _rng(1).integers(1, VOCAB, (3, 5)).astype("int32")
    tokens[0, 3:] = 0
    tokens[2, 1:] = 0
    if left_padding:
        tokens = tokens[:, ::-1].copy()
    return tokens


# ----------------------------------------------------------------------------
# The drop-in contract: constructor, config, weights
# ----------------------------------------------------------------------------
@pytest.mark.parametrize("kind", sorted(PAIRS))
def test_config_and_weights_are_keras(kind):
    theirs_cls, ours_cls, kwargs = PAIRS[kind]
    extra = {"dropout": 0.25, "use_gate": True, "sliding_window": 3, "seed": 4}
    theirs, ours = theirs_cls(**kwargs, **extra), ours_cls(**kwargs, **extra)
    ours_config, theirs_config = ours.get_config(), theirs.get_config()
    for key in ("name", "dtype"):
        ours_config.pop(key), theirs_config.pop(key)
    assert ours_config == theirs_config
    q, v = np.ones((2, 5, DIM), "float32"), np.ones((2, 3, DIM), "float32")
    theirs(q, v), ours(q, v)
    assert [(w.path.split("/", 1)[1], w.shape) for w in ours.weights] == [
        (w.path.split("/", 1)[1], w.shape) for w in theirs.weights
    ]
    assert len(ours.non_trainable_variables) == len(theirs.non_trainable_variables)
    clone = ours_cls.from_config(ours.get_config())
    clone(q, v)
    clone.set_weights(ours.get_weights())
    bu.assert_close(bu.to_numpy(clone(q, v)), bu.to_numpy(ours(q, v)))
    assert keras.saving.get_registered_name(ours_cls) == f"keras_stable>{ours_cls.__name__}"


# ----------------------------------------------------------------------------
# Parity with Keras: outputs and gradients, every mask source
# ----------------------------------------------------------------------------
@pytest.mark.parametrize("kind", sorted(PAIRS))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_parity_cross_attention(kind, causal):
    # T != S in both directions: the causal mask is aligned at the top left.
    for t, s in ((4, 6), (5, 3)):

        def build(layer, t=t, s=s):
            q, v = keras.Input((t, DIM)), keras.Input((s, DIM))
            return [q, v], layer(q, v, use_causal_mask=causal)

        theirs, ours = _models(kind, build)
        rng = _rng(2)
        inputs = [rng.normal(size=(2, t, DIM)), rng.normal(size=(2, s, DIM))]
        inputs = [x.astype("float32") for x in inputs]
        _assert_parity(theirs, ours, inputs, float_inputs=(0, 1), modes=bu.MODES)


@pytest.mark.parametrize("kind", sorted(PAIRS))
def test_parity_attention_mask_and_separate_key(kind):
    def build(layer):
        q, v, k = keras.Input((4, DIM)), keras.Input((6, DIM)), keras.Input((6, 5))
        mask = keras.Input((4, 6), dtype="bool")
        return [q, v, k, mask], layer(q, v, key=k, attention_mask=mask)

    theirs, ours = _models(kind, build)
    rng = _rng(3)
    mask = rng.random((2, 4, 6)) < 0.5
    mask[:, :, 0] = True  # every row attends to something
    inputs = [
        rng.normal(size=(2, 4, DIM)).astype("float32"),
        rng.normal(size=(2, 6, DIM)).astype("float32"),
        rng.normal(size=(2, 6, 5)).astype("float32"),
        mask,
    ]
    _assert_parity(theirs, ours, inputs, float_inputs=(0, 1, 2))


@pytest.mark.parametrize("kind", sorted(PAIRS))
@pytest.mark.parametrize("left_padding", [False, True], ids=["right_pad", "left_pad_causal"])
def test_parity_keras_masks_from_embedding(kind, left_padding):
    # Padded query positions (and, with left padding and a causal mask, the
    # positions that only see padding) have nothing to attend to: compared
    # elsewhere. Every other row matches Keras, gradients included.
    def build(layer):
        tokens = keras.Input((5,), dtype="int32")
        x = keras.layers.Embedding(VOCAB, DIM, mask_zero=True, name="embed")(tokens)
        return tokens, layer(x, x, use_causal_mask=left_padding)

    theirs, ours = _models(kind, build)
    tokens = _tokens(left_padding)
    _assert_parity(theirs, ours, [tokens], valid_rows=tokens != 0)
    # The query's mask is passed on, as Keras does.
    assert getattr(ours.outputs[0], "_keras_mask", None) is not None


@pytest.mark.parametrize("kind", sorted(PAIRS))
def test_parity_returned_scores(kind):
    theirs_cls, ours_cls, kwargs = PAIRS[kind]
    theirs, ours = theirs_cls(**kwargs), ours_cls(**kwargs)
    rng = _rng(4)
    q, v = rng.normal(size=(2, 4, DIM)), rng.normal(size=(2, 6, DIM))
    mask = rng.random((2, 4, 6)) < 0.6
    mask[..., 1] = True
    theirs(q, v), ours(q, v)
    _randomise(theirs)
    ours.set_weights(theirs.get_weights())
    for m in (None, mask):
        out, scores = ours(q, v, attention_mask=m, return_attention_scores=True)
        ref, ref_scores = theirs(q, v, attention_mask=m, return_attention_scores=True)
        assert tuple(scores.shape) == tuple(ref_scores.shape)
        bu.assert_close(bu.to_numpy(scores), bu.to_numpy(ref_scores))
        bu.assert_close(bu.to_numpy(out), bu.to_numpy(ref))
        bu.assert_close(bu.to_numpy(out), bu.to_numpy(ours(q, v, attention_mask=m)))


@pytest.mark.parametrize(
    "shape,axes",
    [((2, 3, 4, DIM), (2,)), ((2, 3, 4, DIM), (1, 2)), ((2, 2, 3, 2, DIM), (1, 3))],
    ids=["free_axis", "2d", "2d_with_free_axis"],
)
def test_parity_attention_axes(shape, axes):
    def build(layer):
        x = keras.Input(shape[1:])
        return x, layer(x, x)

    theirs, ours = _models("mha", build, attention_axes=axes)
    x = _rng(6).normal(size=shape).astype("float32")
    _assert_parity(theirs, ours, [x], float_inputs=(0,))
    mha, ours_layer = theirs.get_layer("attention"), ours.get_layer("attention")
    _, ref_scores = mha(x, x, return_attention_scores=True)
    _, scores = ours_layer(x, x, return_attention_scores=True)
    bu.assert_close(bu.to_numpy(scores), bu.to_numpy(ref_scores))


@pytest.mark.parametrize("kind", sorted(PAIRS))
def test_parity_dropout_in_training(kind):
    # The same seed draws the same dropout mask on the probabilities.
    theirs_cls, ours_cls, kwargs = PAIRS[kind]
    theirs = theirs_cls(**kwargs, dropout=0.4, seed=7)
    ours = ours_cls(**kwargs, dropout=0.4, seed=7)
    x = _rng(7).normal(size=(2, 5, DIM)).astype("float32")
    theirs(x, x), ours(x, x)
    _randomise(theirs)
    ours.set_weights(theirs.get_weights())
    for _ in range(2):
        ref = bu.to_numpy(theirs(x, x, training=True))
        got = bu.to_numpy(ours(x, x, training=True))
        bu.assert_close(got, ref)
    bu.assert_close(bu.to_numpy(ours(x, x)), bu.to_numpy(theirs(x, x)))
    assert not np.allclose(bu.to_numpy(ours(x, x, training=True)), bu.to_numpy(ours(x, x)))


# ----------------------------------------------------------------------------
# Rows with nothing to attend to: 0, never the mean of the values or NaN
# ----------------------------------------------------------------------------
@pytest.mark.parametrize("kind", sorted(PAIRS))
@pytest.mark.parametrize("dropout", [0.0, 0.5])
def test_fully_masked_row_is_zero_with_zero_gradients(kind, dropout):
    def build(layer):
        x = keras.Input((4, DIM))
        mask = keras.Input((4, 4), dtype="bool")
        return [x, mask], layer(x, x, attention_mask=mask)

    theirs, ours = _models(kind, build, dropout=dropout, seed=1)
    rng = _rng(8)
    x = rng.normal(size=(2, 4, DIM)).astype("float32")
    mask = rng.random((2, 4, 4)) < 0.6
    mask[:, :, 2] = True
    mask[0, 1] = False  # nothing to attend to
    mask[1, 3] = False
    output_bias = bu.to_numpy(ours.get_layer("attention")._output_dense.bias)
    # Only the empty rows carry a cotangent.
    empty = np.zeros((2, 4), bool)
    empty[0, 1] = empty[1, 3] = True
    cotangent = _rng(9).normal(size=(2, 4, DIM)).astype("float32") * empty[..., None]
    for mode in bu.MODES:
        out, grads = _vjp(ours, [x, mask], (0,), cotangent, mode)
        # 0 before the output projection: the output bias after it.
        np.testing.assert_array_equal(out[empty], np.broadcast_to(output_bias, (2, DIM)))
        names = ["x"] + [w.path for w in ours.trainable_variables]
        for name, g in zip(names, grads):
            bu.assert_finite(g, name)
            if not name.endswith("attention_output/bias"):
                np.testing.assert_array_equal(g, 0.0, err_msg=f"{mode}: {name}")
    # Keras's default path gives the mean of the values there instead.
    if dropout == 0.0:
        ref = bu.to_numpy(theirs([x, mask]))
        assert not np.allclose(ref[empty], output_bias)
    # Scores: 0 on the empty rows, rows of 1 elsewhere; dropout in
    # training leaves the empty rows at 0 too.
    layer = ours.get_layer("attention")
    _, scores = layer(x, x, attention_mask=mask, return_attention_scores=True)
    scores = bu.to_numpy(scores)
    np.testing.assert_array_equal(scores[0, :, 1], 0.0)
    np.testing.assert_array_equal(scores[1, :, 3], 0.0)
    full = np.ones((2, 4), bool) & ~empty
    np.testing.assert_allclose(scores.sum(-1).transpose(0, 2, 1)[full], 1.0, rtol=1e-6)
    trained = bu.to_numpy(layer(x, x, attention_mask=mask, training=True))
    np.testing.assert_array_equal(trained[empty], np.broadcast_to(output_bias, (2, DIM)))


@pytest.mark.parametrize("kind", sorted(PAIRS))
def test_left_padding_under_a_causal_mask(kind):
    # The classic: position 0 is padding, and under the causal mask it sees
    # only itself. Its row is the output bias, with zero gradient, and the
    # rest of the sequence is unaffected.
    _, ours_cls, kwargs = PAIRS[kind]
    layer = ours_cls(**kwargs)
    tokens = np.array([[0, 0, 3, 1, 2], [4, 1, 2, 3, 5]], "int32")
    embed = keras.layers.Embedding(VOCAB, DIM, mask_zero=True)
    out, scores = layer(
        embed(tokens), embed(tokens), use_causal_mask=True, return_attention_scores=True
    )
    out, scores = bu.to_numpy(out), bu.to_numpy(scores)
    bias = bu.to_numpy(layer._output_dense.bias)
    np.testing.assert_array_equal(out[0, :2], np.broadcast_to(bias, (2, DIM)))
    np.testing.assert_array_equal(scores[0, :, :2], 0.0)
    assert np.isfinite(out).all() and np.isfinite(scores).all()
    # The valid rows of the padded sequence equal those of the same
    # sequence without its padding.
    short, short_scores = layer(
        embed(tokens[:1, 2:]),
        embed(tokens[:1, 2:]),
        use_causal_mask=True,
        return_attention_scores=True,
    )
    bu.assert_close(out[0, 2:], bu.to_numpy(short)[0])
    bu.assert_close(scores[0, :, 2:, 2:], bu.to_numpy(short_scores)[0])


# ----------------------------------------------------------------------------
# Half precision
# ----------------------------------------------------------------------------
def _identity_layer(kind, policy):
    """One head of size 8 (GQA: one query and one key/value head), identity
    projections and zero biases: the attention core is visible."""
    if kind == "mha":
        layer = StableMultiHeadAttention(num_heads=1, key_dim=DIM, dtype=policy)
    else:
        layer = StableGroupedQueryAttention(
            head_dim=DIM, num_query_heads=1, num_key_value_heads=1, dtype=policy
        )
    layer.build((1, 1, DIM), (1, 3, DIM))
    eye = np.eye(DIM, dtype="float32")
    weights = []
    for w in layer.get_weights():
        weights.append(eye.reshape(w.shape) if w.size == DIM * DIM else np.zeros_like(w))
    layer.set_weights(weights)
    return layer


@pytest.mark.parametrize("kind", sorted(PAIRS))
@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_half_precision_logits_beyond_float16(kind, policy):
    # q . k = 8 * 100 * 100 = 80000 > 65504: a float16 product overflows to
    # inf and the softmax to NaN; in float32 key 0 wins outright.
    layer = _identity_layer(kind, policy)
    q = np.full((1, 1, DIM), 100.0, "float32")
    v = np.stack([np.full(DIM, 100.0), np.full(DIM, 90.0), np.full(DIM, -100.0)])[None]
    v = v.astype("float32")
    mask = np.array([[[True, True, True]]])
    for kwargs in ({}, {"return_attention_scores": True}, {"attention_mask": mask}):
        out = layer(q, v, **kwargs)
        out = out[0] if isinstance(out, tuple) else out
        assert keras.backend.standardize_dtype(out.dtype) == policy.split("_")[1]
        np.testing.assert_array_equal(bu.to_numpy(out), np.full((1, 1, DIM), 100.0))
    _, scores = layer(q, v, return_attention_scores=True)
    np.testing.assert_array_equal(bu.to_numpy(scores)[0, 0, 0], [1.0, 0.0, 0.0])


@pytest.mark.parametrize("kind", sorted(PAIRS))
@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_fit_left_padded_causal_stays_finite(kind, policy):
    keras.config.set_dtype_policy(policy)
    keras.utils.set_random_seed(0)
    _, ours_cls, kwargs = PAIRS[kind]
    tokens = keras.Input((6,), dtype="int32")
    x = keras.layers.Embedding(VOCAB, DIM, mask_zero=True)(tokens)
    x = ours_cls(**kwargs, dropout=0.1)(x, x, use_causal_mask=True)
    # Per position (not a masked mean pooling, which divides by 0 for the
    # wholly padded sequence): Keras's loss skips the masked positions.
    out = keras.layers.Dense(1, dtype="float32")(x)
    model = keras.Model(tokens, out)
    rng = _rng(10)
    data = rng.integers(1, VOCAB, (16, 6)).astype("int32")
    for i, n in enumerate(rng.integers(0, 6, 16)):
        data[i, :n] = 0  # left padding; one sequence wholly padded
    data[3] = 0
    y = rng.normal(size=(16, 6, 1)).astype("float32")
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse", jit_compile=JIT)
    history = model.fit(data, y, batch_size=8, epochs=3, verbose=0, shuffle=False)
    assert np.isfinite(history.history["loss"]).all()
    for w in model.weights:
        assert np.isfinite(bu.to_numpy(w)).all(), w.path
    assert np.isfinite(bu.to_numpy(model.predict(data, verbose=0))).all()


# ----------------------------------------------------------------------------
# Saving, compiled training, bad input
# ----------------------------------------------------------------------------
def test_keras_file_round_trip(tmp_path):
    tokens = keras.Input((5,), dtype="int32")
    x = keras.layers.Embedding(VOCAB, DIM, mask_zero=True)(tokens)
    x = StableMultiHeadAttention(2, 4, dropout=0.1, use_gate=True)(x, x, use_causal_mask=True)
    x = StableGroupedQueryAttention(4, 4, 2, sliding_window=3)(x, x)
    model = keras.Model(tokens, x)
    path = os.path.join(tmp_path, "attention.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    data = _tokens(left_padding=True)
    np.testing.assert_array_equal(
        bu.to_numpy(loaded.predict(data, verbose=0)), bu.to_numpy(model.predict(data, verbose=0))
    )
    assert [type(layer).__name__ for layer in loaded.layers[2:]] == [
        "StableMultiHeadAttention",
        "StableGroupedQueryAttention",
    ]


@pytest.mark.parametrize("kind", sorted(PAIRS))
def test_compiled_fit_matches_keras(kind):
    def build(layer):
        q, v = keras.Input((4, DIM)), keras.Input((6, DIM))
        return [q, v], layer(q, v, use_causal_mask=True)

    theirs, ours = _models(kind, build)
    rng = _rng(11)
    inputs = [rng.normal(size=(8, 4, DIM)), rng.normal(size=(8, 6, DIM))]
    inputs = [x.astype("float32") for x in inputs]
    y = rng.normal(size=(8, 4, DIM)).astype("float32")
    losses = []
    for model in (theirs, ours):
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", jit_compile=JIT)
        history = model.fit(inputs, y, batch_size=4, epochs=2, verbose=0, shuffle=False)
        losses.append(history.history["loss"])
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)
    for a, b in zip(ours.get_weights(), theirs.get_weights()):
        bu.assert_close(a, b, tol=(1e-4, 1e-5))


@pytest.mark.parametrize("kind", sorted(PAIRS))
def test_bad_attention_mask_is_a_value_error(kind):
    _, ours_cls, kwargs = PAIRS[kind]
    layer = ours_cls(**kwargs)
    x = np.ones((2, 4, DIM), "float32")
    with pytest.raises(ValueError, match=r"`attention_mask`.*\(2, 2, 5\)"):
        layer(x, x, attention_mask=np.ones((2, 2, 5), bool))
    with pytest.raises(ValueError, match=r"`attention_mask` must have at most 4"):
        layer(x, x, attention_mask=np.ones((1, 2, 2, 4, 4), bool))


class _Block(keras.layers.Layer):
    """Attention built in a custom layer's `__init__`, as tutorials write it."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.attention = StableMultiHeadAttention(num_heads=2, key_dim=4)
        self.dense = keras.layers.Dense(8)

    def call(self, x):
        return self.dense(self.attention(x, x, use_causal_mask=True))


def test_custom_layer_with_a_dynamic_length_builds_and_trains():
    # Issue #38 item 8: on JAX the layer's output spec is computed with a
    # symbolic length, which the `S > 1024` choice of path could not compare.
    inputs = keras.Input((None, 8))
    model = keras.Model(inputs, _Block()(inputs))
    model.compile("adam", "mse", jit_compile=bu.BACKEND != "torch")
    x = np.random.default_rng(0).random((4, 12, 8)).astype("float32")
    model.fit(x, x, epochs=1, verbose=0)
    assert model.predict(x, verbose=0).shape == (4, 12, 8)
