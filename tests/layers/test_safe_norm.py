"""SafeNorm: the shared layer harness, plus the norm-specific checks."""

import dataclasses

import numpy as np
import pytest

from keras_stable.layers import SafeNorm
from tests import backend_utils as bu
from tests import reference
from tests.layer_harness import LayerHarness
from tests.layer_harness import LayerSpec
from tests.layer_harness import PrecisionCase
from tests.layer_harness import default_edge_cases


def safe_norm_reference(x, mask=None, axis=-1, keepdims=False):
    if mask is not None:
        x = np.where(mask, x, 0.0)
    return reference.safe_norm(x, axis=axis, keepdims=keepdims)


def _edge_cases():
    cases = default_edge_cases()
    # An infinite entry gives an infinite norm (the contract).
    cases["neg_inf"] = dataclasses.replace(cases["neg_inf"], finite_value=False)
    return cases


SPEC = LayerSpec(
    layer_cls=SafeNorm,
    init_kwargs={"axis": -1, "keepdims": False},
    reference=safe_norm_reference,
    reduces_axis=True,
    edge_cases=_edge_cases(),
    precision_cases=[
        PrecisionCase([[300.0] * 4], [600.0]),
        # The float16 sum of squares overflows; the norm does not.
        PrecisionCase([[3e4, 3e4, 0.0, 0.0]], [3e4 * np.sqrt(2.0)]),
    ],
)


class TestSafeNorm(LayerHarness):
    spec = SPEC


def test_keepdims():
    layer = SafeNorm(axis=1, keepdims=True)
    restored = SafeNorm.from_config(layer.get_config())
    assert restored.keepdims is True and restored.axis == 1
    x = np.random.default_rng(0).normal(size=(2, 3, 4)).astype("float32")
    out = restored(x)
    assert tuple(out.shape) == restored.compute_output_shape((2, 3, 4)) == (2, 1, 4)
    bu.assert_close(bu.to_numpy(out), reference.safe_norm(x, axis=1, keepdims=True))
    # The last axis reduced with keepdims: a (batch, time) mask still leads.
    steps = np.array([[True, True, False], [False] * 3])
    assert SafeNorm(keepdims=True).compute_mask(x, steps) is steps
    # The masked axis reduced: consumed.
    assert restored.compute_mask(x, steps) is None


def test_zero_vector_value_and_gradient_are_exactly_zero():
    layer = SafeNorm()
    x = np.array([[0.0, 0.0, 0.0], [3.0, 4.0, 0.0]], "float32")
    value, (grad,) = bu.vjp_all_modes(lambda t: layer(t), [x])
    np.testing.assert_array_equal(value, [0.0, 5.0])
    np.testing.assert_array_equal(grad[0], 0.0)
    bu.assert_close(grad[1], [0.6, 0.8, 0.0])


def test_bad_keepdims():
    with pytest.raises(ValueError, match="keepdims"):
        SafeNorm(keepdims=1)
