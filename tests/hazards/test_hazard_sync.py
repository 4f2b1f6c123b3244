"""GD101 beyond sync debug mode (sync_units.py): a real sync is caught, a long line or a full launch queue is not.

Needs a GPU. The probe's timing alone flags all three lines; the CUDA runtime trace decides.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from hazard_expectations import cuda_available, marker_lines

pytestmark = pytest.mark.gpu
REPO_ROOT = Path(__file__).resolve().parents[2]
UNITS_FILE = Path(__file__).with_name("sync_units.py")
TARGET = "tests/hazards/sync_units.py:sync_units"


@pytest.fixture(scope="module")
def sync_results():
    if not cuda_available():
        pytest.skip("needs a CUDA GPU")
    from graphready.harness.isolation import WorkerOptions, list_units
    from graphready.harness.scheduler import run_units

    options = WorkerOptions(steps=4, timeout_s=300, root=str(REPO_ROOT))
    run = run_units(TARGET, list_units(TARGET, options), options, gpus=1, jobs=1)
    return {r.name: r for r in run.results}


def test_a_cupy_stream_sync_is_reported_at_its_line_naming_the_call(sync_results):
    pytest.importorskip("cupy")
    line = marker_lines(UNITS_FILE)["CupyStreamSync"]["GD101"]
    found = [f for f in sync_results["cupy_stream_sync"].findings if f.rule == "GD101"]
    assert [(f.path, f.line) for f in found] == [("tests/hazards/sync_units.py", line)], found
    assert "cudaStreamSynchronize" in found[0].message


@pytest.mark.parametrize("name", ["clean_slow_host_line", "clean_launch_back_pressure"])
def test_a_line_that_only_outlasts_the_queued_gpu_work_passes(sync_results, name):
    result = sync_results[name]
    assert result.findings == [], [f"{f.rule}@{f.line}: {f.message}" for f in result.findings]
    assert result.status() == "pass" and result.capture == "ok"


@pytest.mark.parametrize("unit_class", ["SlowHostLine", "LaunchBackPressure"])
def test_the_probe_timing_flags_the_line_and_the_runtime_trace_clears_it(unit_class):
    """In process: the cheap probe sees the line wait for a drained GPU; find_blocking reports nothing."""
    if not cuda_available():
        pytest.skip("needs a CUDA GPU")
    import sync_units
    import torch

    from graphready.harness.checks.syncs import blocking

    fn = getattr(sync_units, unit_class)()
    (x,) = sync_units._vector(0)
    device = x.device
    step = lambda: fn(x)  # noqa: E731
    step()
    source, first = inspect.getsourcelines(type(fn).__call__)
    slow_line = first + next(i for i, text in enumerate(source) if "sleep(HOST" in text or "map(" in text)
    with torch.cuda.stream(torch.cuda.Stream(device=device)):
        probe, _ = blocking._probed_step(step, device, REPO_ROOT)
    assert slow_line in {location.line for location in probe.waited}, probe.waited
    report = blocking.find_blocking(step, device, REPO_ROOT)
    assert report.sites == {} and report.notes == [], report
