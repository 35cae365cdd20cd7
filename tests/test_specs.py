"""The specs in tests/specs/ are complete: every public op has exactly one
spec, and each spec says where its float64 behaviour is checked; every
public class has a spec for the harness. Every
derived test (tests/specs/ops.py's docstring lists them) then covers every
op, so a new op cannot be added without its tests, nor an op removed from
the public contract without its spec."""

import pytest

from keras_stable import ops
from tests.ops.cases import edge_cases
from tests.ops.cases import smooth_cases
from tests.specs.ops import ALL
from tests.specs.ops import OPS
from tests.specs.ops import VARIANTS
from tests.specs.ops import CoreGrid


def test_every_public_op_has_one_spec():
    assert sorted(ops.__all__) == sorted(OPS), (
        "add an OpSpec in tests/specs/ops.py for each public op (and remove the spec of a "
        "removed one)"
    )


@pytest.mark.parametrize("name", sorted(OPS))
def test_each_op_documents_its_numerics_with_an_example(name):
    doc = getattr(ops, name).__doc__
    assert "Numerical stability:" in doc, name
    assert ">>>" in doc, name


@pytest.mark.parametrize("name", sorted(OPS))
def test_each_op_has_a_float64_check(name):
    """A float64 case (op, reference, float64 arguments), or where it is
    checked instead: the core ops' edge grid, which must then hold a case of
    that op, or a documented contract."""
    spec = OPS[name]
    if isinstance(spec.float64, dict):
        assert spec.float64, name
        for case in spec.float64.values():
            op, reference, args = case
            assert callable(op) and callable(reference) and args, name
    elif isinstance(spec.float64, CoreGrid):
        prefix = spec.float64.prefix or name
        names = [case.name for case in edge_cases() + smooth_cases()]
        assert any(n == prefix or n.startswith(prefix + "_") for n in names), (
            f"{name} is said to be checked on the edge grid but tests/ops/cases.py has no case"
        )
    else:
        assert isinstance(spec.float64, str) and "contract" in spec.float64, (
            f"{name}: give float64 cases or the reason they do not apply"
        )


@pytest.mark.parametrize("name", sorted(ALL))
def test_each_spec_is_well_formed(name):
    spec = ALL[name]
    assert spec.wrt and all(0 <= i < len(spec.args) for i in spec.wrt), name
    assert 0 <= spec.batch_axis, name
    if name in VARIANTS:
        assert name.split("(")[0] in OPS, f"variant {name} names no op"
        assert spec.float64 is None and spec.axes is None, "variants only rerun properties"


def test_every_public_class_has_a_spec():
    """Every layer, loss and metric of the public API has at least one spec
    in tests/specs/ (so tests/test_harness.py runs its kind's checks)."""
    from keras_stable import layers
    from keras_stable import losses
    from keras_stable import metrics
    from tests.specs.classes import SPECS

    covered = {spec.cls for spec in SPECS}
    for module in (layers, losses, metrics):
        missing = [n for n in module.__all__ if getattr(module, n) not in covered]
        assert not missing, f"{module.__name__}: add a spec in tests/specs/ for {missing}"


def test_spec_ids_are_unique():
    from tests.specs.classes import SPECS

    ids = [spec.id for spec in SPECS]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
