"""The spec harness (tests/harness/losses.py), run for every loss and metric.

Adding a loss or a metric means adding its `LossSpec` to
`tests/harness/loss_specs.py`; every check below then runs for it.
"""

import pytest

from tests.harness import losses as h
from tests.harness.common import MIXED_POLICIES
from tests.harness.common import policy_params
from tests.harness.common import spec_params
from tests.harness.loss_specs import ALL_SPECS

SPECS = spec_params(ALL_SPECS)


@pytest.mark.parametrize("spec", SPECS)
def test_config_round_trip(spec):
    h.check_config_round_trip(spec)


@pytest.mark.parametrize("spec", SPECS)
def test_save_load(spec, tmp_path):
    h.check_save_load(spec, tmp_path)


@pytest.mark.parametrize("spec", SPECS)
def test_fit_step(spec):
    h.check_fit_step(spec)


@pytest.mark.parametrize("spec, policy", policy_params(ALL_SPECS, MIXED_POLICIES))
def test_precision(spec, policy):
    h.check_precision(spec, policy)


@pytest.mark.parametrize("spec", SPECS)
def test_edge_grid(spec):
    h.check_edge_grid(spec)


@pytest.mark.parametrize("spec", SPECS)
def test_keras_mask(spec):
    h.check_keras_mask(spec)
