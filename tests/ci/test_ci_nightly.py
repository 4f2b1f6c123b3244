"""The nightly gate's logic on CPU: lint only, with the GPU steps skipped (`--allow-no-gpu`)."""

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from ci_examples import HOT_SYNC

NIGHTLY = Path(__file__).resolve().parents[2] / "ci" / "nightly_gpu.py"

NEW_SYNC = """import torch
from graphready import hot_path


@hot_path
def route(logits: torch.Tensor):
    torch.cuda.synchronize()
    return logits
"""


def nightly(project: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(NIGHTLY), "--root", str(project), *args], cwd=project,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "model.py").write_text(HOT_SYNC)
    (root / "pyproject.toml").write_text('[project]\nname = "demo"\nversion = "0"\n\n[tool.graphready]\n')
    return root


def test_legacy_debt_passes_and_new_debt_fails(project, tmp_path):
    out = tmp_path / "first"
    first = nightly(project, "--out", str(out), "--allow-no-gpu")
    assert first.returncode == 1, first.stdout + first.stderr
    assert "FAIL: new lint finding pkg/model.py:7 GR101" in first.stdout
    results = json.loads((out / "results.json").read_text())
    assert [f["rule"] for f in results["findings"]] == ["GR101"]

    baseline = tmp_path / "baseline.json"
    record = nightly(project, "--out", str(tmp_path / "record"), "--allow-no-gpu", "--write-baseline", str(baseline))
    assert record.returncode == 0 and "recorded 1 findings" in record.stdout
    assert [e["fingerprint"] for e in json.loads(baseline.read_text())["entries"]] == \
        [f["fingerprint"] for f in results["findings"]]
    out = tmp_path / "second"
    second = nightly(project, "--out", str(out), "--allow-no-gpu", "--baseline", str(baseline))
    assert second.returncode == 0, second.stdout + second.stderr
    assert "nightly gate passed" in second.stdout and "1 lint finding(s) are in the baseline" in second.stdout
    assert json.loads((out / "results.json").read_text())["findings"][0]["baselined"] is True
    suites = ET.parse(out / "junit.xml").getroot()
    assert [s.get("name") for s in suites] == ["graphready.lint"] and suites.get("failures") == "0"
    assert "Nothing new" in (out / "report.md").read_text()
    assert (out / "report.html").read_text().startswith("<!DOCTYPE html>")

    (project / "pkg" / "router.py").write_text(NEW_SYNC)
    third = nightly(project, "--out", str(tmp_path / "third"), "--allow-no-gpu", "--baseline", str(baseline))
    assert third.returncode == 1
    fails = [line for line in third.stdout.splitlines() if line.startswith("FAIL:")]
    assert len(fails) == 1 and "pkg/router.py:7 GR101" in fails[0]
    assert "### New (1)" in (tmp_path / "third" / "report.md").read_text()


def test_without_a_gpu_the_gate_refuses_unless_allowed(project, tmp_path):
    sys.path.insert(0, str(NIGHTLY.parent))
    from nightly_gpu import visible_gpus

    if visible_gpus():
        pytest.skip("a CUDA device is visible here")
    done = nightly(project, "--out", str(tmp_path / "out"))
    assert done.returncode == 2
    assert "no CUDA device visible (pass --allow-no-gpu to run lint only)" in done.stderr
    assert "Traceback" not in done.stderr


def test_bad_configuration_is_a_clear_error(project, tmp_path):
    (project / "pyproject.toml").write_text('[tool.graphready]\ncheck-targets = "dsv4"\n')
    done = nightly(project, "--out", str(tmp_path / "out"), "--allow-no-gpu")
    assert done.returncode == 2
    assert "[tool.graphready] check-targets must be a list of strings" in done.stderr
    (project / "pyproject.toml").write_text('[tool.graphready]\ncheck-targets = ["dsv4"]\n')
    missing = nightly(project, "--out", str(tmp_path / "out"), "--allow-no-gpu", "--baseline", "nope.json")
    assert missing.returncode == 2 and "baseline file not found: nope.json" in missing.stderr


def test_check_findings_get_fingerprints_that_survive_line_moves(project):
    sys.path.insert(0, str(NIGHTLY.parent))
    from nightly_gpu import fingerprint_check_findings

    from graphready.findings import Finding, Severity

    def fingerprint(line: int) -> str:
        finding = Finding("pkg/model.py", line, 0, "GD201", "capture-failed", Severity.ERROR, "capture failed",
                          unit="post_block")
        fingerprint_check_findings([finding], project)
        return finding.fingerprint

    before = fingerprint(7)
    (project / "pkg" / "model.py").write_text("\n" + HOT_SYNC)
    assert before and fingerprint(8) == before
    assert fingerprint(7) != before  # a different line of code is a different finding
