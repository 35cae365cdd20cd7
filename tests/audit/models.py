"""Small models for the audit tests: each trap in its plain formulation, the
same model with keras_stable, and clean Keras models.

Every builder returns `(model, x, y, loss)`; `y` and `loss` may be None.
The trap models compute the trap in a layer named `"trap"` (a `Lambda` with
`keras.ops`, the way the bug reports wrote it), or in the loss.
"""

import keras
import numpy as np
from keras import ops

import keras_stable

N_FEATURES = 8
N_TASKS = 6
BATCH = 8


def _rng(seed=0):
    return np.random.default_rng(seed)


def _features(seed=0, batch=BATCH, n=N_FEATURES):
    return _rng(seed).normal(size=(batch, n)).astype("float32")


def _task_batch(seed=0):
    """The masked multi-task batch of the bug report: one task active."""
    x = _features(seed)
    mask = np.zeros((BATCH, N_TASKS), "float32")
    mask[:, 2] = 1.0
    y = (_rng(seed + 1).normal(size=(BATCH, N_TASKS)) * mask).astype("float32")
    return x, mask, y


# -- bug report 1: the norm of a masked difference -------------------------


def _task_model(name):
    x = keras.Input((N_FEATURES,), name="features")
    mask = keras.Input((N_TASKS,), name="task_mask")
    y1 = keras.layers.Dense(N_TASKS, name="dense")(x)
    y2 = keras.layers.Multiply(name="mask_outputs")([y1, mask])
    return keras.Model([x, mask], y2, name=name)


def norm_in_layer(stable=False):
    """`mean(norm(y_true - y1 * mask, axis=0)**2)` inside the model."""
    x = keras.Input((N_FEATURES,), name="features")
    mask = keras.Input((N_TASKS,), name="task_mask")
    y_true = keras.Input((N_TASKS,), name="y_true")
    y1 = keras.layers.Dense(N_TASKS, name="dense")(x)
    y2 = keras.layers.Multiply(name="mask_outputs")([y1, mask])
    norm = keras_stable.ops.safe_norm if stable else (lambda d, axis: ops.norm(d, axis=axis))
    trap = keras.layers.Lambda(lambda t: ops.mean(norm(t[0] - t[1], axis=0) ** 2), name="trap")
    model = keras.Model([x, mask, y_true], trap([y_true, y2]))
    features, task_mask, labels = _task_batch()
    return model, [features, task_mask, labels], None, None


def plain_task_norm_loss(y_true, y_pred):
    """The loss of the bug report: `mean(norm(y_true - y_pred, axis=0)**2)`."""
    return ops.mean(ops.norm(y_true - y_pred, axis=0) ** 2)


def norm_in_loss(stable=False):
    """The same, as the loss (the demo's scenario)."""
    features, task_mask, labels = _task_batch()
    loss = (
        keras_stable.losses.MaskedMultiTaskDistance(per="task", squared=True)
        if stable
        else plain_task_norm_loss
    )
    return _task_model("regression"), [features, task_mask], labels, loss


# -- bug report 2: a hand-written softmax with large logits ---------------


def _blobs():
    rng = _rng(3)
    labels = rng.integers(0, 2, size=BATCH)
    x = (rng.normal(size=(BATCH, 2)) + np.where(labels[:, None] == 1, 1.5, -1.5)).astype("float32")
    return x, np.eye(2, dtype="float32")[labels]


def softmax_in_layer(stable=False):
    """`exp(s) / sum(exp(s))` after a 2-3-2 network with large weights."""
    inputs = keras.Input((2,), name="x")
    hidden = keras.layers.Dense(3, activation="tanh", name="hidden")
    logits = keras.layers.Dense(2, name="logits")
    if stable:
        probs = keras_stable.layers.StableSoftmax(name="trap")
    else:
        probs = keras.layers.Lambda(
            lambda s: ops.exp(s) / ops.sum(ops.exp(s), axis=1, keepdims=True), name="trap"
        )
    model = keras.Model(inputs, probs(logits(hidden(inputs))))
    _set_large_weights(model)
    x, y = _blobs()
    return model, x, y, keras.losses.CategoricalCrossentropy()


def _set_large_weights(model):
    weights = [
        _rng(7 + n).normal(scale=100.0, size=w.shape).astype("float32")
        for n, w in enumerate(model.get_weights())
    ]
    model.set_weights(weights)


def plain_softmax_cross_entropy(y_true, scores):
    """Hand-written softmax and cross-entropy (the demo's plain loss)."""
    probs = ops.exp(scores) / ops.sum(ops.exp(scores), axis=1, keepdims=True)
    return -ops.sum(y_true * ops.log(probs), axis=1)


