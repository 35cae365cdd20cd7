"""A causal Transformer classifier on left-padded sequences in `mixed_float16`.

Left padding (the real tokens at the end, as for decoding) under a causal
mask leaves every padded query position with no key to attend to: the keys
before it are padding too. The attention written as it usually is, a `-inf`
mask then a softmax, gives `exp(-inf) / sum(exp(-inf)) = 0 / 0 = NaN` for
these rows. The next block's attention gives them a weight of 0, but
`0 * NaN` is NaN: every position is NaN after the second block and the
loss is NaN from the first step (under `mixed_float16` the loss-scale
optimizer then skips every step: the model never trains). With a single
block the masked pooling hides the NaN rows from the loss, but not from
the gradient.
`keras_stable.ops.dot_product_attention` and
`keras_stable.layers.StableMultiHeadAttention` give 0 and a zero gradient
for such a row, in float32 for float16 inputs.

The same model is trained three times from the same weights, with
`jit_compile=True` (except on torch): the hand-written `-inf` attention,
the same layer calling `keras_stable.ops.dot_product_attention`, and
`StableMultiHeadAttention(use_causal_mask=True)` fed the Keras mask of
`Embedding(mask_zero=True)`. The script prints the first step at which
each run's loss went NaN, and the accuracy.

    KERAS_BACKEND=jax python examples/attention_left_padding.py
"""

import keras
import numpy as np

import keras_stable

VOCAB, LENGTH, DIM, HEADS, BLOCKS, SAMPLES = 16, 12, 16, 2, 2, 512


def make_data(seed=0):
    """Sequences of 3..LENGTH tokens in 2..VOCAB-1, left-padded with 0;
    the label says whether token 1 occurs."""
    rng = np.random.default_rng(seed)
    tokens = np.zeros((SAMPLES, LENGTH), "int32")
    labels = rng.integers(0, 2, SAMPLES).astype("int32")
    for i in range(SAMPLES):
        n = rng.integers(3, LENGTH + 1)
        row = rng.integers(2, VOCAB, n)
        if labels[i]:
            row[rng.integers(0, n)] = 1
        tokens[i, LENGTH - n :] = row
    return tokens, labels


class CausalSelfAttention(keras.layers.Layer):
    """Multi-head causal self-attention over the Keras mask of its input.

    `stable=False` is the usual hand-written form: logits, a `-inf` where a
    key is padding or in the future, a softmax. `stable=True` calls
    `keras_stable.ops.dot_product_attention` with the same mask.
    """

    def __init__(self, stable, **kwargs):
        super().__init__(**kwargs)
        self.stable = stable
        self.supports_masking = True
        self.qkv = keras.layers.Dense(3 * DIM, name="qkv")
        self.out = keras.layers.Dense(DIM, name="out")

    def build(self, input_shape):
        self.qkv.build(input_shape)
        self.out.build(input_shape[:-1] + (DIM,))

    def call(self, x, mask=None):
        b, t = keras.ops.shape(x)[0], x.shape[1]
        q, k, v = keras.ops.split(self.qkv(x), 3, axis=-1)
        q, k, v = (keras.ops.reshape(z, (b, t, HEADS, DIM // HEADS)) for z in (q, k, v))
        causal = keras.ops.tril(keras.ops.ones((t, t), "bool"))
        allowed = causal[None, None] & mask[:, None, None, :]  # (B, 1, T, S)
        if self.stable:
            h = keras_stable.ops.dot_product_attention(q, k, v, mask=allowed)
        else:
            logits = keras.ops.einsum("btnh,bsnh->bnts", q, k) / (DIM // HEADS) ** 0.5
            neg_inf = keras.ops.full_like(logits, float("-inf"))
            weights = keras.ops.softmax(keras.ops.where(allowed, logits, neg_inf), axis=-1)
            h = keras.ops.einsum("bnts,bsnh->btnh", weights, v)
        return self.out(keras.ops.reshape(h, (b, t, DIM)))


def build_model(kind):
    tokens = keras.Input((LENGTH,), dtype="int32")
    x = keras.layers.Embedding(VOCAB, DIM, mask_zero=True, name="embed")(tokens)
    for block in range(BLOCKS):
        if kind == "stable_mha":
            layer = keras_stable.layers.StableMultiHeadAttention(
                HEADS, DIM // HEADS, name=f"attention_{block}"
            )
            h = layer(x, x, use_causal_mask=True)
        else:
            h = CausalSelfAttention(kind == "stable_op", name=f"attention_{block}")(x)
        x = keras.layers.LayerNormalization(name=f"norm_{block}")(keras.layers.Add()([x, h]))
    pooled = keras.layers.GlobalAveragePooling1D()(x)  # the masked mean
    logits = keras.layers.Dense(2, name="logits")(pooled)
    return keras.Model(tokens, logits)


class FirstNaN(keras.callbacks.Callback):
    """Records the first training step whose loss is NaN."""

    def __init__(self):
        super().__init__()
        self.step = 0
        self.first = None
        self.nan_steps = 0

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        if not np.isfinite(float(logs["loss"])):
            self.nan_steps += 1
            if self.first is None:
                self.first = self.step


def train(kind, tokens, labels, weights=None):
    keras.utils.set_random_seed(0)
    model = build_model(kind)
    if weights is not None:
        model.set_weights(weights)
    model.compile(
        optimizer=keras.optimizers.Adam(3e-3),
        loss=keras_stable.losses.StableSparseSoftmaxCrossEntropy(),
        metrics=["sparse_categorical_accuracy"],
        jit_compile=keras.config.backend() != "torch",
    )
    watch = FirstNaN()
    history = model.fit(
        tokens, labels, batch_size=64, epochs=4, verbose=0, callbacks=[watch]
    ).history
    return model, watch, history["sparse_categorical_accuracy"][-1]


def main():
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        tokens, labels = make_data()
        print("fully masked query rows (causal over left padding):", int((tokens == 0).sum()))
        keras.utils.set_random_seed(0)
        weights = build_model("plain").get_weights()
        results = {}
        for kind, name in (
            ("plain", "-inf mask + softmax"),
            ("stable_op", "keras_stable.ops.dot_product_attention"),
            ("stable_mha", "keras_stable.layers.StableMultiHeadAttention"),
        ):
            same = weights if kind != "stable_mha" else None
            model, watch, accuracy = train(kind, tokens, labels, same)
            finite = all(np.all(np.isfinite(w)) for w in model.get_weights())
            where = "never" if watch.first is None else f"at step {watch.first}"
            print(
                f"{name:46s} loss first NaN: {where:10s} "
                f"NaN steps {watch.nan_steps}/{watch.step}, "
                f"weights finite: {finite}, accuracy {accuracy:.3f}"
            )
            results[kind] = (watch, finite, accuracy)
        if results["plain"][0].first is None:
            raise SystemExit("the -inf formulation did not go NaN")
        for kind in ("stable_op", "stable_mha"):
            watch, finite, accuracy = results[kind]
            if watch.first is not None or not finite or accuracy < 0.8:
                raise SystemExit(f"{kind}: NaN or did not train")
        print("ok")
    finally:
        keras.mixed_precision.set_global_policy("float32")


if __name__ == "__main__":
    main()
