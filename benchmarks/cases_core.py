"""The benchmark rows of the core ops, layers and losses: norms, the softmax
family, the three cross-entropies, the element-wise ops and the task
distance, each keras_stable callable against its built-ins.

One function per op family, each a list of `Case`s; `cases.py` puts them in
the order of the table. Sizes and data builders are in `inputs.py`.
"""

from case import Case
from case import K
from case import labelled_like
from case import stable_class
from case import tf_only
from inputs import ELEMENTWISE_SIZES
from inputs import NORM_SIZES
from inputs import PROBABILITY_SIZES
from inputs import SOFTMAX_SIZES
from inputs import SPARSE_SIZES
from inputs import TASK_SIZES
from inputs import build_binary_ce
from inputs import build_dense_ce
from inputs import build_divide
from inputs import build_pair
from inputs import build_positive
from inputs import build_sparse_ce
from inputs import build_task
from inputs import build_x


def _on_softmax_output(make):
    """A loss factory read on `softmax(logits)` (`from_logits=False`): the
    softmax runs inside the timed step, so the output carries its logits
    where the backend exposes them (TF, torch), as a model's softmax layer
    does, and the gradient reaches the logits."""

    def factory(m):
        loss = make(m)
        if loss is None:
            return None
        return lambda y, x: loss(y, K(m).ops.softmax(x, axis=-1))

    return labelled_like(factory, make)


def norm_ops():
    """safe_norm, l2_normalize, cosine_similarity: the norm at zero."""
    return [
        Case(
            "safe_norm(axis=-1)",
            "op",
            "norm",
            NORM_SIZES,
            build_x,
            lambda m: lambda x: m.ks.ops.safe_norm(x, axis=-1),
            {
                "tf.norm": tf_only(lambda m: lambda x: m.tf.norm(x, axis=-1)),
                "keras.ops.norm": lambda m: lambda x: K(m).ops.norm(x, axis=-1),
            },
        ),
        Case(
            "l2_normalize",
            "op",
            "norm",
            NORM_SIZES,
            build_x,
            lambda m: lambda x: m.ks.ops.l2_normalize(x, axis=-1),
            {
                "tf.math.l2_normalize": tf_only(
                    lambda m: lambda x: m.tf.math.l2_normalize(x, axis=-1)
                ),
                "keras.ops.normalize": lambda m: lambda x: K(m).ops.normalize(x, axis=-1),
            },
        ),
        Case(
            "cosine_similarity",
            "op",
            "norm",
            NORM_SIZES,
            build_pair,
            lambda m: lambda a, b: m.ks.ops.cosine_similarity(a, b),
            {
                "keras.losses.cosine_similarity": lambda m: (
                    lambda a, b: K(m).losses.cosine_similarity(a, b)
                ),
            },
        ),
    ]


def softmax_ops():
    """softmax, log_softmax, logsumexp: the hand-written softmax."""
    return [
        Case(
            "softmax",
            "op",
            "softmax",
            SOFTMAX_SIZES,
            build_x,
            lambda m: lambda x: m.ks.ops.softmax(x),
            {
                "tf.nn.softmax": tf_only(lambda m: lambda x: m.tf.nn.softmax(x)),
                "keras.ops.softmax": lambda m: lambda x: K(m).ops.softmax(x),
            },
        ),
        Case(
            "log_softmax",
            "op",
            "softmax",
            SOFTMAX_SIZES,
            build_x,
            lambda m: lambda x: m.ks.ops.log_softmax(x),
            {
                "tf.nn.log_softmax": tf_only(lambda m: lambda x: m.tf.nn.log_softmax(x)),
                "keras.ops.log_softmax": lambda m: lambda x: K(m).ops.log_softmax(x),
            },
        ),
        Case(
            "logsumexp",
            "op",
            "softmax",
            SOFTMAX_SIZES,
            build_x,
            lambda m: lambda x: m.ks.ops.logsumexp(x, axis=-1),
            {
                "tf.reduce_logsumexp": tf_only(
                    lambda m: lambda x: m.tf.reduce_logsumexp(x, axis=-1)
                ),
                "keras.ops.logsumexp": lambda m: lambda x: K(m).ops.logsumexp(x, axis=-1),
            },
        ),
    ]


def cross_entropy_ops():
    """The three cross-entropies, dense, sparse and sigmoid."""
    return [
        Case(
            "softmax_cross_entropy",
            "op",
            "cross_entropy",
            SOFTMAX_SIZES,
            build_dense_ce,
            lambda m: lambda y, x: m.ks.ops.softmax_cross_entropy(y, x),
            {
                "tf.nn.softmax_cross_entropy_with_logits": tf_only(
                    lambda m: (
                        lambda y, x: m.tf.nn.softmax_cross_entropy_with_logits(labels=y, logits=x)
                    )
                ),
                "keras.losses.categorical_crossentropy": lambda m: (
                    lambda y, x: K(m).losses.categorical_crossentropy(y, x, from_logits=True)
                ),
            },
        ),
        Case(
            "sparse_softmax_cross_entropy",
            "op",
            "cross_entropy",
            SPARSE_SIZES,
            build_sparse_ce,
            lambda m: lambda y, x: m.ks.ops.sparse_softmax_cross_entropy(y, x),
            {
                "tf.nn.sparse_softmax_cross_entropy_with_logits": tf_only(
                    lambda m: (
                        lambda y, x: m.tf.nn.sparse_softmax_cross_entropy_with_logits(
                            labels=y, logits=x
                        )
                    )
                ),
                "keras.losses.sparse_categorical_crossentropy": lambda m: (
                    lambda y, x: K(m).losses.sparse_categorical_crossentropy(y, x, from_logits=True)
                ),
                "plain logsumexp - take_along_axis": lambda m: (
                    lambda y, x: (
                        K(m).ops.logsumexp(x, axis=-1)
                        - K(m).ops.squeeze(
                            K(m).ops.take_along_axis(x, K(m).ops.expand_dims(y, -1), axis=-1),
                            -1,
                        )
                    )
                ),
            },
        ),
        Case(
            "sigmoid_cross_entropy",
            "op",
            "cross_entropy",
            ELEMENTWISE_SIZES,
            build_binary_ce,
            lambda m: lambda y, x: m.ks.ops.sigmoid_cross_entropy(y, x),
            {
                "tf.nn.sigmoid_cross_entropy_with_logits": tf_only(
                    lambda m: (
                        lambda y, x: m.tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=x)
                    )
                ),
                "keras.ops.binary_crossentropy": lambda m: (
                    lambda y, x: K(m).ops.binary_crossentropy(y, x, from_logits=True)
                ),
            },
        ),
    ]


