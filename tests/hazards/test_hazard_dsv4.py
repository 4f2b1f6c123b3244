"""The built-in dsv4 target: every layer of the tiny decoder and the full step pass `graphready check`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
REPO_ROOT = Path(__file__).resolve().parents[2]


def _check_dsv4(tmp_path, name: str, *args: str) -> dict:
    out = Path(os.environ.get("GRAPHREADY_VERDICT_DIR", tmp_path)) / f"{name}.json"
    proc = subprocess.run(
        [sys.executable, "-m", "graphready.cli", "check", "dsv4", "--preset", "tiny", "--format", "json",
         "--output", str(out), "--no-lint", *args],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    doc = json.loads(out.read_text())
    details = [f"{f['unit']} {f['rule']} {f['path']}:{f['line']} {f['message']}" for f in doc["findings"]]
    assert proc.returncode == 0, "\n".join(details) + proc.stderr
    for unit in doc["units"]:
        assert unit["status"] == "pass" and unit["capture"] == "ok"
        assert unit["kernels"] == unit["graph_kernels"] > 0
    [worker] = doc["run"]["workers"]  # one model build for every unit
    assert worker["load_s"] > 0 and worker["end"] == "finished"
    return doc


def test_dsv4_tiny_every_layer_and_the_step_pass(tmp_path):
    from hazard_expectations import cuda_available

    if not cuda_available():
        pytest.skip("needs a CUDA GPU")
    doc = _check_dsv4(tmp_path, "dsv4_tiny")
    names = [u["name"] for u in doc["units"]]
    assert names[-1] == "step" and names[0] == "layer0"


@pytest.mark.multigpu
def test_dsv4_tiny_over_two_gpus_checks_each_layer_on_its_gpu(tmp_path):
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA GPUs")
    doc = _check_dsv4(tmp_path, "dsv4_tiny_2gpu", "--gpus", "2")
    devices = {u["name"]: u["device"] for u in doc["units"]}
    assert devices["layer0"] == "cuda:0" and devices["layer5"] == "cuda:1"
    assert devices["step.gpu0"] == "cuda:0" and devices["step.gpu1"] == "cuda:1"
