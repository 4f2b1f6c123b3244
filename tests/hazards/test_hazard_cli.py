"""`graphready check` end to end on the GPU: exit codes, the JSON contract, the pytest helpers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from graphready.findings import JSON_VERSION
from hazard_expectations import TARGET

from graphready.harness import Unit

pytestmark = pytest.mark.gpu
REPO_ROOT = Path(__file__).resolve().parents[2]


def _check(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="200")  # rich: wide enough that unit names are not truncated
    return subprocess.run(
        [sys.executable, "-m", "graphready.cli", "check", TARGET, *args],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip


@pytest.fixture(autouse=True)
def _needs_gpu():
    from hazard_expectations import cuda_available

    if not cuda_available():
        pytest.skip("needs a CUDA GPU")


def test_clean_units_exit_zero_with_json_units():
    proc = _check("--unit", "clean_sync_item", "--unit", "clean_replaced_buffer", "--format", "json", "--no-lint")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["version"] == JSON_VERSION and doc["tool"] == "check" and doc["findings"] == []
    assert [u["name"] for u in doc["units"]] == ["clean_sync_item", "clean_replaced_buffer"]
    for unit in doc["units"]:
        assert unit["status"] == "pass"
        assert unit["eager_ms"] > 0 and unit["replay_ms"] > 0 and unit["kernels"] >= 1


def test_hazard_unit_exits_one_with_located_findings(tmp_path):
    out = tmp_path / "check.json"
    proc = _check("--unit", "frozen_step_counter", "--format", "json", "--output", str(out), "--no-lint")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["units"][0]["status"] == "fail"
    finding = next(f for f in doc["findings"] if f["rule"] == "GD301")
    assert finding["path"] == "tests/hazards/units.py" and finding["unit"] == "frozen_step_counter"
    assert finding["severity"] == "error"


def test_text_format_renders_units_table():
    proc = _check("--unit", "clean_default_stream", "--format", "text", "--no-lint")
    assert proc.returncode == 0, proc.stderr
    assert "clean_default_stream" in proc.stdout


def test_assert_graph_ready_by_spec_passes_and_fails():
    from graphready.harness.pytest_plugin import assert_graph_ready

    assert_graph_ready(TARGET, "clean_unstable_dropout", steps=2)
    with pytest.raises(AssertionError, match="GD303"):
        assert_graph_ready(TARGET, "unstable_dropout", steps=2)


def _scale_inputs(seed: int):
    import torch

    generator = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(256, device="cuda", generator=generator),)


def _scale(x):
    return x * 3.0 + 1.0


def test_graph_unit_check_fixture_checks_a_unit_object(graph_unit_check):
    result = graph_unit_check(Unit("scale", _scale, _scale_inputs), steps=2)
    assert result.status() == "pass", [f.message for f in result.findings]
    assert result.capture == "ok" and result.kernels == result.graph_kernels


def test_capture_keys_report_which_keys_ran_graphed(tmp_path):
    out = tmp_path / "check.json"
    proc = _check("--unit", "keyed_batch", "--format", "json", "--output", str(out), "--no-lint")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(out.read_text())
    rows = {u["name"]: u for u in doc["units"]}
    assert rows["keyed_batch[1]"]["status"] == "pass" and rows["keyed_batch[1]"]["capture"] == "ok"
    assert rows["keyed_batch[8]"]["status"] == "fail" and rows["keyed_batch[8]"]["capture"] == "failed"
    assert {u["key"] for u in doc["units"]} == {"1", "8"} and {u["base_unit"] for u in doc["units"]} == {"keyed_batch"}
    assert doc["summary"]["capture_keys"] == {"keyed_batch": {"1": "graphed", "8": "capture failed"}}
    text = _check("--unit", "keyed_batch", "--format", "text", "--no-lint")
    assert "capture keys of keyed_batch: graphed for 1; capture failed for 8" in text.stdout
