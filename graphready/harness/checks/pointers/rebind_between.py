"""GD305 between replays: an attribute the graph reads, re-bound by the code that runs between steps.

The step audit (`rebind`) sees what the step itself re-binds. An engine also runs code of its own
between replays: the input preparation (`make_inputs` here, `prepare_inputs`/`replay_prepare` in
an engine) and its decode loop (`Unit.loop`). `self.bias = new` there leaves the graph reading the
storage it captured just the same. After capture the harness keeps, for every owner path whose
storage the graph read, that storage's address (never the tensor); before the replays that follow
such code it looks again, path by path, and a path that now leads to another storage is a
finding, located by running that code once more under the line tracer restricted to those paths.
A re-bind to the same storage (`self.x = self.x.view(...)`, `self.seq_lens = self.buf[:bs]`) keeps
the graph's memory and is no finding.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

import torch

from graphready.harness.blame import raised_by_user
from graphready.harness.checks.pointers.rebind import Path, locate, rebound_message
from graphready.harness.frames import Location, relative_path
from graphready.harness.reach import follow, roots_of
from graphready.harness.tracer import storage_key
from graphready.harness.unit import callable_location

PREPARATION = "the unit's input preparation (`make_inputs`), which an engine runs before every replay"
LOOP = "the unit's loop between its steps"


def storages(fn: Callable[..., Any], paths: Iterable[Path]) -> dict[Path, int | None]:
    """The storage address each path leads to now (None: gone, or not a tensor). Never raises: the
    roots are listed once, and an object that does not answer ends its path."""
    try:
        roots: dict[str, Any] = {}
        for name, obj in roots_of(fn):
            roots.setdefault(name, obj)
    except Exception:  # a callable whose carried objects cannot be listed: nothing to compare
        return {}
    found: dict[Path, int | None] = {}
    for root, steps in paths:
        value = follow(roots[root], steps) if root in roots else None
        try:
            key = storage_key(value) if issubclass(type(value), torch.Tensor) else None
        except Exception:  # a tensor subclass that cannot say where it lives
            key = None
        found[(root, steps)] = None if key is None else key[0]
    return found


class ReadPaths:
    """The owner paths whose storage at capture the captured graph reads, watched for re-binding."""

    def __init__(self, fn: Callable[..., Any], captured: dict[Path, int]):
        self.fn = fn
        self.captured = captured
        self.reported: set[Path] = set()

    @classmethod
    def of(cls, fn: Callable[..., Any], before: dict[Path, int], graph_reads: set[int],
           rebound_in_capture: Sequence[Path]) -> "ReadPaths":
        kept = {path: address for path, address in before.items()
                if address in graph_reads and path not in rebound_in_capture}
        return cls(fn, kept)

    def look(self) -> dict[Path, int | None]:
        """Where each watched path (not reported yet) leads now."""
        return storages(self.fn, [path for path in self.captured if path not in self.reported])

    def moved(self, since: dict[Path, int | None]) -> list[Path]:
        """Paths that lead to another storage than the one the graph read and than at `since` (a look
        taken before the watched code ran): what that code re-bound. What moved before is not its doing
        (the eager reference step's, say): the step audit, which compares with the addresses before
        capture, reports that."""
        return [path for path, address in self.look().items()
                if address is not None and address != self.captured[path] and address != since.get(path)]


def report(run, paths: Sequence[Path], who: str, again: Callable[[], Any], fallback: Location | None,
           detail: str = "") -> None:
    """One GD305 per line that re-binds `paths`, found by running `again()` (the code that re-bound them,
    once more) under the line tracer; at `fallback` when that run re-binds nothing or raises."""
    run.read_paths.reported.update(paths)
    try:
        sites = locate(run.unit.fn, paths, again, run.options.root)
    except Exception as exc:
        if not raised_by_user(exc):
            raise
        sites = {}
    by_line: dict[Location | None, list[Path]] = {}
    for path in paths:
        by_line.setdefault(sites.get(path), []).append(path)
    for location, at_line in by_line.items():
        run.add("GD305", rebound_message(at_line, f"by {who}, after capture") + detail, location or fallback)


def check_preparation(run, prepare: Callable[[], Any]) -> None:
    """Run the input preparation once more, as an engine does before the next replay; GD305 for each
    path the graph reads that it re-binds."""
    watch = run.read_paths
    if watch is None:
        return
    before = watch.look()
    prepare()
    moved = watch.moved(before)
    if moved:
        path, line = callable_location(run.unit.make_inputs)
        report(run, moved, PREPARATION, prepare, Location(relative_path(path, run.options.root), line))
