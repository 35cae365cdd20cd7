"""LogSoftmax: the shared layer harness, plus the log-softmax-specific checks."""

import dataclasses

import numpy as np

from keras_stable.layers import LogSoftmax
from tests import backend_utils as bu
from tests import reference
from tests.layer_harness import LayerHarness
from tests.layer_harness import LayerSpec
from tests.layer_harness import PrecisionCase
from tests.layer_harness import default_edge_cases


def log_softmax_reference(x, mask=None, axis=-1):
    return reference.log_softmax(x, axis=axis, mask=mask)


def _edge_cases():
    cases = default_edge_cases()
    # The contract: masked and -inf entries give -inf (with a zero gradient).
    for name in ("neg_inf", "masked"):
        cases[name] = dataclasses.replace(cases[name], finite_value=False)
    return cases


SPEC = LayerSpec(
    layer_cls=LogSoftmax,
    init_kwargs={"axis": -1},
    reference=log_softmax_reference,
    edge_cases=_edge_cases(),
    precision_cases=[
        PrecisionCase([[12.0, 11.0, 0.0]], log_softmax_reference(np.array([[12.0, 11.0, 0.0]]))),
        PrecisionCase([[30.0, 0.0]], [[0.0, -30.0]]),
        # Autocast would turn these into inf (and NaN) under float16.
        PrecisionCase(
            [[1e5, 99990.0]], log_softmax_reference(np.array([[1e5, 99990.0]])), feeds=("float32",)
        ),
    ],
)


class TestLogSoftmax(LayerHarness):
    spec = SPEC


def test_fully_masked_row_gives_neg_inf_and_zero_gradient():
    layer = LogSoftmax()
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], "float32")
    mask = np.array([[True, True, False], [False] * 3])
    value, (grad,) = bu.vjp_all_modes(
        lambda t, m: layer(t, mask=m), [x, mask], cotangent=np.ones((2, 3))
    )
    np.testing.assert_array_equal(value[1], -np.inf)
    np.testing.assert_array_equal(grad[1], 0.0)
    # Finite entries: the gradient of the log-softmax over [1, 2].
    p = np.exp(value[0, :2])
    bu.assert_close(grad[0, :2], 1.0 - 2.0 * p)
