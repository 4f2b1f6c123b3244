"""Spread units over lanes (one worker at a time each) and run the lanes side by side.

A target placed over several GPUs runs in one lane whose worker sees every GPU. Any other target's
units go round-robin over `--gpus` GPUs, `jobs` lanes per GPU; a unit pinned to a device
(`Unit(device="cuda:1")`) goes to that GPU's lanes.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field

from graphready.harness.checks.cold.cold_pass import cold_command, merge_lane
from graphready.harness.isolation import UnitInfo, WorkerOptions
from graphready.harness.pool import WORKER_COMMAND, Listener, WorkerRecord, kill_all, run_lane
from graphready.harness.result import UnitResult


@dataclass
class Run:
    results: list[UnitResult]  # in the order of the units given
    workers: list[WorkerRecord] = field(default_factory=list)

    @property
    def builds(self) -> int:
        """How many times a worker loaded the target."""
        return sum(1 for w in self.workers if w.load_s is not None)


def assign_gpus(units: list[UnitInfo], gpus: int) -> list[int]:
    """The GPU index each unit runs on, in the order of `units`."""
    assigned = []
    next_gpu = 0
    for unit in units:
        index = _pinned_index(unit.device)
        if index is None:
            index = next_gpu % gpus
            next_gpu += 1
        assigned.append(index)
    return assigned


def _pinned_index(device: str | None) -> int | None:
    if device is None or not device.startswith("cuda:"):
        return None
    try:
        return int(device.split(":", 1)[1])
    except ValueError:
        return None


def plan_lanes(units: list[UnitInfo], gpus: int, jobs: int, spans_gpus: bool) -> list[tuple[int | None, list[UnitInfo]]]:
    """(GPU or None for "every GPU", units in order) per lane."""
    if spans_gpus:
        return [(None, list(units))]
    lanes: dict[tuple[int, int], list[UnitInfo]] = {}
    per_gpu: dict[int, int] = {}
    for unit, gpu in zip(units, assign_gpus(units, gpus)):
        slot = per_gpu.get(gpu, 0)
        per_gpu[gpu] = slot + 1
        lanes.setdefault((gpu, slot % jobs), []).append(unit)
    return [(gpu, lane) for (gpu, _), lane in sorted(lanes.items())]


def run_units(
    target: str,
    units: list[UnitInfo],
    options: WorkerOptions,
    *,
    gpus: int = 1,
    jobs: int = 1,
    spans_gpus: bool = False,
    listener: Listener | None = None,
    command: tuple[str, ...] = WORKER_COMMAND,
) -> Run:
    """Check every unit; each lane's worker loads the target once and is replaced only after a failure."""
    listener = listener or Listener()
    counter = itertools.count(1)
    lock = threading.Lock()

    def next_id() -> int:
        with lock:
            return next(counter)

    lanes = plan_lanes(units, gpus, jobs, spans_gpus)
    outcomes: list[tuple[list[UnitResult], list[WorkerRecord]] | None] = [None] * len(lanes)
    errors: list[BaseException] = []

    def one(index: int, gpu: int | None, lane: list[UnitInfo]) -> None:
        try:
            cold = None
            if options.cold_capture:  # quiet: progress follows the main pass
                cold = run_lane(target, lane, gpu, options, Listener(), next_id, gpus, cold_command(command))
            outcomes[index] = merge_lane(run_lane(target, lane, gpu, options, listener, next_id, gpus, command), cold)
        except BaseException as exc:  # surfaced in the calling thread below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i, gpu, lane), daemon=True) for i, (gpu, lane) in enumerate(lanes)]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(timeout=0.5)
    except BaseException:
        kill_all()
        raise
    if errors:
        raise errors[0]
    by_name = {r.name: r for outcome in outcomes if outcome for r in outcome[0]}
    workers = sorted((w for outcome in outcomes if outcome for w in outcome[1]), key=lambda w: w.id)
    return Run([by_name[u.name] for u in units], workers)


def check_isolated(target: str, unit: UnitInfo, gpu: int, options: WorkerOptions) -> UnitResult:
    """Check one unit in a worker of its own; a crash or hang is reported, never raised."""
    pinned = _pinned_index(unit.device)
    results, _ = run_lane(target, [unit], gpu if pinned is None else pinned, options, Listener(),
                          itertools.count(1).__next__)
    return results[0]
