"""Target specs: `pkg.mod:factory` and `file.py:factory`, validated, with clear errors."""

from __future__ import annotations

import pytest

from graphready.errors import UsageError
from graphready.harness import Unit
from graphready.harness.target import TargetError, load_units, select_unit, split_spec
from graphready.harness.unit import callable_location

TARGETS = "tests/harness/harness_targets.py"


def test_file_spec_loads_units_and_records_origin():
    units = load_units(f"{TARGETS}:two_units")
    assert [u.name for u in units] == ["double", "triple"]
    assert all(u.origin == f"{TARGETS}:two_units" for u in units)
    assert units[1].atol == 1e-6


def test_module_spec_loads_units(monkeypatch, tmp_path):
    (tmp_path / "my_units.py").write_text(
        "from graphready.harness import Unit\n"
        "def factory():\n"
        "    return [Unit('one', abs, lambda seed: ())]\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert [u.name for u in load_units("my_units:factory")] == ["one"]


def test_builtin_dsv4_name_resolves_to_the_packaged_factory():
    assert split_spec("dsv4") == ("graphready.harness.targets.dsv4", "factory")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no_colon", "must look like"),
        ("missing_module_xyz:f", "cannot import"),
        (f"{TARGETS}:nope", "has no attribute"),
        (f"{TARGETS}:not_units", "expected Unit"),
        (f"{TARGETS}:duplicate_units", "two units named"),
        ("tests/harness/does_not_exist.py:f", "does not exist"),
    ],
)
def test_bad_specs_raise_usage_errors(spec, message):
    with pytest.raises(TargetError, match=message):
        load_units(spec)
    assert issubclass(TargetError, UsageError)


def test_select_unit_lists_the_available_names():
    units = load_units(f"{TARGETS}:two_units")
    assert select_unit(units, "triple").name == "triple"
    with pytest.raises(TargetError, match="available: double, triple"):
        select_unit(units, "quadruple")


def test_unit_validates_its_fields():
    with pytest.raises(TypeError):
        Unit("", abs, lambda seed: ())
    with pytest.raises(TypeError):
        Unit("x", "not callable", lambda seed: ())
    with pytest.raises(ValueError):
        Unit("x", abs, lambda seed: (), atol=-1.0)


class _Layer:
    def __call__(self, x):
        return x


def test_callable_location_follows_objects_to_their_call_method():
    path, line = callable_location(_Layer())
    assert path.endswith("test_harness_target.py")
    assert line == _Layer.__call__.__code__.co_firstlineno


def test_a_factory_that_takes_only_gets_the_workers_unit_names_and_others_do_not():
    assert [u.name for u in load_units(f"{TARGETS}:selective_units")] == ["a", "b", "c"]
    assert [u.name for u in load_units(f"{TARGETS}:selective_units", only=["c", "a"])] == ["a", "c"]
    assert [u.name for u in load_units(f"{TARGETS}:two_units", only=["double"])] == ["double", "triple"]
