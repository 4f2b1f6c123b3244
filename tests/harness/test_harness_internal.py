"""graphready's own check failing is GD001, never a verdict, and never hides one (issue 26).

The pool test runs the real serve loop and parent through `cpu_worker.py` with a bug planted in one of
the harness's own comparisons; its GPU twin, with the session's real checks, is
tests/harness/test_harness_internal_gpu.py.
"""

from __future__ import annotations

import json
import os
import sys
import xml.etree.ElementTree as ET

import pytest

from graphready.errors import InternalError
from graphready.findings import Severity
from graphready.harness import keys
from graphready.harness.blame import InternalFailure, call_user, raised_by_user
from graphready.harness.command import build_report, exit_code, print_tracebacks
from graphready.harness.isolation import UnitInfo, WorkerOptions
from graphready.harness.result import UnitResult, make_finding
from graphready.harness.scheduler import run_units

TARGETS = "tests/harness/harness_targets.py"
CPU_WORKER = (sys.executable, "tests/harness/cpu_worker.py")


def _raised(fn, *args) -> BaseException:
    try:
        fn(*args)
    except Exception as exc:
        return exc
    raise AssertionError("expected an exception")


# -- whose exception ------------------------------------------------------------------------------


def _users_step(x):
    return json.loads(x)  # the user's code calls a library, which raises


def _users_step_with_our_hook(name):
    return keys.key_of(name)  # stands for a hook of ours (the op tracer) running inside the user's step


def test_the_users_code_raising_through_a_library_is_the_users():
    assert raised_by_user(_raised(call_user, _users_step, "{"))


def test_graphready_code_raising_is_graphreadys_even_inside_the_users_step():
    assert not raised_by_user(_raised(keys.key_of, None))  # re.fullmatch(None) inside graphready's keys.py
    assert not raised_by_user(_raised(call_user, _users_step_with_our_hook, None))


def _users_bad_op(x):
    return x.view(-1, 7)  # the user's op raises inside torch, called from our op tracer's dispatch


def test_an_op_the_user_calls_raising_under_our_op_tracer_is_the_users():
    """Seen on the GPU: a pageable copy inside capture raises in torch, below the tracer's dispatch;
    that is the unit's capture failure (GD201), not a failure of graphready's tracer."""
    import torch

    from graphready.harness.tracer import OpTracer

    def traced_step(x):
        with OpTracer(torch.device("cpu")):
            return _users_bad_op(x)

    exc = _raised(call_user, traced_step, torch.zeros(10))
    assert isinstance(exc, RuntimeError) and raised_by_user(exc)


def test_a_broken_unit_contract_and_a_cuda_error_are_the_units():
    from graphready.harness.compare import as_outputs

    assert raised_by_user(_raised(as_outputs, 3))  # raised by the harness, about the unit's return value

    def synchronize(phase):  # what torch raises at the next sync after the unit's kernel faulted
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    from graphready.harness.session import PhaseClock

    assert raised_by_user(_raised(PhaseClock(synchronize), "sync"))  # seen first in graphready's frames


def test_an_internal_failure_names_the_check_the_exception_and_graphreadys_line():
    failure = InternalFailure.of("pointer audit", _raised(keys.key_of, None))
    assert failure.checks == ["pointer audit"] and failure.error.startswith("TypeError: ")
    assert failure.where.startswith("graphready/harness/keys.py:")
    assert "Traceback" in failure.traceback and "key_of" in failure.traceback
    message = failure.message()
    assert "graphready's own pointer audit check failed here" in message and failure.where in message
    assert "not a verdict" in message and "--verbose" in message


# -- a unit's result ------------------------------------------------------------------------------


def _unit_with_failures() -> UnitResult:
    result = UnitResult(name="u", device="cuda:0", capture="ok")
    result.findings.append(make_finding("GD202", "2 kernels escaped", unit="u", path="m.py", line=3))
    error = _raised(keys.key_of, None)
    result.add_internal_failure(InternalFailure.of("pointer audit", error), "m.py", 2)
    result.add_internal_failure(InternalFailure.of("state discovery", error), "m.py", 2)
    return result


def test_one_failure_hitting_two_checks_is_one_gd001_beside_the_verdict():
    result = _unit_with_failures()
    assert sorted(f.rule for f in result.findings) == ["GD001", "GD202"]
    [internal] = result.internal_errors()
    assert internal.name == "internal-error" and internal.internal and (internal.path, internal.line) == ("m.py", 2)
    assert "pointer audit, state discovery checks failed" in internal.message
    assert result.status() == "fail" and not result.poisons_worker()  # the verdict stands; the worker goes on


def test_a_unit_whose_only_trouble_is_a_failed_check_neither_passes_nor_fails():
    result = UnitResult(name="u", capture="ok")
    result.add_internal_failure(InternalFailure.of("kernels", _raised(keys.key_of, None)), "m.py", 2)
    assert result.status() == "internal-error"
    back = UnitResult.from_json(json.loads(json.dumps(result.to_json())))
    assert back.status() == "internal-error" and back.internal_failures[0].checks == ["kernels"]
    row = back.unit_row()
    assert row["status"] == "internal-error"
    assert row["internal_errors"] == [{"checks": ["kernels"], "error": back.internal_failures[0].error,
                                       "where": back.internal_failures[0].where}]


# -- the pool: planted bug, real serve loop -------------------------------------------------------


