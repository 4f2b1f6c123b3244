"""Where a block of device memory was allocated, from the caching allocator's recorded history.

The worker turns recording on before it builds the target, so a buffer made at load time (a
weight, a cache's table) has its Python stack too. Only allocations keep a stack (`context=
"alloc"`), which is what locating needs and keeps the cost per allocation small. The trace is a
ring of the latest `MAX_ENTRIES` events; a block allocated before that has no stack and its
finding falls back to the unit's callable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from graphready.harness.frames import Location, is_user_file, relative_path

MAX_ENTRIES = 50_000
FREE_ACTIONS = ("free_requested", "free_completed")
_recording = False


def start_recording() -> None:
    """Record every allocation's Python stack from now on (once per process)."""
    global _recording
    if _recording:
        return
    import torch

    torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python", max_entries=MAX_ENTRIES)
    _recording = True


def user_location(frames: Iterable[dict[str, Any]], root: Path | None = None) -> Location | None:
    """The innermost frame in user code of a recorded stack (the allocator lists innermost first)."""
    for frame in frames:
        filename = frame.get("filename", "")
        if is_user_file(filename):
            return Location(relative_path(filename, root), int(frame.get("line", 0)))
    return None


def allocation_event(traces: list[dict[str, Any]], address: int) -> dict[str, Any] | None:
    """The latest recorded allocation that covered `address` (its `frames` and `size`), if still traced."""
    for event in reversed(traces):
        start = event.get("addr", -1)
        if event.get("action") == "alloc" and start <= address < start + event.get("size", 0):
            return event
    return None


def latest_time(traces: list[dict[str, Any]]) -> int | None:
    """The time stamp of the newest event, a marker to look for frees after it (None without stamps)."""
    stamps = [event["time_us"] for event in traces if "time_us" in event]
    return max(stamps) if stamps else None


def freed_after(traces: list[dict[str, Any]], addresses: Iterable[int], since: int) -> set[int]:
    """Which of the block `addresses` were freed by an event stamped after `since`."""
    wanted = set(addresses)
    return {
        event["addr"]
        for event in traces
        if event.get("action") in FREE_ACTIONS and event.get("addr") in wanted and event.get("time_us", since) > since
    }
