"""Workers: listing runs in a worker; a worker loads its target once and checks units in turn; after a
failed unit, a crash or a hang the worker is replaced and the run resumes at the next unit.

The pool tests run the real serve loop and the real parent through `cpu_worker.py`, whose check calls
each unit once on the CPU (the GPU twin of the planted failure is tests/harness/test_harness_pool_gpu.py).
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from graphready.harness.isolation import UnitInfo, WorkerOptions, list_target, list_units
from graphready.harness.pool import Listener
from graphready.harness.result import UnitResult
from graphready.harness.scheduler import assign_gpus, plan_lanes, run_units

TARGETS = "tests/harness/harness_targets.py"
ROOT = os.getcwd()
CPU_WORKER = (sys.executable, "tests/harness/cpu_worker.py")


def _options(timeout: float = 60.0, **kwargs) -> WorkerOptions:
    return WorkerOptions(timeout_s=timeout, root=ROOT, **kwargs)


def test_listing_runs_the_factory_in_a_worker():
    units = list_units(f"{TARGETS}:two_units", _options())
    assert [u.name for u in units] == ["double", "triple"]
    assert units[0].path == "tests/harness/harness_targets.py"
    assert units[0].line > 0 and units[0].device is None


def test_listing_tells_whether_the_target_spans_gpus(tmp_path):
    options = _options(factory_kwargs=json.dumps({"log": str(tmp_path / "log"), "plan": "ok"}))
    assert list_target(f"{TARGETS}:planted_units", options, gpus=2).spans_gpus
    assert not list_target(f"{TARGETS}:two_units", _options()).spans_gpus


def test_listing_reports_a_raising_factory_as_a_usage_error():
    from graphready.harness.target import TargetError

    with pytest.raises(TargetError, match="checkpoint missing"):
        list_units(f"{TARGETS}:raising_factory", _options())


class Recorder(Listener):
    def __init__(self):
        self.events = []

    def worker_loaded(self, record):
        self.events.append(("loaded", record.id))

    def unit_started(self, unit, record):
        self.events.append(("start", unit.name, record.id))

    def unit_done(self, result):
        self.events.append(("done", result.name, result.status()))


def _planted(tmp_path, plan: str, timeout: float = 60.0):
    log = tmp_path / "builds.log"
    options = _options(timeout, factory_kwargs=json.dumps({"log": str(log), "plan": plan}))
    units = [UnitInfo(f"u{i}", None, TARGETS, 1) for i in range(len(plan.split(",")))]
    recorder = Recorder()
    run = run_units(f"{TARGETS}:planted_units", units, options, spans_gpus=True, listener=recorder, command=CPU_WORKER)
    return run, log.read_text().splitlines(), recorder


def test_one_worker_loads_once_and_checks_every_unit_in_order(tmp_path):
    run, builds, recorder = _planted(tmp_path, "ok,ok,ok,ok")
    assert [r.status() for r in run.results] == ["pass"] * 4
    assert len(builds) == 1 and run.builds == 1
    [worker] = run.workers
    assert worker.units == ["u0", "u1", "u2", "u3"] and worker.end == "finished" and worker.load_s >= 0
    assert [e[0] for e in recorder.events] == ["loaded"] + ["start", "done"] * 4  # streamed as each unit ends
    assert all(r.worker == worker.id for r in run.results)
    assert all(r.phase_seconds == {} for r in run.results)  # the CPU check has no session clock


def test_a_failed_unit_mid_list_costs_exactly_one_extra_build(tmp_path):
    run, builds, _ = _planted(tmp_path, "ok,ok,bad,ok,ok")
    assert [r.status() for r in run.results] == ["pass", "pass", "fail", "pass", "pass"]
    assert run.results[2].findings[0].rule == "GD201"
    assert len(builds) == 2 and run.builds == 2
    first, second = run.workers
    assert first.units == ["u0", "u1", "u2"] and first.end == "retired after u2"
    assert second.units == ["u3", "u4"] and second.end == "finished"


def test_a_crashing_unit_is_reported_with_its_signal_and_the_next_worker_resumes(tmp_path):
    run, builds, _ = _planted(tmp_path, "ok,abort,ok")
    crashed = run.results[1]
    assert crashed.status() == "error" and "SIGABRT" in crashed.error and "during capture" in crashed.error
    assert crashed.capture == "failed" and crashed.findings[0].rule == "GD201"
    assert [r.status() for r in run.results] == ["pass", "error", "pass"]
    assert len(builds) == 2 and run.workers[0].end == "died during u1 (capture)"


def test_a_hanging_unit_is_killed_at_the_timeout_and_the_rest_still_run(tmp_path):
    run, builds, _ = _planted(tmp_path, "hang,ok", timeout=5)
    hung = run.results[0]
    assert hung.status() == "error" and "hung" in hung.error and "5s" in hung.error and hung.name == "u0"
    # a GPU busy with other work hangs a unit as a deadlock does: no GD201 verdict, and the run still fails
    assert hung.findings == [] and "not a verdict" in hung.error and hung.capture is None
    assert run.results[1].status() == "pass"
    assert len(builds) == 2


@pytest.mark.parametrize("phase, verdict", [("capture", "GD201"), ("replay", "GD201"), ("pointer audit", "GD001")])
def test_a_worker_death_is_the_units_failure_unless_graphready_alone_was_running(phase, verdict):
    """The pointer audit reads the captured graph through the driver API and runs none of the unit's code: a
    death there is graphready's (GD001, the run exits 3), not a verdict on the unit (issue 26's CuTe case)."""
    from graphready.findings import Severity
    from graphready.harness.command import EXIT_INTERNAL, exit_code
    from graphready.harness.pool import _lost

    message = f"the worker died (signal SIGSEGV) during {phase}"
    lost = _lost(UnitInfo("u", None, "m.py", 7), message, 0, phase, worker=1)
    assert lost.status() == "error" and [f.rule for f in lost.findings] == [verdict]
    assert (exit_code([lost], Severity.WARNING) == EXIT_INTERNAL) == (verdict == "GD001")
    if verdict == "GD001":
        assert lost.findings[0].internal and "pointer audit" in lost.findings[0].message and lost.capture is None


def test_a_target_that_cannot_load_fails_every_unit_once(tmp_path):
    units = [UnitInfo("crasher", None, TARGETS, 30), UnitInfo("other", None, TARGETS, 30)]
    run = run_units(f"{TARGETS}:crashing_units", units, _options(), command=CPU_WORKER)
    assert [r.status() for r in run.results] == ["error", "error"]
    assert all("while loading the target" in r.error and "SIGABRT" in r.error for r in run.results)
    assert len(run.workers) == 1 and run.builds == 0  # no retry: a broken target would break every worker


def test_a_target_that_hangs_while_loading_is_killed_at_the_load_timeout():
    run = run_units(f"{TARGETS}:hanging_units", [UnitInfo("sleeper", None, TARGETS, 22)],
                    _options(load_timeout_s=5), command=CPU_WORKER)
    [result] = run.results
    assert result.status() == "error" and "killed after 5s while loading" in result.error


def test_the_real_worker_without_a_gpu_reports_it_for_every_unit():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    units = [UnitInfo("double", None, TARGETS, 1), UnitInfo("triple", None, TARGETS, 1)]
    run = run_units(f"{TARGETS}:two_units", units, _options())
    assert [r.error for r in run.results] == ["cannot load the target: no CUDA GPU is available"] * 2


def test_units_spread_round_robin_and_pinned_units_keep_their_device():
    units = [
        UnitInfo("a", None, "p", 1),
        UnitInfo("b", "cuda:1", "p", 1),
        UnitInfo("c", None, "p", 1),
        UnitInfo("d", None, "p", 1),
    ]
    assert assign_gpus(units, 2) == [0, 1, 1, 0]
    assert assign_gpus(units, 1) == [0, 1, 0, 0]
    lanes = plan_lanes(units, 2, jobs=2, spans_gpus=False)
    assert [(gpu, [u.name for u in lane]) for gpu, lane in lanes] == [(0, ["a"]), (0, ["d"]), (1, ["b"]), (1, ["c"])]
    assert plan_lanes(units, 2, jobs=2, spans_gpus=True) == [(None, units)]


def test_unit_result_round_trips_through_json():
    from graphready.harness.result import make_finding

    result = UnitResult(name="u", device="cuda:0", capture="ok", eager_ms=2.0, replay_ms=0.5, kernels=7, graph_kernels=7,
                        phase_seconds={"capture": 0.5, "capture analysis": 0.25, "replay": 1.0, "sync": 2.0}, worker=3)
    result.findings.append(make_finding("GD402", "big", unit="u", path="a.py", line=3))
    back = UnitResult.from_json(json.loads(json.dumps(result.to_json())))
    assert back.unit_row() == result.unit_row()
    assert back.findings[0].rule == "GD402" and back.findings[0].name == "capture-alloc"
    assert back.speedup == 4.0
    row = back.unit_row()
    assert (row["capture_s"], row["replay_check_s"], row["eager_check_s"], row["check_s"]) == (0.75, 1.0, 2.0, 3.75)
    assert row["worker"] == 3


def test_progress_streams_a_line_per_loaded_worker_and_finished_unit(tmp_path):
    import io

    from rich.console import Console

    from graphready.harness.progress import ProgressListener

    buffer = io.StringIO()
    options = _options(factory_kwargs=json.dumps({"log": str(tmp_path / "log"), "plan": "ok,bad,ok"}))
    units = [UnitInfo(f"u{i}", None, TARGETS, 1) for i in range(3)]
    listener = ProgressListener(Console(file=buffer, width=200), None, None, len(units))
    run_units(f"{TARGETS}:planted_units", units, options, spans_gpus=True, listener=listener, command=CPU_WORKER)
    lines = buffer.getvalue().splitlines()
    assert [line.split(",")[0] for line in lines if line.startswith("[")] == [
        "[1/3] pass u0", "[2/3] fail u1", "[3/3] pass u2"]
    assert "ETA" in lines[1] and lines[-1].endswith("in all")
    assert sum(line.startswith("worker ") and "loaded the target" in line for line in lines) == 2


def test_the_run_time_limit_stops_the_workers_and_names_every_unit_it_left_unchecked(tmp_path):
    import time

    log = tmp_path / "builds.log"
    options = _options(60.0, factory_kwargs=json.dumps({"log": str(log), "plan": "ok,hang,ok"}),
                       time_limit_s=4.0, run_deadline=time.monotonic() + 4.0)
    units = [UnitInfo(f"u{i}", None, TARGETS, 1) for i in range(3)]
    started = time.monotonic()
    run = run_units(f"{TARGETS}:planted_units", units, options, spans_gpus=True, command=CPU_WORKER)
    assert time.monotonic() - started < 30  # stopped at the limit, not at the 60 s unit timeout
    assert [r.status() for r in run.results] == ["pass", "error", "error"]
    stopped, unchecked = run.results[1:]
    assert stopped.error.startswith("not checked: the run's --time-limit of 4s ran out during ")
    assert unchecked.error == "not checked: the run's --time-limit of 4s ran out"
    assert stopped.findings == [] and unchecked.findings == []  # no verdict, so no finding
    assert run.workers[0].end == "stopped: the run's time limit ran out" and len(run.workers) == 1
