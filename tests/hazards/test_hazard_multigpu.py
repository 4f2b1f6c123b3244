"""Two-GPU cases: a unit on cuda:1 passes, a cross-GPU hop inside a step is GD501, `--gpus 2` spreads units."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hazard_expectations import marker_lines

pytestmark = [pytest.mark.gpu, pytest.mark.multigpu]
REPO_ROOT = Path(__file__).resolve().parents[2]
UNITS = "tests/hazards/multigpu_units.py"


@pytest.fixture(autouse=True)
def _needs_two_gpus():
    from hazard_expectations import gpu_count

    if gpu_count() < 2:
        pytest.skip("needs two CUDA GPUs")


def _options():
    from graphready.harness.isolation import WorkerOptions

    return WorkerOptions(steps=4, timeout_s=300, root=str(REPO_ROOT))


def test_cross_device_hop_is_reported_at_the_copy():
    from graphready.harness.isolation import list_units
    from graphready.harness.scheduler import check_isolated

    [unit] = list_units(f"{UNITS}:hop_units", _options())
    result = check_isolated(f"{UNITS}:hop_units", unit, 0, _options())
    line = marker_lines(REPO_ROOT / UNITS)["NextGpuHop"]["GD501"]
    assert ("GD501", line) in {(f.rule, f.line) for f in result.findings}, result.findings


def test_gpus_2_checks_units_on_both_devices_and_passes():
    proc = subprocess.run(
        [sys.executable, "-m", "graphready.cli", "check", f"{UNITS}:clean_units", "--gpus", "2",
         "--format", "json", "--no-lint"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, env=dict(os.environ),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    units = {u["name"]: u for u in json.loads(proc.stdout)["units"]}
    assert {u["status"] for u in units.values()} == {"pass"}
    assert units["layer_on_cuda1"]["device"] == "cuda:1"
    assert {units["scale_a"]["device"], units["scale_b"]["device"]} == {"cuda:0", "cuda:1"}
