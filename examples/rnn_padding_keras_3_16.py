"""Padded sequences through an LSTM on Keras 3.16: keeping padded steps out
of the loss.

Keras 3.16 sets `supports_masking=False` on its RNN layers, `Bidirectional`
and `TimeDistributed` (keras-team/keras#23235). The LSTM still skips padded
steps, but its output carries no mask: a tagger
`Embedding(mask_zero=True) -> LSTM(return_sequences=True) -> Dense` then
scores the padded steps (label 0) in its loss and metrics, and averages over
them. On Keras 3.15 the LSTM here is given 3.16's setting, so the script
shows the same thing on both versions.

Three taggers from the same weights, trained with `fit`:
- as written (on 3.16 the padding counts, and the loss is diluted by it);
- with `CarryMask()([lstm_output, embedded])`, which puts the padding mask
  back on the LSTM's output (the loss and metrics read it, as on 3.15);
- with a `sample_weight` of the non-padded steps and the loss's
  `reduction="mean_with_sample_weight"` (no model change).
The last two train the same model (test loss over the real tokens 0.548 on
torch, 3.15.1), the first does not (1.151: the padded steps, 37 % of them,
pulled it toward predicting tag 0); the audit warns about the first
(`audit(model, x, y)`). `shuffle=False` so that the three runs see the same
batches.

Run: `KERAS_BACKEND=jax python examples/rnn_padding_keras_3_16.py`
"""

import keras
import numpy as np
from packaging.version import Version

from keras_stable.audit import audit
from keras_stable.layers import CarryMask

KERAS_3_16 = Version(keras.__version__) >= Version("3.16.0.dev0")
VOCAB, TAGS, STEPS = 20, 4, 12


def data(n, seed):
    """Token sequences of 3 to 12 tokens, padded with 0; the tag of a token
    is its value mod 4 (padding: tag 0, as padded labels usually are)."""
    rng = np.random.default_rng(seed)
    tokens = np.zeros((n, STEPS), "int32")
    for row, length in zip(tokens, rng.integers(3, STEPS + 1, n)):
        row[:length] = rng.integers(1, VOCAB, length)
    return tokens, tokens % TAGS, (tokens > 0).astype("float32")


def tagger(carry):
    tokens = keras.Input((None,), dtype="int32")
    embedded = keras.layers.Embedding(VOCAB, 16, mask_zero=True)(tokens)
    lstm = keras.layers.LSTM(16, return_sequences=True)
    if not KERAS_3_16:
        lstm.supports_masking = False  # what Keras 3.16 does
    hidden = lstm(embedded)
    if carry:
        hidden = CarryMask()([hidden, embedded])
    return keras.Model(tokens, keras.layers.Dense(TAGS)(hidden))


def masked_loss(model, x, y, keep):
    """The per-token cross-entropy over the real tokens only (float64)."""
    logits = np.asarray(keras.ops.convert_to_numpy(model(x)), "float64")
    shifted = logits - logits.max(-1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    nll = -np.take_along_axis(log_p, y[..., None], -1)[..., 0]
    return float((nll * keep).sum() / keep.sum())


def main():
    keras.utils.set_random_seed(0)
    x, y, keep = data(256, seed=1)
    x_test, y_test, keep_test = data(128, seed=2)
    print(f"Keras {keras.__version__}; padding: {1 - keep.mean():.0%} of the steps")
    weights = tagger(carry=False).get_weights()

    results = {}
    for name in ("as written", "CarryMask", "sample_weight"):
        model = tagger(carry=name == "CarryMask")
        model.set_weights(weights)
        reduction = "mean_with_sample_weight" if name == "sample_weight" else "sum_over_batch_size"
        model.compile(
            optimizer=keras.optimizers.Adam(1e-2),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=reduction),
        )
        if name == "as written":
            warnings = audit(model, x[:32], y[:32]).warnings
            print(f"audit of the model as written: {len(warnings)} warning(s)")
            for warning in warnings:
                print("  " + warning.splitlines()[0])
        history = model.fit(
            x,
            y,
            sample_weight=keep if name == "sample_weight" else None,
            batch_size=32,
            epochs=3,
            shuffle=False,
            verbose=0,
        )
        results[name] = masked_loss(model, x_test, y_test, keep_test)
        print(
            f"{name:>13}: Keras's loss in the last epoch {history.history['loss'][-1]:.4f}; "
            "test loss over the real tokens "
            f"{results[name]:.4f}"
        )

    # The two fixes train on the real tokens only, from the same weights:
    # the same model, up to the order of float32 sums.
    np.testing.assert_allclose(results["CarryMask"], results["sample_weight"], rtol=1e-3)
    print("CarryMask and sample_weight train the same model; as written differs.")
    print("ok")


if __name__ == "__main__":
    main()
