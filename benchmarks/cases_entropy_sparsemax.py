"""The benchmark rows of `ops.entropy` (against the hand-written
`-sum(softmax(x) * log_softmax(x))`) and `ops.sparsemax` (against
`keras.ops.sparsemax`, whose threshold is wrong in Keras 3.15.1: the
timing compares the work, not the numbers)."""

from case import Case
from case import K
from inputs import SOFTMAX_SIZES
from inputs import build_x


def _naive_entropy(m):
    ops = K(m).ops
    return lambda x: -ops.sum(ops.softmax(x) * ops.log_softmax(x), axis=-1)


def entropy_sparsemax_cases():
    """entropy and sparsemax, one op row each."""
    return [
        Case(
            "entropy",
            "op",
            "softmax",
            SOFTMAX_SIZES,
            build_x,
            lambda m: lambda x: m.ks.ops.entropy(x),
            {"-sum(softmax(x) * log_softmax(x))": _naive_entropy},
        ),
        Case(
            "sparsemax",
            "op",
            "softmax",
            SOFTMAX_SIZES,
            build_x,
            lambda m: lambda x: m.ks.ops.sparsemax(x),
            {"keras.ops.sparsemax": lambda m: lambda x: K(m).ops.sparsemax(x)},
        ),
    ]
