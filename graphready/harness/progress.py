"""What `graphready check` shows while workers load and check: units done, ETA, the current unit.

On a terminal a live bar; elsewhere (CI logs) one line per loaded worker and per finished unit.
"""

from __future__ import annotations

import threading
import time

from rich.markup import escape  # unit names carry capture keys in brackets (`step[b1]`), not markup

from graphready.harness.isolation import UnitInfo, WorkerOptions
from graphready.harness.pool import Listener, WorkerRecord
from graphready.harness.result import UnitResult
from graphready.harness.scheduler import Run, run_units

STATUS_STYLE = {"pass": "[green]pass[/]", "fail": "[red]fail[/]", "error": "[yellow]error[/]",
                "internal-error": "[magenta]internal-error[/]"}


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def _timing(result: UnitResult) -> str:
    row = result.unit_row()
    if "check_s" not in row:
        return ""
    return f" (check {row['check_s']:.1f}s: capture {row['capture_s']:.1f}s, replay check {row['replay_check_s']:.1f}s)"


class ProgressListener(Listener):
    """Feeds a rich Progress (terminal) or prints plain lines (not a terminal)."""

    def __init__(self, console, progress, task, total: int):
        self.console = console
        self.progress = progress
        self.task = task
        self.total = total
        self.done = 0
        self.started = time.monotonic()
        self.checking_since: float | None = None  # the first load is not a per-unit cost: ETA starts after it
        self.running: dict[int, str] = {}  # worker id -> what it is doing
        self.lock = threading.Lock()

    def _show(self) -> None:
        if self.progress is not None:
            description = " | ".join(self.running[k] for k in sorted(self.running)) or "starting workers"
            self.progress.update(self.task, description=description)

    def _print(self, text: str) -> None:
        (self.progress.console if self.progress is not None else self.console).print(text, highlight=False)

    def worker_started(self, record: WorkerRecord) -> None:
        with self.lock:
            where = f"cuda:{record.gpu}" if record.gpu is not None else "all GPUs"
            self.running[record.id] = f"worker {record.id} loading on {where}"
            self._show()

    def worker_loaded(self, record: WorkerRecord) -> None:
        with self.lock:
            if self.checking_since is None:
                self.checking_since = time.monotonic()
            self._print(f"worker {record.id} loaded the target in {record.load_s:.1f}s")

    def unit_started(self, unit: UnitInfo, record: WorkerRecord) -> None:
        with self.lock:
            where = unit.device or (f"cuda:{record.gpu}" if record.gpu is not None else "")
            self.running[record.id] = escape(unit.name) + (f" on {where}" if where else "")
            self._show()

    def unit_done(self, result: UnitResult) -> None:
        with self.lock:
            self.done += 1
            if self.progress is not None:
                self.progress.advance(self.task)
            now = time.monotonic()
            elapsed = now - self.started
            eta = (now - (self.checking_since or self.started)) / self.done * (self.total - self.done)
            status = STATUS_STYLE.get(result.status(), result.status())
            self._print(f"[{self.done}/{self.total}] {status} {escape(result.name)}{_timing(result)}"
                        + (f", ETA {_duration(eta)}" if self.done < self.total else f", {_duration(elapsed)} in all"))

    def worker_ended(self, record: WorkerRecord) -> None:
        with self.lock:
            self.running.pop(record.id, None)
            self._show()


def run_with_progress(target: str, units: list[UnitInfo], options: WorkerOptions, gpus: int, jobs: int,
                      spans_gpus: bool) -> Run:
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    console = Console(stderr=True)
    if not console.is_terminal:
        return run_units(target, units, options, gpus=gpus, jobs=jobs, spans_gpus=spans_gpus,
                         listener=ProgressListener(console, None, None, len(units)))
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(f"checking {target}", total=len(units))
        listener = ProgressListener(console, progress, task, len(units))
        return run_units(target, units, options, gpus=gpus, jobs=jobs, spans_gpus=spans_gpus, listener=listener)
