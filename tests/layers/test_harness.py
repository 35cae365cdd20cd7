"""The spec harness (tests/harness/layers.py), run for every layer.

Adding a layer means adding its `LayerSpec` to `tests/harness/layer_specs.py`;
every check below then runs for it.
"""

import pytest

from tests.harness import layers as h
from tests.harness.common import POLICIES
from tests.harness.common import case_params
from tests.harness.common import policy_params
from tests.harness.common import spec_params
from tests.harness.layer_specs import LAYER_SPECS

SPECS = spec_params(LAYER_SPECS)
MASKING_SPECS = spec_params(LAYER_SPECS, where=lambda s: s.supports_masking)


@pytest.mark.parametrize("spec", SPECS)
def test_config_round_trip(spec):
    h.check_config_round_trip(spec)


@pytest.mark.parametrize("spec", SPECS)
def test_keras_save_load(spec, tmp_path):
    h.check_keras_save_load(spec, tmp_path)


@pytest.mark.parametrize("spec", SPECS)
def test_symbolic_and_eager(spec):
    h.check_symbolic_and_eager(spec)


@pytest.mark.parametrize("spec", SPECS)
def test_compute_output_shape(spec):
    h.check_compute_output_shape(spec)


@pytest.mark.parametrize("spec", SPECS)
def test_fit_step(spec):
    h.check_fit_step(spec)


@pytest.mark.parametrize("spec, policy", policy_params(LAYER_SPECS, POLICIES))
def test_precision_sweep(spec, policy):
    h.check_precision_sweep(spec, policy)


@pytest.mark.parametrize("spec, name", case_params(LAYER_SPECS, lambda s: s.edge_cases))
def test_edge_case(spec, name):
    h.check_edge_case(spec, name)


@pytest.mark.parametrize("check", h.MASK_CHECKS, ids=lambda c: c.__name__[len("check_") :])
@pytest.mark.parametrize("spec", MASKING_SPECS)
def test_masks(spec, check):
    check(spec)


@pytest.mark.parametrize("spec", SPECS)
def test_build(spec):
    h.check_build(spec)


@pytest.mark.parametrize("spec", SPECS)
def test_multiple_axes(spec):
    h.check_multiple_axes(spec)


@pytest.mark.parametrize("spec", SPECS)
def test_bad_axis(spec):
    h.check_bad_axis(spec)
