"""A small causal Transformer language model with `LinearSoftmaxHead`.

The output layer is tied to the input embedding (a
`keras.layers.ReversibleEmbedding` with Gemma 2's logit soft-capping) and
adds PaLM's z-loss. The head trains through `fit` without materialising
the `[tokens, vocab]` logits (the loss is an online log-sum-exp over
vocabulary blocks with a hand-written gradient) and returns logits at
inference. The script trains the same model twice from the same weights —
once with the head, once with Keras's own reverse projection
`embed(hidden, reverse=True)` and `SparseCategoricalCrossentropy` plus the
same z-loss — on synthetic text (a noisy modular sequence, so there is
something to learn), prints both loss curves (equal within round-off) and
greedy next-token accuracy, and saves/reloads the model: one embedding
matrix, still shared after loading.

Run: `KERAS_BACKEND=jax python examples/causal_lm_head.py`
"""

import os
import tempfile

import keras
import numpy as np

import keras_stable

VOCAB, DIM, HEADS, STEPS, SAMPLES = 2000, 32, 2, 16, 256
SOFT_CAP, Z_LOSS = 30.0, 1e-4


def synthetic_text(seed=0):
    """Sequences that mostly follow `next = (3 * token + 7) % VOCAB`."""
    rng = np.random.default_rng(seed)
    tokens = np.empty((SAMPLES, STEPS + 1), "int32")
    tokens[:, 0] = rng.integers(1, VOCAB, SAMPLES)
    for t in range(STEPS):
        follow = (3 * tokens[:, t] + 7) % VOCAB
        noise = rng.integers(1, VOCAB, SAMPLES)
        tokens[:, t + 1] = np.where(rng.random(SAMPLES) < 0.9, follow, noise)
    return tokens[:, :-1], tokens[:, 1:]


def embedding():
    return keras.layers.ReversibleEmbedding(VOCAB, DIM, logit_soft_cap=SOFT_CAP, name="embed")


def trunk(tokens, embed):
    """The tied embedding + one causal self-attention block."""
    h = embed(tokens)
    attention = keras.layers.MultiHeadAttention(HEADS, DIM // HEADS, name="attention")
    h = keras.layers.LayerNormalization(name="norm")(h + attention(h, h, use_causal_mask=True))
    return keras.layers.Dense(DIM, activation="gelu", name="mlp")(h)


def fused_models():
    tokens = keras.Input((STEPS,), dtype="int32")
    labels = keras.Input((STEPS,), dtype="int32")
    embed = embedding()
    hidden = trunk(tokens, embed)
    # Tied: the head projects with `embed`'s (VOCAB, DIM) matrix, read in
    # place, and takes its soft cap (30: logits 30 tanh(logits / 30)).
    head = keras_stable.layers.LinearSoftmaxHead(
        VOCAB, use_bias=False, tied_embedding=embed, z_loss=Z_LOSS, name="head"
    )
    train = keras.Model([tokens, labels], head(hidden, labels))
    predict = keras.Model(tokens, head(hidden))
    return train, predict


def materialised_model():
    tokens = keras.Input((STEPS,), dtype="int32")
    embed = embedding()
    return keras.Model(tokens, embed(trunk(tokens, embed), reverse=True))


def cross_entropy_with_z_loss(labels, logits):
    """Keras's loss on the materialised (capped) logits, plus the z-loss."""
    ce = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    return ce + Z_LOSS * keras.ops.square(keras.ops.logsumexp(logits, axis=-1))


def accuracy(predict, x, y):
    logits = keras.ops.convert_to_numpy(predict(x))
    return float(np.mean(np.argmax(logits, axis=-1) == y))


def main():
    jit = keras.backend.backend() != "torch"
    x, y = synthetic_text()
    keras.utils.set_random_seed(0)
    train, predict = fused_models()
    plain = materialised_model()
    for name in ("embed", "attention", "norm", "mlp"):
        plain.get_layer(name).set_weights(train.get_layer(name).get_weights())

    train.compile(optimizer=keras.optimizers.Adam(3e-3), jit_compile=jit)
    plain.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=cross_entropy_with_z_loss,
        jit_compile=jit,
    )
    fused = train.fit([x, y], batch_size=32, epochs=4, verbose=0, shuffle=False).history["loss"]
    ref = plain.fit(x, y, batch_size=32, epochs=4, verbose=0, shuffle=False).history["loss"]

    print(f"backend: {keras.backend.backend()}, vocabulary {VOCAB}, {SAMPLES}x{STEPS} tokens")
    shared = train.get_layer("head").kernel is train.get_layer("embed").embeddings
    print(f"{len(train.weights)} weights; the head's kernel is the embedding matrix: {shared}")
    print("epoch  LinearSoftmaxHead  embed(reverse=True) + cross-entropy + z-loss")
    for epoch, (a, b) in enumerate(zip(fused, ref), 1):
        print(f"{epoch:5d}  {a:17.6f}  {b:17.6f}")
    assert np.allclose(fused, ref, rtol=1e-3), (fused, ref)
    assert fused[-1] < fused[0], fused
    print(
        f"next-token accuracy: head {accuracy(predict, x, y):.3f}, "
        f"reverse projection {accuracy(plain, x, y):.3f}"
    )

    path = os.path.join(tempfile.mkdtemp(), "lm.keras")
    predict.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    same = np.array_equal(
        keras.ops.convert_to_numpy(loaded(x[:4])), keras.ops.convert_to_numpy(predict(x[:4]))
    )
    head, embed = loaded.get_layer("head"), loaded.get_layer("embed")
    tied = head.kernel is embed.embeddings and len(loaded.weights) == len(predict.weights)
    print(f"reloaded from {os.path.basename(path)}: identical logits = {same}, still tied = {tied}")
    assert same and tied
    print("ok")


if __name__ == "__main__":
    main()
