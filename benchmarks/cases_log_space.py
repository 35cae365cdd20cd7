"""The benchmark rows of the log-space ops (`keras_stable.ops.log_space`).

Each op against Keras's own where it has one (`keras.ops.logaddexp`), else
against the formula users write by hand: `x * log(y)`, `log(1 - exp(x))`,
`log(exp(a) - exp(b))`, `log(ndtr(x))` through `erfc`, `log(expm1(x))`.
Not in the quick set.
"""

import math

from case import Case
from case import K
from inputs import ELEMENTWISE_SIZES


def _normal(shape, rng, scale=1.0):
    return (scale * rng.standard_normal(shape)).astype("float32")


def build_xlogy(shape, dtype, rng):
    return [
        rng.uniform(0.0, 1.0, shape).astype("float32"),
        rng.uniform(0.1, 2.0, shape).astype("float32"),
    ], 0


def build_pair(shape, dtype, rng):
    return [_normal(shape, rng, 3.0), _normal(shape, rng, 3.0)], 0


def build_ordered_pair(shape, dtype, rng):
    """`x1 > x2`, for `log(exp(x1) - exp(x2))`."""
    x2 = _normal(shape, rng, 3.0)
    return [x2 + rng.uniform(0.01, 5.0, shape).astype("float32"), x2], 0


def build_negative(shape, dtype, rng):
    return [-rng.uniform(0.01, 5.0, shape).astype("float32")], 0


def build_wide(shape, dtype, rng):
    return [_normal(shape, rng, 5.0)], 0


def build_positive(shape, dtype, rng):
    return [rng.uniform(0.01, 20.0, shape).astype("float32")], 0


def log_space_cases():
    """One row per log-space op."""
    return [
        Case(
            "xlogy",
            "op",
            "elementwise",
            ELEMENTWISE_SIZES,
            build_xlogy,
            lambda m: lambda x, y: m.ks.ops.xlogy(x, y),
            {"plain x * log(y)": lambda m: lambda x, y: x * K(m).ops.log(y)},
        ),
        Case(
            "logaddexp",
            "op",
            "elementwise",
            ELEMENTWISE_SIZES,
            build_pair,
            lambda m: lambda a, b: m.ks.ops.logaddexp(a, b),
            {"keras.ops.logaddexp": lambda m: lambda a, b: K(m).ops.logaddexp(a, b)},
        ),
        Case(
            "log1mexp",
            "op",
            "elementwise",
            ELEMENTWISE_SIZES,
            build_negative,
            lambda m: lambda x: m.ks.ops.log1mexp(x),
            {"plain log(1 - exp(x))": lambda m: lambda x: K(m).ops.log(1.0 - K(m).ops.exp(x))},
        ),
        Case(
            "logsubexp",
            "op",
            "elementwise",
            ELEMENTWISE_SIZES,
            build_ordered_pair,
            lambda m: lambda a, b: m.ks.ops.logsubexp(a, b),
            {
                "plain log(exp(a) - exp(b))": lambda m: (
                    lambda a, b: K(m).ops.log(K(m).ops.exp(a) - K(m).ops.exp(b))
                )
            },
        ),
        Case(
            "log_ndtr",
            "op",
            "elementwise",
            ELEMENTWISE_SIZES,
            build_wide,
            lambda m: lambda x: m.ks.ops.log_ndtr(x),
            {
                "plain log(erfc(-x / sqrt 2) / 2)": lambda m: (
                    lambda x: K(m).ops.log(0.5 * K(m).ops.erfc(-x / math.sqrt(2.0)))
                )
            },
        ),
        Case(
            "softplus_inverse",
            "op",
            "elementwise",
            ELEMENTWISE_SIZES,
            build_positive,
            lambda m: lambda x: m.ks.ops.softplus_inverse(x),
            {"plain log(expm1(x))": lambda m: lambda x: K(m).ops.log(K(m).ops.expm1(x))},
        ),
    ]