def test_a_failing_check_is_gd001_the_other_verdicts_stand_and_the_worker_goes_on(tmp_path):
    log = tmp_path / "builds.log"
    options = WorkerOptions(timeout_s=60.0, root=os.getcwd(),
                            factory_kwargs=json.dumps({"log": str(log), "plan": "noisy,ok,bad,ok"}))
    units = [UnitInfo(f"u{i}", None, TARGETS, 1) for i in range(4)]
    run = run_units(f"{TARGETS}:planted_units", units, options, spans_gpus=True,
                    command=(*CPU_WORKER, "--broken-check", "degenerate output"))
    noisy, ok, bad, after = run.results
    assert sorted(f.rule for f in noisy.findings) == ["GD001", "GD301"] and noisy.status() == "fail"
    [failure] = noisy.internal_failures
    assert failure.checks == ["degenerate output"]
    assert failure.error == "ReferenceError: weakly-referenced object no longer exists"
    assert failure.where.startswith("graphready/harness/compare.py:")
    assert [f.rule for f in ok.findings] == ["GD001"] and ok.status() == "internal-error" and ok.error is None
    assert [f.rule for f in bad.findings] == ["GD201"]  # the unit raising stays a verdict, never GD001
    assert [f.rule for f in after.findings] == ["GD001"]
    # One worker checked u0..u2 (retired only after the unit that raised); the next one took u3.
    assert [w.units for w in run.workers] == [["u0", "u1", "u2"], ["u3"]]
    assert run.workers[0].end == "retired after u2" and len(log.read_text().splitlines()) == 2


# -- what `graphready check` prints and exits with -------------------------------------------------


def _results() -> list[UnitResult]:
    clean = UnitResult(name="clean", capture="ok", eager_ms=1.0, replay_ms=0.5, kernels=1, graph_kernels=1)
    return [_unit_with_failures(), clean]


def test_check_exits_3_on_a_failed_check_whatever_the_verdicts():
    results = _results()
    assert exit_code(results, Severity.WARNING) == 3
    assert exit_code(results[1:], Severity.WARNING) == 0
    verdict_only = UnitResult(name="v", findings=[make_finding("GD301", "differs", unit="v", path="m.py", line=1)])
    assert exit_code([verdict_only], Severity.WARNING) == 1


@pytest.mark.parametrize("fmt", ["text", "json", "sarif", "junit"])
def test_every_format_carries_the_internal_error_and_every_verdict(tmp_path, fmt):
    report = build_report(_results(), Severity.WARNING, fmt, tmp_path)
    assert "GD001" in report and "GD202" in report
    if fmt == "text":
        assert "graphready's own checks failed on 1 unit(s) (u; GD001)" in report and "exits 3" in report
    if fmt == "json":
        doc = json.loads(report)
        assert doc["summary"]["internal_errors"] == 1
        assert doc["units"][0]["status"] == "fail" and doc["units"][0]["internal_errors"][0]["checks"] == [
            "pointer audit", "state discovery"]
    if fmt == "sarif":
        results = json.loads(report)["runs"][0]["results"]
        assert sorted(r["ruleId"] for r in results) == ["GD001", "GD202"]
    if fmt == "junit":
        cases = ET.fromstring(report).iter("testcase")
        kinds = {case.get("name").rsplit(" ", 1)[-1]: [child.tag for child in case] for case in cases}
        assert kinds["GD001"] == ["error"] and kinds["GD202"] == ["failure"]  # a bug of ours is no failing verdict


def test_verbose_prints_each_failed_checks_traceback(capsys):
    print_tracebacks(_results())
    err = capsys.readouterr().err
    assert "unit 'u', pointer audit, state discovery check failed" in err and "Traceback" in err


# -- graphready report and the pytest helpers -------------------------------------------------------


def _check_document(tmp_path, results: list[UnitResult], shard: bool = False):
    run = {"target": "t:units", "factory_kwargs": {}, "listed": [r.name for r in results]}
    if shard:
        run["shard"] = {"index": 1, "count": 1}
    path = tmp_path / "check.json"
    path.write_text(build_report(results, Severity.WARNING, "json", tmp_path, run=run), encoding="utf-8")
    return path


def test_report_lists_internal_errors_apart_from_the_root_causes(tmp_path):
    from graphready.report.inputs import load_result
    from graphready.report.markdown import render_markdown
    from graphready.report.triage import build_triage

    triage = build_triage([load_result(_check_document(tmp_path, _results()))])
    assert [c.rule for c in triage.causes] == ["GD202"] and [f.rule for f in triage.internal] == ["GD001"]
    markdown = render_markdown(triage)
    assert "## graphready's own failures" in markdown and "**1** internal errors" in markdown
    assert markdown.index("graphready's own failures") < markdown.index("## Fix first")


def test_report_merged_exits_3_when_a_check_failed(tmp_path):
    from graphready.cli import main

    merged = tmp_path / "merged.json"
    path = _check_document(tmp_path, _results(), shard=True)
    assert main(["report", str(path), "--merged", str(merged), "--markdown", str(tmp_path / "r.md")]) == 3
    assert json.loads(merged.read_text())["summary"]["internal_errors"] == 1


def test_assert_graph_ready_raises_internal_error_not_a_failed_verdict(monkeypatch):
    from graphready.harness import pytest_plugin

    broken = UnitResult(name="u", capture="ok")
    broken.add_internal_failure(InternalFailure.of("pointer audit", _raised(keys.key_of, None)), "m.py", 2)
    monkeypatch.setattr(pytest_plugin, "check_graph_unit", lambda unit, name=None, **kwargs: broken)
    with pytest.raises(InternalError, match="unit 'u': pointer audit check: TypeError") as raised:
        pytest_plugin.assert_graph_ready("t:units", "u")
    assert "Traceback" in raised.value.details
    monkeypatch.setattr(pytest_plugin, "check_graph_unit", lambda unit, name=None, **kwargs: _unit_with_failures())
    with pytest.raises(AssertionError, match="GD202"):  # a verdict beside it: the test fails on the verdict
        pytest_plugin.assert_graph_ready("t:units", "u")
