"""L2Normalize: the shared layer harness, plus the normalisation checks."""

import dataclasses

import numpy as np

from keras_stable.layers import L2Normalize
from tests import backend_utils as bu
from tests import reference
from tests.layer_harness import LayerHarness
from tests.layer_harness import LayerSpec
from tests.layer_harness import PrecisionCase
from tests.layer_harness import default_edge_cases


def l2_normalize_reference(x, mask=None, axis=-1):
    if mask is not None:
        x = np.where(mask, x, 0.0)
    return reference.l2_normalize(x, axis=axis)


def _edge_cases():
    cases = default_edge_cases()
    # An infinite entry gives NaN in its vector (the contract: no direction).
    cases["neg_inf"] = dataclasses.replace(cases["neg_inf"], finite_value=False)
    return cases


SPEC = LayerSpec(
    layer_cls=L2Normalize,
    init_kwargs={"axis": -1},
    reference=l2_normalize_reference,
    edge_cases=_edge_cases(),
    precision_cases=[
        PrecisionCase([[300.0] * 4], [[0.5] * 4]),
        # Autocast would turn 1e5 into inf (and the output into NaN).
        PrecisionCase([[1e5, 0.0, 0.0, 0.0]], [[1.0, 0.0, 0.0, 0.0]], feeds=("float32",)),
    ],
)


class TestL2Normalize(LayerHarness):
    spec = SPEC


def test_zero_vector_maps_to_zero_with_zero_gradient():
    layer = L2Normalize()
    x = np.array([[0.0, 0.0], [3.0, 4.0]], "float32")
    value, (grad,) = bu.vjp_all_modes(
        lambda t: layer(t), [x], cotangent=np.array([[1.0, 2.0], [1.0, 0.0]])
    )
    np.testing.assert_array_equal(value[0], 0.0)
    np.testing.assert_array_equal(grad[0], 0.0)
    bu.assert_close(grad[1], [0.64 / 5, -0.48 / 5])
