"""A `serve` worker whose check calls each unit once, eagerly, on the CPU: for the CPU tests of the pool.

It runs the real serve loop (load once, stream events, retire after a unit that failed); only the GPU
check is replaced. A unit that raises is reported as a failed capture (which retires the worker, as a
real failed capture does); one that aborts the process or sleeps is lost the way a crashing or
hanging GPU unit is. With `--cold` (the cold pass) the call stands for a capture with no warm-up:
it reports first-call work (GD203 info) or, when the unit raises, a cold capture failure.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from graphready.findings import Severity
from graphready.harness.frames import relative_path
from graphready.harness.result import UnitResult, make_finding
from graphready.harness.unit import callable_location
from graphready.harness.worker import Events, build_parser, serve


def eager_check(unit, on_phase) -> UnitResult:
    result = UnitResult(name=unit.name, device="cpu")
    on_phase("capture")
    try:
        unit.fn(*unit.make_inputs(0))
        result.capture = "ok"
    except Exception as exc:
        path, line = callable_location(unit.fn)
        result.capture = "failed"
        result.findings.append(make_finding("GD201", f"capture failed: {exc}", unit=unit.name,
                                            path=relative_path(path, Path.cwd()), line=line))
    on_phase("replay")
    return result


def cold_check(unit, on_phase) -> UnitResult:
    result = eager_check(unit, on_phase)
    failed = result.capture == "failed"
    path, line = callable_location(unit.fn)
    result.findings = [make_finding("GD203", "cold capture failed" if failed else "first-call work", unit=unit.name,
                                    path=relative_path(path, Path.cwd()), line=line,
                                    severity=Severity.WARNING if failed else Severity.INFO)]
    return result


def main() -> int:
    args = build_parser().parse_args()
    return serve(args.target, json.loads(args.units), json.loads(args.factory_kwargs), args.gpus,
                 Events(args.events_fd), cold_check if args.cold else eager_check)


if __name__ == "__main__":
    sys.exit(main())
