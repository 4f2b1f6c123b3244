"""GD401 memory-growth and GD402 capture-alloc.

Growth: allocated bytes after each of several eager steps (outputs dropped); a strict rise at
every step is a history or cache that grows per step, and the tensors that survive a traced step
name the line. Capture-alloc: bytes the capture took from the graph's private pool.
"""

from __future__ import annotations

import gc
import weakref
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from graphready.harness.blame import call_user
from graphready.harness.frames import Location, current_user_frame
from graphready.harness.tracer import storage_key, tensors_in


def keeps_growing(samples: Sequence[int], min_steps: int = 3) -> bool:
    """True when allocated bytes rose at each of the last `min_steps` steps."""
    if len(samples) < min_steps + 1:
        return False
    tail = samples[-(min_steps + 1):]
    return all(b > a for a, b in zip(tail, tail[1:]))


class SurvivorTracer(TorchDispatchMode):
    """Notes each tensor an op creates, to find the ones still alive after the step ends."""

    def __init__(self, existing_storages: set[int], root: Path | None = None) -> None:
        super().__init__()
        self.existing = existing_storages
        self.root = root
        self.created: list[tuple[weakref.ref, Location | None, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = call_user(func, *args, **(kwargs or {}))
        location = None
        for t in tensors_in(out):
            key = storage_key(t)
            if key is None or key[0] in self.existing or t.device.type != "cuda":
                continue
            if location is None:
                location = current_user_frame(self.root)
            self.created.append((weakref.ref(t), location, key[1]))
        return out

    def survivors(self) -> dict[Location | None, int]:
        gc.collect()
        alive: dict[Location | None, int] = {}
        seen: set[int] = set()
        for ref, location, nbytes in self.created:
            t = ref()
            if t is None:
                continue
            key = storage_key(t)
            if key is None or key[0] in seen:
                continue
            seen.add(key[0])
            alive[location] = alive.get(location, 0) + nbytes
        return alive


def growth_samples(step: Callable[[], Any], device: torch.device, steps: int) -> list[int]:
    samples = []
    for _ in range(steps):
        out = step()
        del out
        torch.cuda.synchronize(device)
        samples.append(torch.cuda.memory_allocated(device))
    return samples


def growth_message(per_step: int, where: str) -> str:
    return (
        f"allocated memory grows by about {per_step} bytes every eager step{where}: a history or cache "
        "that grows per step runs out of memory and cannot be captured at a fixed address"
    )


def capture_alloc_message(total: int, by_line: dict[Location | None, int], limit: int) -> str:
    top = sorted(((n, loc) for loc, n in by_line.items() if loc is not None and n >= 2**20), key=lambda x: -x[0])[:3]
    detail = ", ".join(f"{loc.describe()} {n / 2**20:.1f} MiB" for n, loc in top)
    text = f"capture took {total / 2**20:.1f} MiB from the graph's private pool (limit {limit / 2**20:.0f} MiB)"
    if detail:
        text += f"; largest: {detail}"
    return text + "; preallocate these buffers outside the graph and write into them (out=, copy_)"
