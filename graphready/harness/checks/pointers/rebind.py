"""GD305 rebound-state: an attribute the graph reads now holds a different tensor than at capture.

`self.bias = new` instead of `self.bias.copy_(new)`: the graph keeps the storage it captured, so
every replay reads (and writes) the old tensor while eager code sees the new one. The audit keeps
only addresses (holding the tensors would keep freed inputs alive and hide GD304): the storage of
every tensor the unit can reach, by owner path, just before capture; after capture and again after
the eager reference, a path whose storage changed and whose old storage the captured graph read is
a finding.

The line that re-bound it is found by running one more eager step under a line tracer
(`graphready.harness.linetrace`) that re-reads only those paths between user lines. Patching
`__setattr__` would miss slots, dict entries, list items and classes that define their own; the
line tracer sees any assignment, by whatever means, at the user line that made it.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from graphready.harness.frames import Location
from graphready.harness.linetrace import SegmentTracer
from graphready.harness.reach import Step, format_path, reachable_tensors, resolve
from graphready.harness.tracer import OpRecord, storage_key

Path = tuple[str, tuple[Step, ...]]  # (root name, steps)


def audit(fn: Callable[..., Any]) -> dict[Path, int]:
    """Owner path -> storage address of every tensor `fn` can reach, right now."""
    addresses = {}
    for item in reachable_tensors(fn):
        key = storage_key(item.tensor)
        if key is not None:
            addresses[(item.root, item.steps)] = key[0]
    return addresses


def read_addresses(records: Sequence[OpRecord]) -> set[int]:
    """Storages the captured graph reads or writes that were made outside the step."""
    return {address for record in records for address, _ in record.reads}


def rebound(before: dict[Path, int], after: dict[Path, int], graph_reads: set[int]) -> list[Path]:
    """Paths that now lead to another storage, where the graph uses the one they led to before."""
    return [path for path, old in before.items() if old in graph_reads and after.get(path, old) != old]


def _storage_at(fn: Callable[..., Any], path: Path) -> int | None:
    value = resolve(fn, *path)
    if not issubclass(type(value), torch.Tensor):
        return None
    key = storage_key(value)
    return None if key is None else key[0]


def locate(fn: Callable[..., Any], paths: Sequence[Path], step: Callable[[], Any], root=None) -> dict[Path, Location | None]:
    """The user line that assigns each path a new tensor during `step()` (None if no line does)."""
    last = {path: _storage_at(fn, path) for path in paths}
    sites: dict[Path, Location | None] = {}

    def boundary(location: Location | None, library: str | None) -> None:
        for path in paths:
            if path in sites:
                continue
            now = _storage_at(fn, path)
            if now != last[path]:
                sites[path] = location
                last[path] = now

    with SegmentTracer(boundary, root):
        step()
    return {path: sites.get(path) for path in paths}


def rebound_message(paths: Sequence[Path], by: str = "during the step") -> str:
    """`by` says who re-bound them: the step itself, or (GD305 between replays) the preparation or loop."""
    names = ", ".join(f"`{format_path(*path)}`" for path in paths)
    verb = "was" if len(paths) == 1 else "were"
    first = format_path(*paths[0])
    return (
        f"{names} {verb} re-bound to a new tensor {by}: the captured graph keeps the storage it held at capture "
        "and goes on reading and writing it, so replays never see the new value (and read freed memory once "
        f"nothing else holds the old tensor). Write into the existing tensor (`{first}.copy_(new)`, "
        f"`{first}[:n].copy_(new)`, `out=`) instead of assigning a new one"
    )


def report(run, paths: Sequence[Path], inputs: tuple, state0: tuple) -> None:
    """Locate each re-binding with one traced eager step and add one GD305 finding per line."""
    run.restore(state0)
    sites = locate(run.unit.fn, paths, lambda: run.step(inputs), run.options.root)
    run.restore(state0)
    torch.cuda.synchronize(run.device)
    by_line: dict[Location | None, list[Path]] = {}
    for path in paths:
        by_line.setdefault(sites[path], []).append(path)
    for location, at_line in by_line.items():
        run.add("GD305", rebound_message(at_line), location)
