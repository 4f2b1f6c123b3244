"""Worker isolation: a hang or a crash in one unit becomes that unit's finding; listing runs in a worker."""

from __future__ import annotations

import json
import os

import pytest

from graphready.harness.isolation import UnitInfo, WorkerOptions, check_isolated, list_units
from graphready.harness.result import UnitResult
from graphready.harness.scheduler import assign_gpus, run_units

TARGETS = "tests/harness/harness_targets.py"
ROOT = os.getcwd()


def _options(timeout: float = 60.0) -> WorkerOptions:
    return WorkerOptions(timeout_s=timeout, root=ROOT)


def test_listing_runs_the_factory_in_a_worker():
    units = list_units(f"{TARGETS}:two_units", _options())
    assert [u.name for u in units] == ["double", "triple"]
    assert units[0].path == "tests/harness/harness_targets.py"
    assert units[0].line > 0 and units[0].device is None


def test_listing_reports_a_raising_factory_as_a_usage_error():
    from graphready.harness.target import TargetError

    with pytest.raises(TargetError, match="checkpoint missing"):
        list_units(f"{TARGETS}:raising_factory", _options())


def test_a_hanging_unit_is_killed_and_reported():
    info = UnitInfo("sleeper", None, "tests/harness/harness_targets.py", 22)
    result = check_isolated(f"{TARGETS}:hanging_units", info, 0, _options(timeout=15))
    assert result.status() == "error"
    assert "hung" in result.error and "15s" in result.error
    [finding] = result.findings
    assert finding.rule == "GD201" and finding.unit == "sleeper"
    assert (finding.path, finding.line) == ("tests/harness/harness_targets.py", 22)


def test_a_crashing_unit_is_reported_with_its_signal():
    info = UnitInfo("crasher", None, "tests/harness/harness_targets.py", 30)
    result = check_isolated(f"{TARGETS}:crashing_units", info, 0, _options())
    assert result.status() == "error"
    assert "SIGABRT" in result.error
    assert result.findings[0].rule == "GD201"


def test_the_run_goes_on_after_a_unit_dies():
    units = [UnitInfo("crasher", None, "tests/harness/harness_targets.py", 30)] * 2
    results = run_units(f"{TARGETS}:crashing_units", units, _options(), gpus=1, jobs=2)
    assert [r.status() for r in results] == ["error", "error"]


def test_units_spread_round_robin_and_pinned_units_keep_their_device():
    units = [
        UnitInfo("a", None, "p", 1),
        UnitInfo("b", "cuda:1", "p", 1),
        UnitInfo("c", None, "p", 1),
        UnitInfo("d", None, "p", 1),
    ]
    assert assign_gpus(units, 2) == [0, 1, 1, 0]
    assert assign_gpus(units, 1) == [0, 1, 0, 0]


def test_unit_result_round_trips_through_json():
    from graphready.harness.result import make_finding

    result = UnitResult(name="u", device="cuda:0", capture="ok", eager_ms=2.0, replay_ms=0.5, kernels=7, graph_kernels=7)
    result.findings.append(make_finding("GD402", "big", unit="u", path="a.py", line=3))
    back = UnitResult.from_json(json.loads(json.dumps(result.to_json())))
    assert back.unit_row() == result.unit_row()
    assert back.findings[0].rule == "GD402" and back.findings[0].name == "capture-alloc"
    assert back.speedup == 4.0