def elementwise_ops():
    """safe_sqrt and safe_divide: one element at a time."""
    return [
        Case(
            "safe_sqrt",
            "op",
            "elementwise",
            ELEMENTWISE_SIZES,
            build_positive,
            lambda m: lambda x: m.ks.ops.safe_sqrt(x),
            {"keras.ops.sqrt": lambda m: lambda x: K(m).ops.sqrt(x)},
        ),
        Case(
            "safe_divide",
            "op",
            "elementwise",
            ELEMENTWISE_SIZES,
            build_divide,
            lambda m: lambda a, b: m.ks.ops.safe_divide(a, b),
            {"keras.ops.divide": lambda m: lambda a, b: K(m).ops.divide(a, b)},
        ),
    ]


def distance_ops():
    """masked_task_distance: the multi-task distance."""
    return [
        Case(
            "masked_task_distance",
            "op",
            "norm",
            TASK_SIZES,
            build_task,
            lambda m: lambda t, p: m.ks.ops.masked_task_distance(t, p),
            {
                "keras.ops.norm(t - p)": lambda m: lambda t, p: K(m).ops.norm(t - p, axis=-1),
            },
        ),
    ]


def layer_cases():
    """The layers, against the Keras layers or ops they replace."""
    return [
        Case(
            "layers.StableSoftmax",
            "layer",
            "softmax",
            SOFTMAX_SIZES,
            build_x,
            stable_class("layers", "StableSoftmax"),
            {"keras.layers.Softmax": lambda m: K(m).layers.Softmax()},
        ),
        Case(
            "layers.LogSoftmax",
            "layer",
            "softmax",
            SOFTMAX_SIZES,
            build_x,
            stable_class("layers", "LogSoftmax"),
            {
                "keras.layers.Activation('log_softmax')": lambda m: K(m).layers.Activation(
                    "log_softmax"
                )
            },
        ),
        Case(
            "layers.SafeNorm",
            "layer",
            "norm",
            NORM_SIZES,
            build_x,
            stable_class("layers", "SafeNorm"),
            {"keras.ops.norm": lambda m: lambda x: K(m).ops.norm(x, axis=-1)},
        ),
        Case(
            "layers.L2Normalize",
            "layer",
            "norm",
            NORM_SIZES,
            build_x,
            stable_class("layers", "L2Normalize"),
            {"keras.layers.UnitNormalization": lambda m: K(m).layers.UnitNormalization()},
        ),
    ]


def loss_cases():
    """The losses, against the Keras losses they replace."""
    return [
        Case(
            "losses.StableSoftmaxCrossEntropy",
            "loss",
            "cross_entropy",
            SOFTMAX_SIZES,
            build_dense_ce,
            stable_class("losses", "StableSoftmaxCrossEntropy"),
            {
                "keras.losses.CategoricalCrossentropy": lambda m: K(
                    m
                ).losses.CategoricalCrossentropy(from_logits=True)
            },
        ),
        Case(
            "losses.StableSparseSoftmaxCrossEntropy",
            "loss",
            "cross_entropy",
            SPARSE_SIZES,
            build_sparse_ce,
            stable_class("losses", "StableSparseSoftmaxCrossEntropy"),
            {
                "keras.losses.SparseCategoricalCrossentropy": lambda m: K(
                    m
                ).losses.SparseCategoricalCrossentropy(from_logits=True)
            },
        ),
        Case(
            "losses.StableSparseSoftmaxCrossEntropy(from_logits=False)",
            "loss",
            "cross_entropy",
            PROBABILITY_SIZES,
            build_sparse_ce,
            _on_softmax_output(
                stable_class("losses", "StableSparseSoftmaxCrossEntropy", from_logits=False)
            ),
            {
                "keras.losses.SparseCategoricalCrossentropy": _on_softmax_output(
                    lambda m: K(m).losses.SparseCategoricalCrossentropy(from_logits=False)
                )
            },
        ),
        Case(
            "losses.StableSigmoidCrossEntropy",
            "loss",
            "cross_entropy",
            ELEMENTWISE_SIZES,
            build_binary_ce,
            stable_class("losses", "StableSigmoidCrossEntropy"),
            {
                "keras.losses.BinaryCrossentropy": lambda m: K(m).losses.BinaryCrossentropy(
                    from_logits=True
                )
            },
        ),
        Case(
            "losses.MaskedMultiTaskDistance",
            "loss",
            "norm",
            TASK_SIZES,
            build_task,
            stable_class("losses", "MaskedMultiTaskDistance"),
            {
                "mean(keras.ops.norm(t - p))": lambda m: (
                    lambda t, p: K(m).ops.mean(K(m).ops.norm(t - p, axis=-1))
                )
            },
        ),
    ]
