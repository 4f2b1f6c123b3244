"""Run worker processes with a timeout and turn whatever happens to them into a report.

A crash, a hang or a CUDA error in one unit's worker becomes a finding for that unit; the run
goes on with the next one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import graphready
from graphready.harness.result import UnitResult, make_finding
from graphready.harness.target import TargetError

LIST_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class UnitInfo:
    """What the parent knows about a unit without importing it: from the listing worker."""

    name: str
    device: str | None
    path: str
    line: int


@dataclass(frozen=True)
class WorkerOptions:
    steps: int = 8
    capture_alloc_limit: int = 512 * 2**20
    timeout_s: float = 600.0
    factory_kwargs: str = "{}"  # JSON
    root: str = os.getcwd()


def _env() -> dict[str, str]:
    env = dict(os.environ)
    package_parent = str(Path(graphready.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH", "")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


@dataclass
class WorkerExit:
    payload: dict | None
    returncode: int | None  # None: killed at the timeout
    stderr_tail: str
    phase: str


def run_worker(args: list[str], timeout_s: float, cwd: str) -> WorkerExit:
    """Run `python -m graphready.harness.worker ARGS --out F` in its own session; kill it at the timeout."""
    with tempfile.TemporaryDirectory(prefix="graphready-") as tmp:
        out = os.path.join(tmp, "out.json")
        phase_file = os.path.join(tmp, "phase")
        cmd = [sys.executable, "-m", "graphready.harness.worker", *args, "--out", out, "--phase-file", phase_file]
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )
        try:
            _, stderr = proc.communicate(timeout=timeout_s)
            returncode: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            _, stderr = proc.communicate()
            returncode = None
        payload = None
        if os.path.exists(out):
            with open(out, encoding="utf-8") as handle:
                payload = json.load(handle)
        phase = Path(phase_file).read_text(encoding="utf-8").strip() if os.path.exists(phase_file) else "start-up"
    tail = "\n".join((stderr or "").strip().splitlines()[-3:])
    return WorkerExit(payload, returncode, tail, phase)


def list_units(target: str, options: WorkerOptions) -> list[UnitInfo]:
    """The target's units, listed by a worker (the factory may touch CUDA; this process must not)."""
    result = run_worker(
        ["list", target, "--root", options.root, "--factory-kwargs", options.factory_kwargs],
        LIST_TIMEOUT_S,
        options.root,
    )
    if result.payload is None:
        why = "timed out" if result.returncode is None else f"exited with code {result.returncode}"
        raise TargetError(f"listing the units of {target!r} {why}: {result.stderr_tail or 'no output'}")
    if "error" in result.payload:
        raise TargetError(result.payload["error"])
    return [UnitInfo(**row) for row in result.payload["units"]]


def _signal_name(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"


def check_isolated(target: str, unit: UnitInfo, gpu: int, options: WorkerOptions) -> UnitResult:
    """Check one unit in its own worker process; a crash or hang is reported, never raised."""
    args = [
        "run", target, "--unit", unit.name, "--gpu", str(gpu), "--root", options.root,
        "--steps", str(options.steps), "--capture-alloc-limit", str(options.capture_alloc_limit),
        "--factory-kwargs", options.factory_kwargs,
    ]  # fmt: skip
    exit_ = run_worker(args, options.timeout_s, options.root)
    device = unit.device or f"cuda:{gpu}"
    if exit_.payload is not None and "result" in exit_.payload:
        return UnitResult.from_json(exit_.payload["result"])
    if exit_.payload is not None and "fatal" in exit_.payload:
        message = exit_.payload["fatal"]
    elif exit_.returncode is None:
        message = f"the worker hung: killed after {options.timeout_s:g}s during {exit_.phase}"
    else:
        detail = f": {exit_.stderr_tail}" if exit_.stderr_tail else ""
        message = f"the worker died ({_signal_name(exit_.returncode)}) during {exit_.phase}{detail}"
    result = UnitResult(name=unit.name, device=device, error=message)
    if exit_.phase.startswith("capture"):
        result.capture = "failed"
    result.findings.append(make_finding("GD201", message, unit=unit.name, path=unit.path, line=unit.line))
    return result
