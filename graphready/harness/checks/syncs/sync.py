"""GD101 sync: synchronizing CUDA ops during an eager step, found with torch's sync debug mode."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Callable

import torch

from graphready.harness.frames import Location, current_user_frame

SYNC_WARNING = "called a synchronizing CUDA operation"


def find_syncs(step: Callable[[], Any], root: Path | None = None) -> dict[Location | None, int]:
    """Run `step` once under `set_sync_debug_mode("warn")`; count syncs per user line, in order."""
    counts: dict[Location | None, int] = {}

    def record(message, category, filename, lineno, file=None, line=None):
        if SYNC_WARNING in str(message):
            location = current_user_frame(root)
            counts[location] = counts.get(location, 0) + 1
        else:
            original(message, category, filename, lineno, file, line)

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        original = warnings.showwarning
        warnings.showwarning = record
        previous = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("warn")
        try:
            step()
            torch.cuda.synchronize()
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    return counts


def sync_message(count: int) -> str:
    times = "once" if count == 1 else f"{count} times"
    return (
        f"synchronizing CUDA operation during an eager step ({times} per step at this line): "
        "the CPU waits for the GPU, and the same call fails a graph capture"
    )
