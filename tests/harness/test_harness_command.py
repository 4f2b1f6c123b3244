"""`graphready check` on the CPU side: usage errors exit 2, the JSON contract, units rows."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from graphready.findings import Severity
from graphready.harness.command import _validate, add_arguments, build_report, check_settings
from graphready.harness.result import UnitResult, make_finding

TARGETS = "tests/harness/harness_targets.py"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "graphready.cli", "check", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing_module_xyz:factory"], "cannot import"),
        ([f"{TARGETS}:two_units", "--unit", "nope"], "no unit named 'nope'"),
        ([f"{TARGETS}:two_units", "--steps", "0"], "--steps"),
        ([f"{TARGETS}:two_units", "--preset", "tiny"], "only to the built-in dsv4"),
        ([f"{TARGETS}:two_units", "--mtp"], "only to the built-in dsv4"),
        (["dsv4", "--checkpoint", "/no/such/dir"], "no such directory"),
        (["dsv4", "--preset", "pro-99L"], "unknown preset 'pro-99L'"),
        (["dsv4", "--preset", "flash", "--checkpoint", "."], "not both"),
        ([f"{TARGETS}:two_units", "--shard", "3/2"], "--shard must be K/N"),
        ([f"{TARGETS}:two_units", "--load-timeout", "0"], "--load-timeout"),
        ([f"{TARGETS}:two_units", "--time-limit", "-5"], "--time-limit must be positive"),
    ],
)
def test_usage_errors_exit_2_with_a_message(args, message):
    proc = _cli(*args)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_mtp_reaches_the_dsv4_factory_and_the_recorded_settings():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["dsv4", "--preset", "tiny", "--mtp"])
    fail_on, factory_kwargs = _validate(args)
    assert json.loads(factory_kwargs) == {"preset": "tiny", "mtp": True}
    assert check_settings(args, fail_on, factory_kwargs)["mtp"] is True
    assert "mtp" not in json.loads(_validate(parser.parse_args(["dsv4"]))[1])


def test_dsv4_with_mtp_lists_the_mtp_and_advance_units():
    proc = _cli("dsv4", "--preset", "tiny", "--mtp", "--unit", "nope")
    assert proc.returncode == 2
    assert "available: layer0, layer1, layer2, layer3, layer4, layer5, mtp, advance, step" in proc.stderr


def test_no_gpu_exits_2(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    proc = _cli(f"{TARGETS}:two_units")
    assert proc.returncode == 2
    assert "no CUDA GPU" in proc.stderr and "Traceback" not in proc.stderr


def _results() -> list[UnitResult]:
    clean = UnitResult(name="clean", device="cuda:0", capture="ok", eager_ms=1.5, replay_ms=0.5, kernels=4, graph_kernels=4)
    bad = UnitResult(name="bad", device="cuda:0", capture="failed", eager_ms=2.0, kernels=3)
    bad.findings.append(make_finding("GD201", "capture failed", unit="bad", path="m.py", line=9))
    note = UnitResult(name="big", device="cuda:0", capture="ok", eager_ms=1.0, replay_ms=1.0, kernels=1, graph_kernels=1)
    note.findings.append(make_finding("GD402", "64 MiB", unit="big", path="m.py", line=4, severity=Severity.WARNING))
    return [clean, bad, note]


def test_json_report_follows_the_lint_contract_with_units(tmp_path):
    doc = json.loads(build_report(_results(), Severity.WARNING, "json", tmp_path))
    assert doc["version"] == 2 and doc["tool"] == "check"
    finding = doc["findings"][0]
    for key in ("path", "line", "rule", "severity", "message", "unit"):
        assert key in finding
    assert [u["name"] for u in doc["units"]] == ["clean", "bad", "big"]
    assert [u["status"] for u in doc["units"]] == ["pass", "fail", "fail"]
    clean = doc["units"][0]
    assert (clean["eager_ms"], clean["replay_ms"], clean["speedup"], clean["kernels"]) == (1.5, 0.5, 3.0, 4)
    assert doc["summary"]["failing"] == 2


def test_fail_on_error_lets_a_warning_pass(tmp_path):
    doc = json.loads(build_report(_results(), Severity.ERROR, "json", tmp_path))
    assert doc["units"][2]["status"] == "pass"


@pytest.mark.parametrize("fmt", ["text", "sarif", "junit"])
def test_other_formats_render_the_same_results(tmp_path, fmt):
    text = build_report(_results(), Severity.WARNING, fmt, tmp_path)
    assert "GD201" in text


def test_the_json_report_carries_the_run_workers_and_harness_times(tmp_path):
    result = UnitResult(name="layer0", device="cuda:0", capture="ok", eager_ms=1.0, replay_ms=0.5, worker=1,
                        phase_seconds={"sync": 0.5, "capture": 1.25, "replay": 2.0})
    run = {"target": "dsv4", "workers": [{"id": 1, "gpu": None, "load_s": 80.5, "units": ["layer0"], "end": "finished"}],
           "wall_s": 90.0}
    doc = json.loads(build_report([result], Severity.WARNING, "json", tmp_path, run=run))
    assert doc["run"]["workers"][0]["load_s"] == 80.5
    row = doc["units"][0]
    assert (row["capture_s"], row["replay_check_s"], row["check_s"], row["worker"]) == (1.25, 2.0, 3.75, 1)
    text = build_report([result], Severity.WARNING, "text", tmp_path, run=run)
    assert "Workers (1 target load, 90.0s in all)" in text and "80.5" in text and "finished" in text
