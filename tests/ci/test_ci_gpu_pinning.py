"""Each pytest-xdist worker sees its own GPU, chosen before anything can initialise CUDA."""

import json
import os
import subprocess
import sys
from pathlib import Path

CI = Path(__file__).resolve().parents[2] / "ci"
sys.path.insert(0, str(CI))

from gpu_worker_pinning import pinned_device  # noqa: E402

RECORDING_TESTS = """
import json, os, pathlib
import pytest

@pytest.mark.parametrize("n", range(6))
def test_record(n):
    out = pathlib.Path(os.environ["RECORD_DIR"]) / f"{n}.json"
    out.write_text(json.dumps([os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("CUDA_VISIBLE_DEVICES")]))
"""


def test_worker_k_takes_the_kth_gpu_of_the_pool_round_robin():
    assert pinned_device("gw0", "3,5") == "3"
    assert pinned_device("gw1", "3, 5") == "5"
    assert pinned_device("gw2", "3,5") == "3"
    assert pinned_device(None, "3,5") is None  # not under xdist: leave the devices alone
    assert pinned_device("gw0", "") is None
    assert pinned_device("master", "0") is None


def test_xdist_workers_are_pinned_before_tests_run(tmp_path):
    (tmp_path / "test_record.py").write_text(RECORDING_TESTS)
    records = tmp_path / "records"
    records.mkdir()
    env = {**os.environ, "PYTHONPATH": str(CI), "GRAPHREADY_GPU_POOL": "3,5", "RECORD_DIR": str(records),
           "CUDA_VISIBLE_DEVICES": "3,5"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "gpu_worker_pinning",
                           "-p", "no:cacheprovider", "test_record.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    seen = {tuple(json.loads(p.read_text())) for p in records.glob("*.json")}
    assert len(list(records.glob("*.json"))) == 6
    assert seen <= {("gw0", "3"), ("gw1", "5")} and seen