def softmax_in_loss(stable=False):
    """The 2-3-2 classifier trained on the hand-written cross-entropy."""
    inputs = keras.Input((2,), name="x")
    hidden = keras.layers.Dense(3, activation="tanh", name="hidden")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(2, name="logits")(hidden))
    _set_large_weights(model)
    x, y = _blobs()
    loss = (
        keras_stable.losses.StableSoftmaxCrossEntropy() if stable else plain_softmax_cross_entropy
    )
    return model, x, y, loss


# -- masking: NaN labels multiplied by a mask ------------------------------


def _nan_label_batch():
    features, task_mask, labels = _task_batch()
    labels = np.where(task_mask > 0, labels, np.nan).astype("float32")  # missing = NaN
    return features, task_mask, labels


def nan_labels_times_mask(stable=False):
    """`mean(((y_pred - y) * mask)**2)` with missing labels stored as NaN."""
    x = keras.Input((N_FEATURES,), name="features")
    mask = keras.Input((N_TASKS,), name="task_mask")
    y_true = keras.Input((N_TASKS,), name="y_true")
    y_pred = keras.layers.Dense(N_TASKS, name="dense")(x)
    if stable:
        trap = keras.layers.Lambda(
            lambda t: ops.mean(
                keras_stable.ops.masked_task_distance(t[0], t[1], mask=t[2], axis=0, squared=True)
            ),
            name="trap",
        )
    else:
        trap = keras.layers.Lambda(lambda t: ops.mean(((t[1] - t[0]) * t[2]) ** 2), name="trap")
    model = keras.Model([x, mask, y_true], trap([y_true, y_pred, mask]))
    features, task_mask, labels = _nan_label_batch()
    return model, [features, task_mask, labels], None, None


def nan_labels_where(stable=False):
    """One `where` hides the NaN labels from the value, not the gradient."""
    x = keras.Input((N_FEATURES,), name="features")
    mask = keras.Input((N_TASKS,), name="task_mask")
    y_true = keras.Input((N_TASKS,), name="y_true")
    y_pred = keras.layers.Dense(N_TASKS, name="dense")(x)

    def fn(t):
        if stable:
            return ops.mean(
                keras_stable.ops.masked_task_distance(t[0], t[1], mask=t[2], axis=0, squared=True)
            )
        return ops.mean(ops.where(t[2] > 0, (t[1] - t[0]) ** 2, 0.0))

    model = keras.Model(
        [x, mask, y_true], keras.layers.Lambda(fn, name="trap")([y_true, y_pred, mask])
    )
    features, task_mask, labels = _nan_label_batch()
    return model, [features, task_mask, labels], None, None


# -- half precision: an epsilon that rounds to 0 ---------------------------


def epsilon_norm(stable=False, dtype=None):
    """`sqrt(sum(x**2) + 1e-12)` on a batch with a zero vector."""
    inputs = keras.Input((N_FEATURES,), name="x")
    if stable:
        norm = keras_stable.layers.SafeNorm(name="trap", dtype=dtype)
    else:
        norm = keras.layers.Lambda(
            lambda t: ops.sqrt(ops.sum(t**2, axis=-1) + 1e-12), name="trap", dtype=dtype
        )
    scale = keras.layers.Dense(1, name="head", dtype=dtype)
    model = keras.Model(inputs, scale(ops.expand_dims(norm(inputs), -1)))
    x = _features(5)
    x[1] = 0.0
    return model, x, None, None


# -- a fully masked attention row ------------------------------------------


def masked_attention(stable=False, fully_masked=True):
    """Self-attention scores with `where(mask, s, -inf)` and a softmax."""
    q = keras.Input((4, 3), name="q")
    mask = keras.Input((4, 4), dtype="bool", name="attention_mask")

    def fn(t):
        scores = ops.matmul(t[0], ops.transpose(t[0], (0, 2, 1)))
        if stable:
            return keras_stable.ops.softmax(scores, mask=t[1])
        return ops.softmax(ops.where(t[1], scores, -np.inf), axis=-1)

    attention = keras.layers.Lambda(fn, name="trap")([q, mask])
    model = keras.Model([q, mask], ops.sum(attention, axis=-1))
    x = _rng(4).normal(size=(2, 4, 3)).astype("float32")
    m = np.tril(np.ones((4, 4), bool))[None].repeat(2, 0)
    if fully_masked:
        m[1, 2] = False  # query 2 of example 1 sees nothing
    return model, [x, m], None, None


# -- exp overflow ----------------------------------------------------------


