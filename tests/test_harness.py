"""The shared harness (tests/loss_harness.py), run for every loss and metric.

Adding a loss or a metric means adding its `Spec` to `tests/loss_harness.py`;
every check below then runs for it.
"""

import pytest

from tests import loss_harness as h

SPECS = h.ALL_SPECS


@pytest.mark.parametrize("spec", SPECS, ids=repr)
def test_config_round_trip(spec):
    h.check_config_round_trip(spec)


@pytest.mark.parametrize("spec", SPECS, ids=repr)
def test_save_load(spec, tmp_path):
    h.check_save_load(spec, tmp_path)


@pytest.mark.parametrize("spec", SPECS, ids=repr)
def test_fit_step(spec):
    h.check_fit_step(spec)


@pytest.mark.parametrize("policy", h.POLICIES)
@pytest.mark.parametrize("spec", SPECS, ids=repr)
def test_precision(spec, policy):
    h.check_precision(spec, policy)


@pytest.mark.parametrize("spec", SPECS, ids=repr)
def test_edge_grid(spec):
    h.check_edge_grid(spec)


@pytest.mark.parametrize("spec", SPECS, ids=repr)
def test_keras_mask(spec):
    h.check_keras_mask(spec)
