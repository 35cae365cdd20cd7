"""One `LayerSpec` per layer class: constructor arguments, the float64
reference (`tests/reference.py`), the edge cases whose contract differs from
the default grid, and exact half-precision checks. Every check of
`tests/harness/layers.py` runs for each (`tests/test_harness.py`)."""

import dataclasses

import numpy as np

from keras_stable.layers import L2Normalize
from keras_stable.layers import LogSoftmax
from keras_stable.layers import SafeNorm
from keras_stable.layers import StableSoftmax
from keras_stable.layers import StableSparsemax
from tests import reference
from tests import reference_log_space
from tests.harness.layers import LayerSpec
from tests.harness.layers import PrecisionCase
from tests.harness.layers import default_edge_cases


def _with_non_finite_values(*names):
    """The default grid, where the contract says `names` give non-finite
    values (their gradients stay finite)."""
    cases = default_edge_cases()
    for name in names:
        cases[name] = dataclasses.replace(cases[name], finite_value=False)
    return cases


def softmax_reference(x, mask=None, axis=-1):
    return reference.softmax(x, axis=axis, mask=mask)


def log_softmax_reference(x, mask=None, axis=-1):
    return reference.log_softmax(x, axis=axis, mask=mask)


def sparsemax_reference(x, mask=None, axis=-1):
    return reference_log_space.sparsemax(x, axis=axis, mask=mask)


def l2_normalize_reference(x, mask=None, axis=-1):
    if mask is not None:
        x = np.where(mask, x, 0.0)
    return reference.l2_normalize(x, axis=axis)


def safe_norm_reference(x, mask=None, axis=-1, keepdims=False):
    if mask is not None:
        x = np.where(mask, x, 0.0)
    return reference.safe_norm(x, axis=axis, keepdims=keepdims)


LAYER_SPECS = [
    LayerSpec(
        id="stable_softmax",
        cls=StableSoftmax,
        kwargs={"axis": -1},
        reference=softmax_reference,
        precision_cases=[
            PrecisionCase([[12.0, 11.0, 0.0]], softmax_reference(np.array([[12.0, 11.0, 0.0]]))),
            # Autocast would turn these into inf (and NaN) under float16.
            PrecisionCase(
                [[1e5, 99990.0]], softmax_reference(np.array([[1e5, 99990.0]])), feeds=("float32",)
            ),
        ],
    ),
    LayerSpec(
        id="stable_sparsemax",
        cls=StableSparsemax,
        kwargs={"axis": -1},
        reference=sparsemax_reference,
        precision_cases=[
            PrecisionCase([[0.0, 0.5, 1.0]], [[0.0, 0.25, 0.75]]),
            # Exact in bfloat16 too (299.5 would round to 300 there).
            PrecisionCase([[12.0, 11.5, 0.0]], [[0.75, 0.25, 0.0]]),
            # Autocast would turn these into inf (and NaN) under float16.
            PrecisionCase(
                [[1e5, 99999.5]],
                sparsemax_reference(np.array([[1e5, 99999.5]])),
                feeds=("float32",),
            ),
        ],
    ),
    LayerSpec(
        id="log_softmax",
        cls=LogSoftmax,
        kwargs={"axis": -1},
        reference=log_softmax_reference,
        # The contract: masked and -inf entries give -inf (with a zero gradient).
        edge_cases=_with_non_finite_values("neg_inf", "masked"),
        precision_cases=[
            PrecisionCase(
                [[12.0, 11.0, 0.0]], log_softmax_reference(np.array([[12.0, 11.0, 0.0]]))
            ),
            PrecisionCase([[30.0, 0.0]], [[0.0, -30.0]]),
            # Autocast would turn these into inf (and NaN) under float16.
            PrecisionCase(
                [[1e5, 99990.0]],
                log_softmax_reference(np.array([[1e5, 99990.0]])),
                feeds=("float32",),
            ),
        ],
    ),
    LayerSpec(
        id="l2_normalize",
        cls=L2Normalize,
        kwargs={"axis": -1},
        reference=l2_normalize_reference,
        # An infinite entry gives NaN in its vector (the contract: no direction).
        edge_cases=_with_non_finite_values("neg_inf"),
        precision_cases=[
            PrecisionCase([[300.0] * 4], [[0.5] * 4]),
            # Autocast would turn 1e5 into inf (and the output into NaN).
            PrecisionCase([[1e5, 0.0, 0.0, 0.0]], [[1.0, 0.0, 0.0, 0.0]], feeds=("float32",)),
        ],
    ),
    LayerSpec(
        id="safe_norm",
        cls=SafeNorm,
        kwargs={"axis": -1, "keepdims": False},
        reference=safe_norm_reference,
        reduces_axis=True,
        # An infinite entry gives an infinite norm (the contract).
        edge_cases=_with_non_finite_values("neg_inf"),
        precision_cases=[
            PrecisionCase([[300.0] * 4], [600.0]),
            # The float16 sum of squares overflows; the norm does not.
            PrecisionCase([[3e4, 3e4, 0.0, 0.0]], [3e4 * np.sqrt(2.0)]),
        ],
    ),
]
