"""The one driver of the spec harness: each check, for every public layer,
loss and metric that its kind has it for.

A class is described once by a spec (tests/specs/layers.py, blocks.py,
losses.py; tests/specs/classes.py lists them all); the spec's kind decides
which checks apply (each harness module's docstring lists its checks). A
check a kind does not have is not collected for it; a check whose contract
is tested elsewhere for one class is a skip that names where.
"""

import pytest

from tests.specs.classes import SPECS
from tests.specs.classes import kind_of


def _specs_with(check):
    return [pytest.param(s, id=s.id) for s in SPECS if hasattr(kind_of(s), f"check_{check}")]


def _policies():
    return [pytest.param(s, p, id=f"{s.id}-{p}") for s in SPECS for p in kind_of(s).POLICIES]


def _edge_cases():
    params = []
    for spec in SPECS:
        for name, case in kind_of(spec).edge_cases(spec).items():
            known_bug = getattr(case, "known_bug", None)
            marks = (pytest.mark.xfail(strict=True, reason=known_bug),) if known_bug else ()
            params.append(pytest.param(spec, name, id=f"{spec.id}-{name}", marks=marks))
    return params


def _mask_checks():
    return [
        pytest.param(spec, check, id=f"{spec.id}-{check.__name__[len('check_') :]}")
        for spec in SPECS
        for check in kind_of(spec).mask_checks(spec)
    ]


@pytest.mark.parametrize("spec", _specs_with("config_round_trip"))
def test_config_round_trip(spec):
    kind_of(spec).check_config_round_trip(spec)


@pytest.mark.parametrize("spec", _specs_with("keras_save_load"))
def test_keras_save_load(spec, tmp_path):
    kind_of(spec).check_keras_save_load(spec, tmp_path)


@pytest.mark.parametrize("spec", _specs_with("symbolic_and_eager"))
def test_symbolic_and_eager(spec):
    kind_of(spec).check_symbolic_and_eager(spec)


@pytest.mark.parametrize("spec", _specs_with("compute_output_shape"))
def test_compute_output_shape(spec):
    kind_of(spec).check_compute_output_shape(spec)


@pytest.mark.parametrize("spec", _specs_with("fit_step"))
def test_fit_step(spec):
    kind_of(spec).check_fit_step(spec)


@pytest.mark.parametrize("spec, policy", _policies())
def test_precision_sweep(spec, policy):
    kind_of(spec).check_precision_sweep(spec, policy)


@pytest.mark.parametrize("spec, name", _edge_cases())
def test_edge_case(spec, name):
    kind_of(spec).check_edge_case(spec, name)


@pytest.mark.parametrize("spec, check", _mask_checks())
def test_keras_mask(spec, check):
    check(spec)


@pytest.mark.parametrize("spec", _specs_with("build"))
def test_build(spec):
    kind_of(spec).check_build(spec)


@pytest.mark.parametrize("spec", _specs_with("multiple_axes"))
def test_multiple_axes(spec):
    kind_of(spec).check_multiple_axes(spec)


@pytest.mark.parametrize("spec", _specs_with("bad_axis"))
def test_bad_axis(spec):
    kind_of(spec).check_bad_axis(spec)
