"""A `serve` worker whose check calls each unit eagerly on the CPU: for the CPU tests of the pool.

It runs the real serve loop (load once, stream events, retire after a unit that failed); only the GPU
check is replaced. A unit that raises is reported as a failed capture (which retires the worker, as a
real failed capture does); one that aborts the process or sleeps is lost the way a crashing or
hanging GPU unit is. Two calls of the step then go through two of the harness's own comparisons, each
guarded the way the session guards its checks (`graphready.harness.blame`): a step that differs from
itself is GD301, and a comparison that raises is GD001 while the worker goes on. `--broken-check NAME`
plants a bug in that comparison ("reproducibility" or "degenerate output"): it meets a dead weak proxy. With `--cold` (the cold
pass) the call stands for a capture with no warm-up: it reports first-call work (GD203 info) or, when
the unit raises, a cold capture failure.
"""

from __future__ import annotations

import json
import sys
import weakref
from pathlib import Path

from graphready.findings import Severity
from graphready.harness import compare
from graphready.harness.blame import InternalFailure, call_user, raised_by_user
from graphready.harness.frames import relative_path
from graphready.harness.result import UnitResult, make_finding
from graphready.harness.unit import callable_location
from graphready.harness.worker import Events, build_parser, serve

BROKEN_FLAG = "--broken-check"
CHECKS = {"reproducibility": ("first_difference", "GD301"), "degenerate output": ("degenerate", "GD302")}


def _location(unit) -> tuple[str, int]:
    path, line = callable_location(unit.fn)
    return relative_path(path, Path.cwd()), line


def eager_check(unit, on_phase) -> UnitResult:
    result = UnitResult(name=unit.name, device="cpu")
    path, line = _location(unit)
    on_phase("capture")
    try:
        first = compare.as_outputs(call_user(unit.fn, *call_user(unit.make_inputs, 0)))
        second = compare.as_outputs(call_user(unit.fn, *call_user(unit.make_inputs, 0)))
        result.capture = "ok"
    except Exception as exc:
        result.capture = "failed"
        result.findings.append(make_finding("GD201", f"capture failed: {exc}", unit=unit.name, path=path, line=line))
        return result
    on_phase("replay")
    for check, (function, code) in CHECKS.items():
        try:
            problem = getattr(compare, function)(first, second, *((0.0, 0.0) if code == "GD301" else ()))
        except Exception as exc:
            if raised_by_user(exc):
                raise
            result.add_internal_failure(InternalFailure.of(check, exc), path, line)
            continue
        if problem:
            result.findings.append(make_finding(code, problem, unit=unit.name, path=path, line=line))
    return result


def cold_check(unit, on_phase) -> UnitResult:
    result = eager_check(unit, on_phase)
    failed = result.capture == "failed"
    path, line = _location(unit)
    result.findings = [make_finding("GD203", "cold capture failed" if failed else "first-call work", unit=unit.name,
                                    path=path, line=line, severity=Severity.WARNING if failed else Severity.INFO)]
    result.internal_failures = []
    return result


class _Gone:
    pass


def plant_broken_check(check: str) -> None:
    """Make the harness's own comparison behind `check` meet a dead weak proxy where it expects the second
    output: it raises ReferenceError in graphready's code, as the pointer audit once did (issue 26)."""
    name = CHECKS[check][0]
    real = getattr(compare, name)
    gone = _Gone()
    dead = weakref.proxy(gone)
    del gone

    def broken(first, second, *args):
        return real(first, (dead,) * len(second), *args)

    setattr(compare, name, broken)


def main() -> int:
    argv = sys.argv[1:]
    if BROKEN_FLAG in argv:
        at = argv.index(BROKEN_FLAG)
        plant_broken_check(argv[at + 1])
        del argv[at:at + 2]
    args = build_parser().parse_args(argv)
    return serve(args.target, json.loads(args.units), json.loads(args.factory_kwargs), args.gpus,
                 Events(args.events_fd), cold_check if args.cold else eager_check)


if __name__ == "__main__":
    sys.exit(main())
