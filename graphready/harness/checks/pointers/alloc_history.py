"""Where a block of device memory was allocated, from the caching allocator's recorded history.

The worker turns recording on before it builds the target, so a buffer made at load time (a
weight, a cache's table) has its Python stack too. Only allocations keep a stack (`context=
"alloc"`), which is what locating needs and keeps the cost per allocation small. The trace is a
ring of the latest `MAX_ENTRIES` events; a block allocated before that has no stack and its
finding falls back to the unit's callable. The user's line is often only a call into a library
(`model.to(device)`, a model's first forward); the library line inside it that made the buffer is
named too.
"""

from __future__ import annotations

import sysconfig
from pathlib import Path
from typing import Any, Iterable

from graphready.harness import frames as stack_frames
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


def library_line(frames: Iterable[dict[str, Any]]) -> str | None:
    """`file:line in function` of the library code between the allocation and the innermost user frame:
    the innermost frame outside torch and the standard library (a built-in target's cache, say), else the
    innermost frame (torch's own). None when the allocation came straight from user code, or from
    no user code at all (the harness)."""
    inside = []
    for frame in frames:
        if is_user_file(frame.get("filename", "")):
            break
        inside.append(frame)
    else:
        return None
    if not inside:
        return None
    plumbing = tuple(sorted(stack_frames._package_dirs(("torch",)) | _stdlib_dirs()))
    chosen = next((f for f in inside if not stack_frames._under(f.get("filename", ""), plumbing)), inside[0])
    name = f" in {chosen['name']}" if chosen.get("name") else ""
    return f"{_short_path(chosen.get('filename', ''))}:{int(chosen.get('line', 0))}{name}"


def _stdlib_dirs() -> set[str]:
    paths = sysconfig.get_paths()
    return {str(Path(paths[key]).resolve()) for key in ("stdlib", "platstdlib") if paths.get(key)}


def _short_path(filename: str) -> str:
    """An installed package's file from its package directory on (`transformers/cache_utils.py`)."""
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in filename:
            return filename.rsplit(marker, 1)[1]
    return relative_path(filename)


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