def exp_overflow(stable=False):
    """`log(1 + exp(s))` written out: inf from s > 88."""
    inputs = keras.Input((N_FEATURES,), name="x")
    logits = keras.layers.Dense(4, name="logits")(inputs)

    def fn(s):
        return ops.softplus(s) if stable else ops.log(1.0 + ops.exp(s))

    model = keras.Model(inputs, keras.layers.Lambda(fn, name="trap")(logits))
    model.get_layer("logits").set_weights(
        [np.full((N_FEATURES, 4), 20.0, "float32"), np.zeros(4, "float32")]
    )
    x = np.abs(_features(6))
    return model, x, None, None


# -- clean Keras models ----------------------------------------------------


def small_cnn():
    model = keras.Sequential(
        [
            keras.Input((8, 8, 1)),
            keras.layers.Conv2D(4, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(3, activation="softmax"),
        ],
        name="cnn",
    )
    x = _rng(11).normal(size=(4, 8, 8, 1)).astype("float32")
    y = np.eye(3, dtype="float32")[[0, 1, 2, 0]]
    return model, x, y, keras.losses.CategoricalCrossentropy()


def transformer_block():
    tokens = keras.Input((6,), dtype="int32", name="tokens")
    h = keras.layers.Embedding(20, 8, mask_zero=True, name="embed")(tokens)
    attended = keras.layers.MultiHeadAttention(2, 4, name="attention")(h, h)
    h = keras.layers.LayerNormalization(name="norm1")(keras.layers.Add(name="add1")([h, attended]))
    ff = keras.layers.Dense(8, activation="relu", name="ff")(h)
    h = keras.layers.LayerNormalization(name="norm2")(keras.layers.Add(name="add2")([h, ff]))
    model = keras.Model(tokens, keras.layers.Dense(5, name="head")(h), name="transformer")
    x = np.array([[3, 4, 5, 0, 0, 0], [7, 8, 9, 10, 11, 0]], "int32")
    y = np.array([[1, 2, 3, 0, 0, 0], [4, 0, 1, 2, 3, 0]], "int32")
    return model, x, y, keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def lstm_tagger():
    tokens = keras.Input((5,), dtype="int32", name="tokens")
    h = keras.layers.Embedding(12, 6, mask_zero=True, name="embed")(tokens)
    embedded = h
    h = keras.layers.LSTM(6, return_sequences=True, name="lstm")(h)
    # Keras 3.16's LSTM drops the mask: put it back (the loss skips padding).
    h = keras_stable.layers.CarryMask(name="carry")([h, embedded])
    model = keras.Model(tokens, keras.layers.Dense(4, name="tags")(h), name="tagger")
    x = np.array([[1, 2, 3, 0, 0], [4, 5, 6, 7, 0], [8, 9, 0, 0, 0]], "int32")
    y = np.array([[1, 2, 3, 0, 0], [0, 1, 2, 3, 0], [3, 2, 0, 0, 0]], "int32")
    return model, x, y, keras.losses.SparseCategoricalCrossentropy(from_logits=True)


TRAP_MODELS = {
    "norm_in_layer": norm_in_layer,
    "norm_in_loss": norm_in_loss,
    "softmax_in_layer": softmax_in_layer,
    "softmax_in_loss": softmax_in_loss,
    "nan_labels_times_mask": nan_labels_times_mask,
    "nan_labels_where": nan_labels_where,
    "epsilon_norm": epsilon_norm,
    "masked_attention": masked_attention,
    "exp_overflow": exp_overflow,
}

CLEAN_MODELS = {
    "small_cnn": small_cnn,
    "transformer_block": transformer_block,
    "lstm_tagger": lstm_tagger,
}


# -- built-in layers only: saves and loads in safe mode --------------------


def exponential_head(scale=50.0):
    """`Activation("exponential")` after a Dense: inf once its inputs pass 88.

    Only built-in layers, so the `.keras` file loads without `--unsafe`.
    `scale` sets the Dense kernel; 0.01 keeps every value finite.
    """
    inputs = keras.Input((4,), name="x")
    h = keras.layers.Dense(3, name="dense")(inputs)
    h = keras.layers.Activation("exponential", name="exp")(h)
    model = keras.Model(inputs, keras.layers.Dense(1, name="head")(h), name="exponential_head")
    model.get_layer("dense").set_weights(
        [np.full((4, 3), scale, "float32"), np.zeros(3, "float32")]
    )
    x = np.abs(_features(9, batch=4, n=4)) + 0.5
    return model, x, np.zeros((4, 1), "float32"), "mse"


# -- guilty rows: a batch where exactly rows 1 and 3 set the trap off -------

GUILTY = (1, 3)
SEQ = 5


def left_padded_causal_attention():
    """Causal self-attention whose mask is made inside the layer from the
    tokens: a left-padded sequence's first query sees only padding."""
    tokens = keras.Input((SEQ,), dtype="int32", name="tokens")
    h = keras.layers.Embedding(10, 4, name="embed")(tokens)
    q = keras.layers.Dense(4, name="q")(h)
    k = keras.layers.Dense(4, name="k")(h)

    def attend(t):
        q, k, tokens = t
        scores = ops.matmul(q, ops.transpose(k, (0, 2, 1)))
        causal = ops.tril(ops.ones((SEQ, SEQ), "bool"))
        keep = ops.logical_and(causal[None], ops.not_equal(tokens, 0)[:, None, :])
        return ops.softmax(ops.where(keep, scores, -np.inf), axis=-1)

    attention = keras.layers.Lambda(attend, name="attention")([q, k, tokens])
    model = keras.Model(tokens, keras.layers.Dense(1, name="head")(attention))
    x = np.array([[1, 2, 3, 4, 5], [0, 0, 3, 4, 5], [6, 7, 8, 9, 1], [0, 4, 3, 2, 1]], "int32")
    return model, x, None, None


def row_norm():
    """A hand-written row norm: rows 1 and 3 are zero vectors."""
    inputs = keras.Input((3,), name="x")
    norm = keras.layers.Lambda(lambda t: ops.sqrt(ops.sum(t * t, axis=-1)), name="trap")
    model = keras.Model(inputs, norm(keras.layers.Dense(3, name="dense")(inputs)))
    x = _features(12, batch=5, n=3)
    x[list(GUILTY)] = 0.0
    return model, x, None, None


def row_overflow():
    """`log(1 + exp(s))` with rows 1 and 3 past 88."""
    inputs = keras.Input((4,), name="x")
    model = keras.Model(
        inputs, keras.layers.Lambda(lambda s: ops.log(1.0 + ops.exp(s)), name="trap")(inputs)
    )
    x = _features(13, batch=5, n=4)
    x[list(GUILTY), 2] = 100.0
    return model, x, None, None


def batch_coupled_overflow():
    """`log(sum(exp(s)))` over the batch axis: exp(87) is finite, the sum
    of eight of them is not; no single row overflows."""
    inputs = keras.Input((2,), name="x")
    model = keras.Model(
        inputs,
        keras.layers.Lambda(lambda s: ops.log(ops.sum(ops.exp(s), axis=0)), name="trap")(inputs),
    )
    return model, np.full((8, 2), 87.0, "float32"), None, None


def classifier_with_labels(labels=(0, 3, 1, -1, 2), compile_loss=None):
    """A 3-class classifier fed labels 3 and -1 (rows 1 and 3)."""
    inputs = keras.Input((4,), name="x")
    model = keras.Model(inputs, keras.layers.Dense(3, name="logits")(inputs), name="classifier")
    loss = compile_loss or keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer="sgd", loss=loss)
    x = _features(14, batch=len(labels), n=4)
    return model, x, np.array(labels, "int32"), None


