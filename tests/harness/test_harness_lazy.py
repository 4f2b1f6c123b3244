"""GD203's host-side logic: which cold-capture work is first-call work, what the findings say, and how
the cold pass joins the main pass (in process and through real worker processes on the CPU)."""

from __future__ import annotations

import json
import os
import sys

from graphready.findings import Severity
from graphready.harness.checks.cold.cold_pass import merge_cold, merge_lane
from graphready.harness.checks.cold.lazy_report import CaptureObservation, Work, describe_bytes, first_call_work, lazy_findings
from graphready.harness.frames import Location
from graphready.harness.isolation import UnitInfo, WorkerOptions
from graphready.harness.pool import WorkerRecord
from graphready.harness.result import UnitResult, make_finding
from graphready.harness.scheduler import run_units

FN = Location("pkg/units.py", 10)
ALLOC = Location("pkg/units.py", 14)
LAUNCH = Location("pkg/units.py", 20)


def test_work_repeated_by_the_warm_capture_is_not_first_call_work():
    cold = CaptureObservation([Work("lazy-alloc", "4.0 KiB", ALLOC), Work("lazy-alloc", "4.0 KiB", LAUNCH)])
    warm = CaptureObservation([Work("lazy-alloc", "4.0 KiB", LAUNCH)])  # rebound every step: another check's business
    assert first_call_work(cold, warm) == [Work("lazy-alloc", "4.0 KiB", ALLOC)]


def test_without_a_warm_capture_every_cold_observation_counts():
    cold = CaptureObservation([Work("lazy-alloc", "4.0 KiB", ALLOC)], error="RuntimeError: boom")
    assert first_call_work(cold, None) == cold.work


def test_a_module_load_is_part_of_the_compile_at_the_same_line():
    cold = CaptureObservation([Work("triton-compile", "scale", LAUNCH), Work("triton-load", "scale", LAUNCH),
                               Work("triton-load", "other", LAUNCH)])
    assert [w.detail for w in first_call_work(cold, CaptureObservation())] == ["scale", "other"]
    assert [w.kind for w in first_call_work(cold, CaptureObservation())] == ["triton-compile", "triton-load"]


def test_findings_are_info_per_line_and_name_the_work():
    cold = CaptureObservation([Work("triton-compile", "scale", LAUNCH), Work("pin-memory", "(1024,) float32", LAUNCH),
                               Work("lazy-alloc", describe_bytes(4096), None)])
    findings = lazy_findings(cold, CaptureObservation(), FN)
    assert [(f.severity, f.location) for f in findings] == [(Severity.INFO, LAUNCH), (Severity.INFO, FN)]
    assert "compiles the Triton kernel `scale`" in findings[0].message and "pins host memory" in findings[0].message
    assert "allocates 4.0 KiB that outlive the step" in findings[1].message


def test_a_clean_capture_has_no_findings():
    assert lazy_findings(CaptureObservation(), CaptureObservation(), FN) == []


def test_a_cold_capture_failure_is_a_warning_at_the_failing_line():
    cold = CaptureObservation([Work("lazy-alloc", "4.0 KiB", ALLOC), Work("torch-compile", "0/0", LAUNCH)],
                              error="RuntimeError: CUDA error: operation not permitted when stream is capturing\nmore",
                              error_location=LAUNCH)
    info, warning = lazy_findings(cold, None, FN)
    assert info.severity == Severity.INFO and info.location == ALLOC  # the failing line's work goes with its failure
    assert warning.severity == Severity.WARNING and warning.location == LAUNCH
    assert "operation not permitted when stream is capturing;" in warning.message and "more" not in warning.message
    assert "torch.compile compiler" in warning.message and "allocates 4.0 KiB" in warning.message


def test_sizes_are_readable():
    assert describe_bytes(512) == "512 bytes" and describe_bytes(4096) == "4.0 KiB" and describe_bytes(3 * 2**20) == "3.0 MiB"


