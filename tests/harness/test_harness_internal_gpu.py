"""On the GPU, with the session's real checks: a bug in graphready's pointer audit is GD001 naming it, the
unit's verdicts stand, later checks still run, the worker goes on, and `graphready check` exits 3."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from graphready.harness.isolation import WorkerOptions, list_units
from graphready.harness.scheduler import run_units

pytestmark = pytest.mark.gpu
REPO_ROOT = Path(__file__).resolve().parents[2]
TARGET = "tests/harness/harness_targets.py:gpu_broken_check_units"
BREAK = "GRAPHREADY_TEST_BREAK_POINTER_AUDIT"  # harness_targets.BREAK_POINTER_AUDIT


@pytest.fixture(autouse=True)
def _needs_gpu():
    from graphready.harness.pytest_plugin import gpu_available

    if not gpu_available():
        pytest.skip("needs a CUDA GPU")


def test_a_failing_pointer_audit_is_gd001_beside_the_verdicts_and_the_worker_goes_on(monkeypatch):
    monkeypatch.setenv(BREAK, "1")
    options = WorkerOptions(steps=2, timeout_s=300, root=str(REPO_ROOT))
    run = run_units(TARGET, list_units(TARGET, options), options)
    counter, scale = run.results
    assert {f.rule for f in counter.findings} == {"GD001", "GD301"} and counter.error is None
    for result in (counter, scale):
        [failure] = result.internal_failures
        assert failure.checks == ["pointer audit"]
        assert failure.error == "ReferenceError: weakly-referenced object no longer exists"
        assert failure.where.startswith("graphready/harness/")
    assert [f.rule for f in scale.findings] == ["GD001"] and scale.status() == "internal-error"
    assert scale.capture == "ok" and scale.replay_ms and scale.replay_ms > 0  # the checks after it ran
    [worker] = run.workers
    assert worker.units == ["counter", "scale"] and worker.end == "finished"


def test_check_prints_every_verdict_and_exits_3(monkeypatch, tmp_path):
    out = tmp_path / "check.json"
    proc = subprocess.run(
        [sys.executable, "-m", "graphready.cli", "check", TARGET, "--steps", "2", "--format", "json", "--output",
         str(out), "--no-lint", "--verbose"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, env=dict(os.environ, **{BREAK: "1"}),
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    doc = json.loads(out.read_text())
    assert sorted(f["rule"] for f in doc["findings"]) == ["GD001", "GD001", "GD301"]
    assert doc["summary"]["internal_errors"] == 2
    assert [u["status"] for u in doc["units"]] == ["fail", "internal-error"]
    assert "pointer audit check failed" in proc.stderr and "ReferenceError" in proc.stderr
    assert "Traceback" in proc.stderr
