"""Fine-tune a keras-hub `GemmaCausalLM` through `FusedCausalLM`.

keras-hub's `CausalLM.fit` computes `SparseCategoricalCrossentropy(
from_logits=True)` over the full `[batch, sequence, vocabulary]` logits:
at Gemma's 256k vocabulary, 2 GiB of float32 logits (and as much for their
gradient) per 2048 tokens. `keras_stable.hub.FusedCausalLM(causal_lm)`
trains the same model with the fused cross-entropy, which never forms them.

The script builds a tiny random-weight Gemma 2-style model (final logit
soft cap 30) twice with the same weights, without a preprocessor, on
synthetic token ids with padding (the `(x, y, sample_weight)` keras-hub's
`CausalLMPreprocessor` would return), fine-tunes one with keras-hub's own
`fit` and one through `FusedCausalLM`, prints both loss curves (equal
within float32 round-off), generates from the fine-tuned model, and
round-trips it through `.keras`.

Needs keras-hub (`pip install keras_stable[hub]`, see docs/hub.md).
Run: `KERAS_BACKEND=jax python examples/keras_hub_causal_lm.py`
"""

import os
import tempfile

import keras
import keras_hub
import numpy as np

import keras_stable

VOCAB, BATCH, LENGTH, EPOCHS = 512, 8, 16, 5


def gemma(seed):
    keras.utils.set_random_seed(seed)
    backbone = keras_hub.models.GemmaBackbone(
        vocabulary_size=VOCAB,
        num_layers=2,
        num_query_heads=2,
        num_key_value_heads=1,
        hidden_dim=32,
        intermediate_dim=64,
        head_dim=16,
        final_logit_soft_cap=30.0,  # Gemma 2
        attention_logit_soft_cap=50.0,
        use_post_ffw_norm=True,
        use_post_attention_norm=True,
    )
    return keras_hub.models.GemmaCausalLM(backbone, preprocessor=None)


def batch(seed=0):
    """Token ids that mostly follow `next = (5 * token + 3) % VOCAB`, right
    padded, as `(x, y, sample_weight)`."""
    rng = np.random.default_rng(seed)
    ids = np.empty((BATCH, LENGTH), "int32")
    ids[:, 0] = rng.integers(1, VOCAB, BATCH)
    for t in range(1, LENGTH):
        ids[:, t] = np.where(
            rng.random(BATCH) < 0.9, (5 * ids[:, t - 1] + 3) % VOCAB, rng.integers(1, VOCAB, BATCH)
        )
    lengths = rng.integers(LENGTH // 2, LENGTH + 1, BATCH)
    padding = np.arange(LENGTH)[None, :] < lengths[:, None]
    ids[~padding] = 0
    x = {"token_ids": ids, "padding_mask": padding}
    y = np.concatenate([ids[:, 1:], np.zeros((BATCH, 1), "int32")], axis=1)
    weight = np.concatenate([padding[:, 1:], np.zeros((BATCH, 1), bool)], axis=1)
    return x, y, weight.astype("float32")


def main():
    x, y, sample_weight = batch()
    reference = gemma(seed=0)
    causal_lm = gemma(seed=1)
    causal_lm.set_weights(reference.get_weights())

    reference.compile(optimizer=keras.optimizers.Adam(3e-3))
    model = keras_stable.hub.FusedCausalLM(causal_lm)  # the one call
    model.compile(optimizer=keras.optimizers.Adam(3e-3), sampler="greedy")

    fit = dict(
        sample_weight=sample_weight, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0
    )
    keras_hub_loss = reference.fit(x, y, **fit).history["loss"]
    fused_loss = model.fit(x, y, **fit).history["loss"]
    print("epoch  keras-hub fit  FusedCausalLM fit")
    for epoch, (a, b) in enumerate(zip(keras_hub_loss, fused_loss), 1):
        print(f"{epoch:5d}  {a:13.6f}  {b:17.6f}")
    np.testing.assert_allclose(fused_loss, keras_hub_loss, rtol=1e-5)
    assert fused_loss[-1] < fused_loss[0]

    # Generation from token ids (no preprocessor): the wrapped model's own
    # `generate`, with the fine-tuned weights.
    prompt = {"token_ids": x["token_ids"][:2], "padding_mask": x["padding_mask"][:2]}
    out = model.generate(prompt, stop_token_ids=None)
    print("generated:", keras.ops.convert_to_numpy(out["token_ids"])[0].tolist())

    path = os.path.join(tempfile.mkdtemp(), "fused_gemma.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    same = np.array_equal(
        keras.ops.convert_to_numpy(loaded(x)), keras.ops.convert_to_numpy(model(x))
    )
    print(
        f"reloaded {type(loaded).__name__} from {os.path.basename(path)}: identical logits = {same}"
    )
    assert same
    print("ok")


if __name__ == "__main__":
    main()