def _finding(rule: str, severity: Severity, line: int = 5):
    return make_finding(rule, "m", unit="u", path="units.py", line=line, severity=severity)


def test_merge_adds_cold_findings_and_time():
    main = UnitResult("u", capture="ok", phase_seconds={"capture": 1.0})
    cold = UnitResult("u", capture="ok", findings=[_finding("GD203", Severity.INFO)], phase_seconds={"cold capture": 0.5},
                      notes=["n"])
    merged = merge_cold(main, cold)
    assert [f.rule for f in merged.findings] == ["GD203"] and merged.notes == ["n"]
    assert merged.phase_seconds == {"capture": 1.0, "cold capture": 0.5}
    assert merged.status() == "pass"  # info never fails a unit


def test_a_cold_failure_counts_only_where_the_warm_capture_succeeded():
    failure = _finding("GD203", Severity.WARNING)
    assert merge_cold(UnitResult("u", capture="ok"), UnitResult("u", capture="failed", findings=[failure])).status() == "fail"
    failed_anyway = merge_cold(UnitResult("u", capture="failed"), UnitResult("u", capture="failed", findings=[failure]))
    assert failed_anyway.findings == []


def test_a_lost_cold_worker_is_a_warning_only_when_the_warm_capture_works():
    lost = UnitResult("u", error="the worker died (signal SIGSEGV) during cold capture",
                      findings=[_finding("GD201", Severity.ERROR, line=7)])
    merged = merge_cold(UnitResult("u", capture="ok"), lost)
    [finding] = merged.findings
    assert finding.rule == "GD203" and finding.severity == Severity.WARNING and finding.line == 7
    assert "SIGSEGV" in finding.message
    noted = merge_cold(UnitResult("u", capture="failed"), lost)
    assert noted.findings == [] and "SIGSEGV" in noted.notes[0]


def test_merge_lane_keeps_main_order_and_every_worker():
    main = ([UnitResult("a", capture="ok"), UnitResult("b", capture="ok")], [WorkerRecord(2, 0)])
    cold = ([UnitResult("b", findings=[_finding("GD203", Severity.INFO)])], [WorkerRecord(1, 0)])
    results, workers = merge_lane(main, cold)
    assert [r.name for r in results] == ["a", "b"] and len(results[1].findings) == 1
    assert [w.id for w in workers] == [1, 2]
    assert merge_lane(main, None) == main


TARGETS = "tests/harness/harness_targets.py"
CPU_WORKER = (sys.executable, "tests/harness/cpu_worker.py")


def test_cold_pass_runs_in_workers_of_its_own_and_joins_the_report(tmp_path):
    log = tmp_path / "builds.log"
    options = WorkerOptions(timeout_s=60.0, root=os.getcwd(), cold_capture=True,
                            factory_kwargs=json.dumps({"log": str(log), "plan": "ok,bad,ok"}))
    units = [UnitInfo(f"u{i}", None, TARGETS, 1) for i in range(3)]
    run = run_units(f"{TARGETS}:planted_units", units, options, spans_gpus=True, command=CPU_WORKER)
    # cold pass: u0, u1 (fails, retires), then u2; main pass: the same
    assert len(log.read_text().splitlines()) == 4 and run.builds == 4
    assert [f.rule for f in run.results[0].findings] == ["GD203"] and run.results[0].status() == "pass"
    assert [f.rule for f in run.results[1].findings] == ["GD201"]  # the warm capture fails too: no GD203 warning
    assert [f.rule for f in run.results[2].findings] == ["GD203"]


