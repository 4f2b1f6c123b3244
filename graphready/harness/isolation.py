"""What the parent knows about a target's units, listed by a worker process so that the parent
never touches CUDA (the factory may), and the options every worker gets.

Checking happens in `graphready.harness.pool` (workers that load once and check many units).
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
from graphready.harness.target import TargetError

LIST_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class UnitInfo:
    """What the parent knows about a unit without importing it: from the listing worker."""

    name: str
    device: str | None
    path: str
    line: int
    reaches: tuple[tuple[str, int], ...] = ()  # (path, line) of the code the unit declares it runs

    def code(self) -> list[tuple[str, int]]:
        """Where the unit's code starts: its callable, then what it `reaches`."""
        return [(self.path, self.line), *self.reaches]


@dataclass(frozen=True)
class Listing:
    units: list[UnitInfo]
    spans_gpus: bool  # the factory places one model over every GPU it is given (one worker sees them all)


@dataclass(frozen=True)
class WorkerOptions:
    steps: int = 8
    capture_alloc_limit: int = 512 * 2**20
    timeout_s: float = 600.0  # per unit
    factory_kwargs: str = "{}"  # JSON
    root: str = os.getcwd()
    load_timeout_s: float = 1800.0  # building the target (a full-size model) once per worker
    cold_capture: bool = False  # also capture each unit with no warm-up, in workers of their own (GD203)
    time_limit_s: float | None = None  # the whole run's budget (--time-limit): units not done by then are not checked
    run_deadline: float | None = None  # time.monotonic() at which that budget runs out, set when the run starts


def worker_env() -> dict[str, str]:
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


def run_worker(args: list[str], timeout_s: float, cwd: str) -> WorkerExit:
    """Run `python -m graphready.harness.worker ARGS --out F` in its own session; kill it at the timeout."""
    with tempfile.TemporaryDirectory(prefix="graphready-") as tmp:
        out = os.path.join(tmp, "out.json")
        cmd = [sys.executable, "-m", "graphready.harness.worker", *args, "--out", out]
        proc = subprocess.Popen(
            cmd, cwd=cwd, env=worker_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
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
    tail = "\n".join((stderr or "").strip().splitlines()[-3:])
    return WorkerExit(payload, returncode, tail)


def list_target(target: str, options: WorkerOptions, gpus: int = 1) -> Listing:
    """The target's units, listed by a worker (the factory may touch CUDA; this process must not)."""
    result = run_worker(
        ["list", target, "--root", options.root, "--factory-kwargs", options.factory_kwargs, "--gpus", str(gpus)],
        LIST_TIMEOUT_S,
        options.root,
    )
    if result.payload is None:
        why = "timed out" if result.returncode is None else f"exited with code {result.returncode}"
        raise TargetError(f"listing the units of {target!r} {why}: {result.stderr_tail or 'no output'}")
    if "error" in result.payload:
        raise TargetError(result.payload["error"])
    units = [
        UnitInfo(row["name"], row["device"], row["path"], row["line"], tuple((p, n) for p, n in row["reaches"]))
        for row in result.payload["units"]
    ]
    return Listing(units, bool(result.payload["spans_gpus"]))


def list_units(target: str, options: WorkerOptions) -> list[UnitInfo]:
    return list_target(target, options).units


def signal_name(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit code {returncode}"
