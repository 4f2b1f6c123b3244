"""The built-in dsv4 target with --mtp on a GPU: every layer (two rows per step), the MTP layer, the
accept/advance step and the full speculative step capture, replay equal to eager, and no state or pointer
check (GD3xx) has anything to say."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu
REPO_ROOT = Path(__file__).resolve().parents[2]
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0


def _check_dsv4_mtp(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "dsv4_mtp.json"
    proc = subprocess.run(
        [sys.executable, "-m", "graphready.cli", "check", "dsv4", "--preset", "tiny", "--mtp", "--format", "json",
         "--output", str(out), "--no-lint", *args],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert out.is_file(), proc.stderr[-4000:]
    doc = json.loads(out.read_text())
    details = "\n".join(f"{f['unit']} {f['rule']} {f['path']}:{f['line']} {f['message']}" for f in doc["findings"])
    assert not [f for f in doc["findings"] if f["rule"].startswith("GD3")], details
    assert proc.returncode == 0, details + proc.stderr[-4000:]
    for unit in doc["units"]:
        assert unit["status"] == "pass" and unit["capture"] == "ok", unit
        assert unit["kernels"] == unit["graph_kernels"] > 0, unit
    [worker] = doc["run"]["workers"]  # one model build for every unit
    assert worker["end"] == "finished"
    assert doc["summary"]["config"]["mtp"] is True
    return doc


@pytest.mark.skipif(GPUS < 1, reason="needs a CUDA GPU")
def test_dsv4_tiny_mtp_every_unit_passes(tmp_path):
    doc = _check_dsv4_mtp(tmp_path)
    layers = [f"layer{i}" for i in range(6)]
    assert [u["name"] for u in doc["units"]] == [*layers, "mtp", "advance", "step"]


@pytest.mark.multigpu
@pytest.mark.skipif(GPUS < 2, reason="needs two CUDA GPUs")
def test_dsv4_tiny_mtp_over_two_gpus_runs_the_mtp_layer_and_advance_on_the_last(tmp_path):
    doc = _check_dsv4_mtp(tmp_path, "--gpus", "2")
    devices = {u["name"]: u["device"] for u in doc["units"]}
    assert devices["mtp"] == devices["advance"] == devices["step.gpu1"] == "cuda:1"
    assert devices["layer0"] == devices["step.gpu0"] == "cuda:0"