def test_hooks_see_a_first_compile_at_the_calling_line_and_restore_everything(tmp_path):
    import torch

    from graphready.harness.checks.cold.lazy_hooks import FirstCallHooks

    path = tmp_path / "stepmod.py"
    path.write_text("def step(x):\n    return x * 2\n\n\ndef run(compiled, x):\n    return compiled(x)\n")
    import importlib.util

    spec = importlib.util.spec_from_file_location("graphready_test_stepmod", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    compiled = torch.compile(module.step, backend="eager")
    original_pin = torch.Tensor.pin_memory
    with FirstCallHooks(tmp_path, FN) as hooks:
        module.run(compiled, torch.ones(2))
        module.run(compiled, torch.ones(2))  # cached: no second compile
    assert [(w.kind, w.location) for w in hooks.work] == [("torch-compile", Location("stepmod.py", 6))]
    assert torch.Tensor.pin_memory is original_pin
    module.run(torch.compile(module.step, backend="eager", dynamic=True), torch.ones(3))  # after exit: not recorded
    assert len(hooks.work) == 1


def test_hooks_wrap_cute_compile_only_while_open(tmp_path, monkeypatch):
    import types

    from graphready.harness.checks.cold.lazy_hooks import FirstCallHooks

    calls = []

    def compile(fn, *args):  # stands in for cutlass.cute.compile, which this machine may not have
        calls.append(fn)
        return "compiled"

    cute = types.ModuleType("cutlass.cute")
    cute.compile = compile
    monkeypatch.setitem(sys.modules, "cutlass.cute", cute)

    def kernel():
        pass

    with FirstCallHooks(tmp_path, FN) as hooks:
        assert cute.compile(kernel, 1) == "compiled"
    assert cute.compile is compile and calls == [kernel]
    assert [(w.kind, w.detail) for w in hooks.work] == [("cute-compile", "test_hooks_wrap_cute_compile_only_while_open.<locals>.kernel")]


def test_kept_allocations_are_new_live_blocks_at_their_innermost_user_line(tmp_path, monkeypatch):
    import torch

    from graphready.harness.checks.cold import lazy

    user = str(tmp_path / "layer.py")
    library = torch.__file__
    snapshot = [{"device": 0, "blocks": [
        {"address": 100, "size": 512, "requested_size": 400, "state": "active_allocated",
         "frames": [{"filename": library, "line": 1, "name": "empty"}, {"filename": user, "line": 7, "name": "__call__"},
                    {"filename": user, "line": 30, "name": "step"}]},
        {"address": 200, "size": 512, "state": "active_allocated", "frames": [{"filename": user, "line": 9, "name": "f"}]},
        {"address": 300, "size": 512, "state": "inactive", "frames": [{"filename": user, "line": 11, "name": "f"}]},
        {"address": 400, "size": 512, "state": "active_allocated", "frames": [{"filename": library, "line": 2, "name": "g"}]},
    ]}, {"device": 1, "blocks": [
        {"address": 500, "size": 512, "state": "active_allocated", "frames": [{"filename": user, "line": 13, "name": "f"}]},
    ]}]  # fmt: skip
    monkeypatch.setattr(torch.cuda, "memory_snapshot", lambda: snapshot)
    kept = lazy._kept_allocations(torch.device("cuda", 0), before={200}, root=tmp_path)
    # 200 existed before, 300 was freed, 400 has no user line (torch's own), 500 is another GPU's
    assert kept == [Work("lazy-alloc", "400 bytes", Location("layer.py", 7))]


def test_the_cold_pass_leaves_units_that_torch_compile_graphs_itself_to_the_compiler(tmp_path):
    import torch

    from graphready.harness.checks.cold.lazy import cold_check_unit
    from graphready.harness.session import CheckOptions
    from graphready.harness.unit import Unit

    def step(x):
        return x * 2

    unit = Unit("compiled", torch.compile(step, mode="reduce-overhead"), lambda seed: (torch.ones(2),))
    result = cold_check_unit(unit, torch.device("cuda", 0), CheckOptions(root=tmp_path))  # decided before any CUDA call
    assert result.findings == [] and result.capture is None and "captures this unit itself" in result.notes[0]