def embedding_with_indices():
    """An `Embedding(10, 4)` fed -1 (row 1) and 10 (row 3)."""
    tokens = keras.Input((3,), dtype="int32", name="tokens")
    h = keras.layers.Embedding(10, 4, name="embed")(tokens)
    model = keras.Model(tokens, keras.layers.Dense(1, name="head")(h))
    x = np.array([[1, 2, 3], [4, -1, 5], [6, 7, 8], [10, 9, 0], [1, 1, 1]], "int32")
    return model, x, None, None


def reaches_1e5():
    """A float32 model whose `big` Dense reaches 1e5 on rows 1 and 3."""
    inputs = keras.Input((4,), name="x")
    big = keras.layers.Dense(2, name="big")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(1, name="head")(big))
    model.get_layer("big").set_weights([np.full((4, 2), 1e4, "float32"), np.zeros(2, "float32")])
    model.get_layer("head").set_weights([np.full((2, 1), 1e-4, "float32"), np.zeros(1, "float32")])
    x = np.full((5, 4), 0.1, "float32")
    x[list(GUILTY)] = 2.5  # 4 * 2.5 * 1e4 = 1e5
    return model, x, None, None


def tiny_activations():
    """A layer whose nonzero outputs are all below float16's smallest normal."""
    inputs = keras.Input((4,), name="x")
    tiny = keras.layers.Lambda(lambda t: t * 1e-7, name="tiny")(inputs)
    head = keras.layers.Dense(1, bias_initializer="ones", name="head")
    model = keras.Model(inputs, head(tiny))
    return model, _features(15, batch=4, n=4), None, None


def audited_loss(model, x, y):
    """The scalar the audit differentiates for `model` on `(x, y)`."""
    from keras_stable.audit import data
    from keras_stable.audit import execution

    loss_fn = data.resolve_loss(model, None, y)
    x, y = data.to_tensors(x), data.to_tensors(y)
    scalar, _, _ = execution.make_body(model, loss_fn)(x, y, None)
    return float(keras.ops.convert_to_numpy(scalar))
