"""Spread units over GPUs: one worker process per unit, at most `jobs` at a time per GPU.

A unit pinned to a device (`Unit(device="cuda:1")`) runs in that device's slots; the others go
round-robin over the GPUs given with `--gpus`.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from graphready.harness.isolation import UnitInfo, WorkerOptions, check_isolated
from graphready.harness.result import UnitResult


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


def run_units(
    target: str,
    units: list[UnitInfo],
    options: WorkerOptions,
    *,
    gpus: int = 1,
    jobs: int = 1,
    on_start: Callable[[UnitInfo, int], None] = lambda unit, gpu: None,
    on_done: Callable[[UnitResult], None] = lambda result: None,
) -> list[UnitResult]:
    """Check every unit, each in its own worker; results come back in the order of `units`."""
    assigned = assign_gpus(units, gpus)
    slots: dict[int, threading.Semaphore] = {gpu: threading.Semaphore(jobs) for gpu in set(assigned)}

    def one(unit: UnitInfo, gpu: int) -> UnitResult:
        with slots[gpu]:
            on_start(unit, gpu)
            result = check_isolated(target, unit, gpu, options)
            on_done(result)
            return result

    # One thread per unit: the per-GPU semaphores, not the pool, bound how many workers run.
    with ThreadPoolExecutor(max_workers=max(1, len(units))) as pool:
        futures = [pool.submit(one, unit, gpu) for unit, gpu in zip(units, assigned)]
        return [future.result() for future in futures]
