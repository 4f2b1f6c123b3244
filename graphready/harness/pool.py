"""Worker processes that load a target once and check its units in turn; a lost worker is replaced.

A lane is an ordered list of units served by one worker at a time. `run_lane` starts a worker for
the lane and follows its event stream. When the worker retires (a unit failed capture, which
poisons its CUDA context), crashes or hangs, that unit is reported and a fresh worker starts at the
next unit: only failures pay another load. A target that cannot be loaded at all fails every unit
of the lane with the reason, without retrying.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from graphready.harness.blame import InternalFailure
from graphready.harness.isolation import UnitInfo, WorkerOptions, signal_name, worker_env
from graphready.harness.result import UnitResult, make_finding

WORKER_COMMAND = (sys.executable, "-m", "graphready.harness.worker")
EXIT_GRACE_S = 30.0
_TIMED_OUT = object()
_live: set["WorkerProcess"] = set()
_live_lock = threading.Lock()


@dataclass
class WorkerRecord:
    """One worker process of the run: where it ran, how long it took to load, what it checked, how it ended."""

    id: int
    gpu: int | None  # None: it saw every GPU (a target placed over several)
    units: list[str] = field(default_factory=list)
    load_s: float | None = None
    end: str = ""

    def to_json(self) -> dict:
        return {"id": self.id, "gpu": self.gpu, "load_s": self.load_s, "units": list(self.units), "end": self.end}


class Listener:
    """What the parent shows while the run goes on (progress); every method may be overridden."""

    def worker_started(self, record: WorkerRecord) -> None: ...
    def worker_loaded(self, record: WorkerRecord) -> None: ...
    def unit_started(self, unit: UnitInfo, record: WorkerRecord) -> None: ...
    def unit_done(self, result: UnitResult) -> None: ...
    def worker_ended(self, record: WorkerRecord) -> None: ...


class WorkerProcess:
    """A `serve` worker in its own session: its events arrive on a pipe, its output goes to a file."""

    def __init__(self, command: list[str], cwd: str):
        read_fd, write_fd = os.pipe()
        self.log = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(
                [*command, "--events-fd", str(write_fd)], cwd=cwd, env=worker_env(), stdin=subprocess.DEVNULL,
                stdout=self.log, stderr=subprocess.STDOUT, pass_fds=(write_fd,), start_new_session=True,
            )
        finally:
            os.close(write_fd)
        self.events: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, args=(read_fd,), daemon=True).start()
        with _live_lock:
            _live.add(self)

    def _read(self, fd: int) -> None:
        with os.fdopen(fd, encoding="utf-8", errors="replace") as stream:
            for line in stream:
                try:
                    self.events.put(json.loads(line))
                except ValueError:
                    continue
        self.events.put(None)

    def next_event(self, timeout: float):
        """The next event, None once the worker closed its pipe (exited), or _TIMED_OUT."""
        try:
            return self.events.get(timeout=max(timeout, 0.0))
        except queue.Empty:
            return _TIMED_OUT

    def finish(self, kill: bool) -> int | None:
        """Wait for the worker to exit (killing its process group first if asked, or if it lingers)."""
        if not kill:
            try:
                self.proc.wait(timeout=EXIT_GRACE_S)
            except subprocess.TimeoutExpired:
                kill = True
        if kill:
            self.kill()
        code = self.proc.wait()
        with _live_lock:
            _live.discard(self)
        return None if kill else code

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def tail(self, lines: int = 3) -> str:
        self.log.seek(0, os.SEEK_END)
        size = self.log.tell()
        self.log.seek(max(0, size - 8192))
        text = self.log.read().decode("utf-8", errors="replace")
        self.log.close()
        return "\n".join(text.strip().splitlines()[-lines:])


def kill_all() -> None:
    """Kill every worker still running (the parent was interrupted)."""
    with _live_lock:
        workers = list(_live)
    for worker in workers:
        worker.kill()


def _unchecked(unit: UnitInfo, gpu: int | None, message: str, worker: int | None = None) -> UnitResult:
    """A unit with no verdict: `message` says why (a lost worker, the run's time limit)."""
    device = unit.device or (f"cuda:{gpu}" if gpu is not None else None)
    return UnitResult(name=unit.name, device=device, error=message, worker=worker)


def hung_message(seconds: float, phase: str) -> str:
    """Why a unit killed at the timeout has no verdict: a GPU busy with other work hangs it as a deadlock does."""
    return (f"the worker hung: killed after {seconds:g}s during {phase} (a step slower than the timeout, a deadlock, "
            "or a GPU busy with other work); not checked, not a verdict")


# Check phases that run graphready's code alone (reading the captured graph through the driver API), not the unit's
OWN_PHASES = ("pointer audit",)


def _lost(unit: UnitInfo, message: str, gpu: int | None, phase: str, worker: int, verdict: bool = True) -> UnitResult:
    """The report of a unit whose worker died or hung: no verdict (status error); for a death, GD201 at the unit's
    callable too (a crash in the unit's code or kernels is the unit's failure; a hang need not be), except in a
    phase of graphready's own code, where the death is graphready's (GD001: the run exits 3)."""
    result = _unchecked(unit, gpu, message, worker)
    if not verdict:
        return result
    if phase in OWN_PHASES:
        result.add_internal_failure(InternalFailure([phase], message, "", ""), unit.path, unit.line)
        return result
    if phase.startswith("capture"):
        result.capture = "failed"
    result.findings.append(make_finding("GD201", message, unit=unit.name, path=unit.path, line=unit.line))
    return result


def serve_args(target: str, units: list[UnitInfo], gpu: int | None, gpus: int, options: WorkerOptions) -> list[str]:
    args = [
        "serve", target, "--units", json.dumps([u.name for u in units]), "--root", options.root,
        "--steps", str(options.steps), "--capture-alloc-limit", str(options.capture_alloc_limit),
        "--factory-kwargs", options.factory_kwargs, "--gpus", str(gpus),
    ]  # fmt: skip
    return args + (["--gpu", str(gpu)] if gpu is not None else [])


@dataclass
class _Follow:
    """What one worker did with the lane's remaining units."""

    results: list[UnitResult] = field(default_factory=list)
    load_failed: str | None = None  # the target never loaded: every remaining unit fails with this


def out_of_time(options: WorkerOptions) -> bool:
    return options.run_deadline is not None and time.monotonic() >= options.run_deadline


NOT_CHECKED = "not checked: "  # how a unit the run stopped before its verdict reads (no finding: it has none)


def time_limit_message(options: WorkerOptions) -> str:
    return f"{NOT_CHECKED}the run's --time-limit of {options.time_limit_s:g}s ran out"


def _follow(worker: WorkerProcess, remaining: list[UnitInfo], record: WorkerRecord, gpu: int | None,
            options: WorkerOptions, listener: Listener) -> _Follow:
    by_name = {u.name: u for u in remaining}
    out = _Follow()
    current: UnitInfo | None = None
    phase = "load"
    deadline = time.monotonic() + options.load_timeout_s
    while True:
        wait = deadline - time.monotonic()
        if options.run_deadline is not None:
            wait = min(wait, options.run_deadline - time.monotonic())
        event = worker.next_event(wait)
        if event is _TIMED_OUT and out_of_time(options):
            worker.finish(kill=True)
            record.end = "stopped: the run's time limit ran out"
            if current is not None:
                stopped = _unchecked(current, gpu, f"{time_limit_message(options)} during {phase}", record.id)
                out.results.append(stopped)
                listener.unit_done(stopped)
            return out
        if event is _TIMED_OUT:
            worker.finish(kill=True)
            if record.load_s is None:
                out.load_failed = f"the worker hung: killed after {options.load_timeout_s:g}s while loading the target"
                record.end = "hung while loading"
            else:
                lost = _lost(current or remaining[len(out.results)], hung_message(options.timeout_s, phase), gpu,
                             phase, record.id, verdict=False)
                out.results.append(lost)
                listener.unit_done(lost)
                record.end = f"killed: {lost.name} hung during {phase}"
            return out
        if event is None:
            code = worker.finish(kill=False)
            why = "the worker died" if code is None else f"the worker died ({signal_name(code)})"
            detail = worker.tail()
            detail = f": {detail}" if detail else ""
            if current is not None:
                out.results.append(_lost(current, f"{why} during {phase}{detail}", gpu, phase, record.id))
                listener.unit_done(out.results[-1])
                record.end = f"died during {current.name} ({phase})"
            elif record.load_s is None:
                out.load_failed = f"{why} while loading the target{detail}"
                record.end = "died while loading"
            elif not out.results:
                out.load_failed = f"{why} before checking any unit{detail}"
                record.end = "exited before checking"
            else:
                record.end = "exited"
            return out
        kind = event.get("event")
        now = time.monotonic()
        if kind == "loaded":
            record.load_s = float(event.get("seconds", 0.0))
            listener.worker_loaded(record)
            deadline = now + options.timeout_s
        elif kind == "load-failed":
            worker.finish(kill=False)
            out.load_failed = f"cannot load the target: {event.get('message', '')}"
            record.end = "failed to load"
            return out
        elif kind == "start" and event.get("unit") in by_name:
            current, phase = by_name[event["unit"]], "start"
            record.units.append(current.name)
            listener.unit_started(current, record)
            deadline = now + options.timeout_s
        elif kind == "phase":
            phase = str(event.get("phase", phase))
        elif kind == "result" and current is not None:
            result = UnitResult.from_json(event["result"])
            result.worker = record.id
            out.results.append(result)
            listener.unit_done(result)
            current = None
            deadline = now + options.timeout_s
        elif kind in ("retire", "done"):
            worker.finish(kill=False)
            record.end = "finished" if kind == "done" else f"retired after {event.get('unit')}"
            return out


def run_lane(target: str, units: list[UnitInfo], gpu: int | None, options: WorkerOptions, listener: Listener,
             next_id: Callable[[], int], gpus: int = 1, command: tuple[str, ...] = WORKER_COMMAND,
             ) -> tuple[list[UnitResult], list[WorkerRecord]]:
    """Check `units` in order with as few workers as failures allow; results come back in that order."""
    results: list[UnitResult] = []
    records: list[WorkerRecord] = []
    remaining = list(units)
    while remaining:
        if out_of_time(options):
            for unit in remaining:  # no finding: the run stopped, the unit has no verdict
                unchecked = _unchecked(unit, gpu, time_limit_message(options))
                results.append(unchecked)
                listener.unit_done(unchecked)
            break
        record = WorkerRecord(next_id(), gpu)
        records.append(record)
        worker = WorkerProcess([*command, *serve_args(target, remaining, gpu, gpus, options)], options.root)
        listener.worker_started(record)
        try:
            outcome = _follow(worker, remaining, record, gpu, options, listener)
        finally:
            worker.finish(kill=True)
        listener.worker_ended(record)
        results += outcome.results
        remaining = remaining[len(outcome.results):]
        if outcome.load_failed is not None:
            for unit in remaining:
                lost = _lost(unit, outcome.load_failed, gpu, "load", record.id)
                results.append(lost)
                listener.unit_done(lost)
            break
    return results, records
