"""On a GPU: a unit that fails capture in the middle of the list costs exactly one extra build; one that
stops with an error before any capture costs none."""

from __future__ import annotations

import json
import os

import pytest

from graphready.harness.isolation import WorkerOptions, list_target
from graphready.harness.scheduler import run_units

pytestmark = pytest.mark.gpu
TARGET = "tests/harness/harness_targets.py:gpu_planted_units"


@pytest.fixture(autouse=True)
def _needs_gpu():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


def test_a_failed_capture_mid_list_gives_its_finding_and_the_rest_pass_after_one_extra_build(tmp_path):
    log = tmp_path / "builds.log"
    options = WorkerOptions(steps=2, timeout_s=300, root=os.getcwd(),
                            factory_kwargs=json.dumps({"log": str(log), "plan": "ok,ok,sync,ok,ok"}))
    listing = list_target(TARGET, options)
    assert listing.spans_gpus
    run = run_units(TARGET, listing.units, options, spans_gpus=True)
    assert [r.status() for r in run.results] == ["pass", "pass", "fail", "pass", "pass"]
    failed = run.results[2]
    assert failed.capture == "failed" and {"GD101", "GD201"} <= {f.rule for f in failed.findings}
    assert len(log.read_text().splitlines()) == 2 and run.builds == 2
    first, second = run.workers
    assert first.units == ["u0", "u1", "u2"] and first.end == "retired after u2"
    assert second.units == ["u3", "u4"] and second.end == "finished"
    for result in run.results:
        row = result.unit_row()
        assert row["check_s"] > 0 and row["capture_s"] > 0


def test_an_error_before_capture_keeps_the_worker_when_a_probe_capture_still_works(tmp_path):
    log = tmp_path / "builds.log"
    options = WorkerOptions(steps=2, timeout_s=300, root=os.getcwd(),
                            factory_kwargs=json.dumps({"log": str(log), "plan": "ok,raise,ok,sync,ok"}))
    listing = list_target(TARGET, options)
    run = run_units(TARGET, listing.units, options, spans_gpus=True)
    assert [r.status() for r in run.results] == ["pass", "error", "pass", "fail", "pass"]
    assert "planted: this step cannot run" in run.results[1].error and run.results[1].capture is None
    assert run.builds == 2 and len(log.read_text().splitlines()) == 2
    first, second = run.workers
    assert first.units == ["u0", "u1", "u2", "u3"] and first.end == "retired after u3"
    assert second.units == ["u4"]
