"""`graphready report --merged`: the JSON of `check --shard K/N` runs becomes one document and one verdict."""

from __future__ import annotations

import json

from graphready.cli import main
from graphready.findings import Severity
from graphready.harness.command import build_report, shard_units
from graphready.harness.isolation import UnitInfo
from graphready.harness.result import UnitResult, make_finding

LISTED = [f"layer{i}" for i in range(5)] + ["step"]


def _shard(tmp_path, index: int, count: int, failing: str | None = None, listed=LISTED):
    units = shard_units([UnitInfo(n, None, "m.py", 1) for n in listed], (index, count))
    results = []
    for unit in units:
        result = UnitResult(name=unit.name, device="cuda:0", capture="ok", eager_ms=2.0, replay_ms=1.0,
                            phase_seconds={"capture": 0.5}, worker=1)
        if unit.name == failing:
            result.capture = "failed"
            result.findings.append(make_finding("GD201", "capture failed", unit=unit.name, path="m.py", line=3))
        results.append(result)
    run = {"target": "dsv4", "factory_kwargs": {"preset": "flash"}, "listed": listed,
           "shard": {"index": index, "count": count}, "wall_s": 10.0 * index,
           "workers": [{"id": 1, "gpu": None, "load_s": 60.0, "units": [u.name for u in units], "end": "finished"}]}
    path = tmp_path / f"shard-{index}-of-{count}.json"
    path.write_text(build_report(results, Severity.WARNING, "json", tmp_path, run=run))
    return path


def test_every_shard_merges_into_one_passing_document_in_listing_order(tmp_path, capsys):
    paths = [_shard(tmp_path, k, 3) for k in (3, 1, 2)]
    out = tmp_path / "merged.json"
    assert main(["report", *map(str, paths), "--merged", str(out), "--markdown", str(tmp_path / "r.md")]) == 0
    doc = json.loads(out.read_text())
    assert [u["name"] for u in doc["units"]] == LISTED
    assert doc["run"]["shards"] == 3 and len(doc["run"]["workers"]) == 3 and doc["run"]["wall_s"] == 30.0
    assert {w["shard"] for w in doc["run"]["workers"]} == {1, 2, 3}
    assert "6 unit(s), 6 pass: passed" in capsys.readouterr().err
    assert "layer4" in (tmp_path / "r.md").read_text()


def test_a_failing_unit_in_one_shard_fails_the_merged_verdict(tmp_path, capsys):
    paths = [_shard(tmp_path, 1, 2), _shard(tmp_path, 2, 2, failing="layer3")]
    out = tmp_path / "merged.json"
    assert main(["report", *map(str, paths), "--merged", str(out)]) == 1
    doc = json.loads(out.read_text())
    assert doc["summary"]["failing"] == 1 and doc["findings"][0]["unit"] == "layer3"
    assert "5 pass, 1 fail: FAILED" in capsys.readouterr().err


def test_missing_duplicate_and_mismatched_shards_are_usage_errors(tmp_path, capsys):
    one, two = _shard(tmp_path, 1, 3), _shard(tmp_path, 2, 3)
    cases = [
        ([one, two], "shard 3/3 of dsv4 missing"),
        ([one, one, two], "shard 1/3 of dsv4 given twice"),
        ([one, _shard(tmp_path, 2, 2)], "different splits"),
        ([one, two, _shard(tmp_path, 3, 3, listed=LISTED[:-1])], "listed different units"),
    ]
    for paths, message in cases:
        assert main(["report", *map(str, paths), "--merged", str(tmp_path / "m.json")]) == 2
        assert message in capsys.readouterr().err
