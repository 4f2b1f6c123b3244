"""Capture keys on the CPU: a keyed unit becomes one unit per key, `--unit` picks them all by the
unit's name, and the report says per key whether it ran graphed."""

from __future__ import annotations

import json

import pytest

from graphready.findings import Severity
from graphready.harness import Unit
from graphready.harness.command import _select, build_report
from graphready.harness.isolation import UnitInfo
from graphready.harness.keys import key_of
from graphready.harness.pytest_plugin import check_graph_unit
from graphready.harness.result import UnitResult, make_finding
from graphready.harness.target import load_units
from graphready.harness.unit import callable_location

TARGETS = "tests/harness/harness_targets.py"


def test_a_keyed_unit_is_checked_as_one_unit_per_key():
    units = load_units(f"{TARGETS}:keyed_units")
    assert [u.name for u in units] == ["pad[1]", "pad[8]", "plain"]
    assert [tuple(u.make_inputs(3)[0].shape) for u in units[:2]] == [(1,), (8,)]
    assert float(units[1].make_inputs(3)[0][0]) == 3.0
    assert all(u.keys == () and u.origin == f"{TARGETS}:keyed_units" for u in units)
    path, _ = callable_location(units[0].make_inputs)  # GD501 on inputs still points at the user's function
    assert path.endswith("harness_targets.py")


def test_a_unit_without_keys_is_itself():
    unit = Unit("one", abs, lambda seed: ())
    assert unit.expand() == [unit]


@pytest.mark.parametrize("keys", [(1, "1"), ("a[0]",), ("",)])
def test_keys_must_print_distinct_and_plain(keys):
    with pytest.raises(ValueError, match="keys must print distinct"):
        Unit("u", abs, lambda seed, key: (), keys=keys)


def test_loop_must_be_callable():
    with pytest.raises(TypeError, match="loop must be callable"):
        Unit("u", abs, lambda seed: (), loop=3)


def test_a_keyed_unit_object_is_checked_per_key_not_whole():
    with pytest.raises(ValueError, match="check each of unit.expand"):
        check_graph_unit(Unit("u", abs, lambda seed, key: (), keys=(1, 2)))


def _info(name: str) -> UnitInfo:
    return UnitInfo(name=name, device=None, path="m.py", line=1)


def test_unit_option_picks_every_key_of_a_unit_or_one_key():
    units = [_info("pad[1]"), _info("pad[8]"), _info("plain")]
    assert [u.name for u in _select(units, ["pad"])] == ["pad[1]", "pad[8]"]
    assert [u.name for u in _select(units, ["pad[8]", "plain"])] == ["pad[8]", "plain"]


def test_key_names_parse_back():
    assert key_of("decode[bs=8]") == ("decode", "bs=8")
    assert key_of("decode") == (None, None)
    assert key_of("odd[]") == (None, None)


def _keyed_results() -> list[UnitResult]:
    graphed = UnitResult(name="pad[1]", capture="ok", eager_ms=1.0, replay_ms=0.5)
    failed = UnitResult(name="pad[8]", capture="failed")
    failed.findings.append(make_finding("GD201", "capture failed", unit="pad[8]", path="m.py", line=3))
    crashed = UnitResult(name="pad[16]", error="the worker died")
    plain = UnitResult(name="plain", capture="ok", eager_ms=1.0, replay_ms=0.5)
    return [graphed, failed, crashed, plain]


def test_the_report_says_which_keys_ran_graphed(tmp_path):
    doc = json.loads(build_report(_keyed_results(), Severity.WARNING, "json", tmp_path))
    assert doc["summary"]["capture_keys"] == {"pad": {"1": "graphed", "8": "capture failed", "16": "not checked"}}
    rows = {row["name"]: row for row in doc["units"]}
    assert (rows["pad[8]"]["base_unit"], rows["pad[8]"]["key"], rows["pad[8]"]["status"]) == ("pad", "8", "fail")
    assert "key" not in rows["plain"]
    text = build_report(_keyed_results(), Severity.WARNING, "text", tmp_path)
    assert "capture keys of pad: graphed for 1; capture failed for 8; not checked for 16" in text
