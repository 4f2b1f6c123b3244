"""GD306 undeclared-state: the state a step carries from one call to the next, found by running it.

Replay is compared with eager from the same restored state; that comparison means something only
when eager itself is reproducible from that state. This module runs eager twice from the restored
declared state first. When the two runs differ, it looks for the tensors the step mutated and did
not declare (HF's StaticCache keeps a position counter next to the keys and values it is declared
with): the reachable ones first (`graphready.harness.reach`), then every live tensor on the unit's
device, of which only those that explain the difference are named (naming one scans the heap, so
naming every live tensor made this search quadratic in the process's heap). If restoring
them too makes eager reproducible, they are named (GD306) and join the state for the rest of the
check, so the replay comparisons that follow test the graph, not the declaration.

A unit without `state` has its state discovered: every reachable tensor two eager steps on
different inputs change in place.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from graphready.harness.blame import call_user
from graphready.harness.compare import clone_all, first_difference
from graphready.harness.frames import Location, is_user_file, relative_path
from graphready.harness.reach import Reached, live_tensors, owner_names, reachable_tensors
from graphready.harness.tracer import storage_key, tensors_in, written_tensors

_CHUNK_WORDS = 1 << 24  # 128 MiB of int64 words per fingerprint pass, to bound the temporary memory
_DEVICE_TYPES = ("cuda", "cpu")


def storages(tensors: Sequence[torch.Tensor]) -> set[int]:
    return {key[0] for key in map(storage_key, tensors) if key}


def distinct(reached: Sequence[Reached], exclude: set[int] = frozenset()) -> list[Reached]:
    """One entry per storage (its shortest path), without the storages in `exclude`."""
    chosen: dict[int, Reached] = {}
    for item in reached:
        key = storage_key(item.tensor)
        if key is None or key[1] == 0 or key[0] in exclude or item.tensor.device.type not in _DEVICE_TYPES:
            continue
        chosen.setdefault(key[0], item)
    return list(chosen.values())


def _fingerprint(tensor: torch.Tensor) -> torch.Tensor:
    """Two int64 sums over the raw bytes of the tensor's storage (plain and position-weighted)."""
    data = torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(tensor.untyped_storage())
    whole = data.numel() // 8 * 8
    words = data[:whole].view(torch.int64)
    total = torch.zeros(2, dtype=torch.int64, device=tensor.device)
    for start in range(0, words.numel(), _CHUNK_WORDS):
        chunk = words[start:start + _CHUNK_WORDS]
        weights = torch.arange(start + 1, start + 1 + chunk.numel(), dtype=torch.int64, device=tensor.device)
        total[0] += chunk.sum()
        total[1] += (chunk * weights).sum()
    if whole < data.numel():
        tail = data[whole:].to(torch.int64)
        weights = torch.arange(1, tail.numel() + 1, dtype=torch.int64, device=tensor.device)
        total[0] += tail.sum()
        total[1] += (tail * weights).sum()
    return total


def fingerprints(watched: Sequence[Reached]) -> list[tuple[int, int] | None]:
    """A fingerprint per watched storage, read back to the host with one copy per device."""
    sums: list[torch.Tensor | None] = []
    for item in watched:
        try:
            sums.append(_fingerprint(item.tensor.detach()))
        except RuntimeError:  # a storage torch will not view as bytes (inference tensors and the like)
            sums.append(None)
    by_device: dict[torch.device, list[int]] = {}
    for i, value in enumerate(sums):
        if value is not None:
            by_device.setdefault(value.device, []).append(i)
    result: list[tuple[int, int] | None] = [None] * len(sums)
    for indices in by_device.values():
        for i, pair in zip(indices, torch.stack([sums[i] for i in indices]).tolist()):
            result[i] = (pair[0], pair[1])
    return result


def mutated_by(runs: Sequence[Callable[[], Any]], watched: Sequence[Reached]) -> list[Reached]:
    """The watched storages whose bytes change across `runs` (each run one eager step)."""
    prints = [fingerprints(watched)]
    for run in runs:
        run()
        prints.append(fingerprints(watched))
    return [item for i, item in enumerate(watched) if None not in {p[i] for p in prints} and len({p[i] for p in prints}) > 1]


def carried_over(step: Callable[[], Any], restore: Callable[[], None], watched: Sequence[Reached]) -> list[Reached]:
    """The watched storages that two steps from the same restored state leave different.

    A scratch buffer the step overwrites ends both runs the same; a counter or a cache the restore
    does not reset ends them differently.
    """
    restore()
    step()
    first = fingerprints(watched)
    restore()
    step()
    second = fingerprints(watched)
    return [item for item, a, b in zip(watched, first, second) if a is not None and b is not None and a != b]


def eager_difference(
    step: Callable[[], Sequence[torch.Tensor]],
    restore: Callable[[], None],
    state: Callable[[], Sequence[torch.Tensor]],
    atol: float,
    rtol: float,
) -> str | None:
    """None when two eager steps from the restored state agree (outputs and state), else how they differ."""
    restore()
    first, first_state = clone_all(step()), clone_all(state())
    restore()
    second, second_state = clone_all(step()), clone_all(state())
    return first_difference(first, second, atol, rtol) or first_difference(
        first_state, second_state, atol, rtol, what="state tensor"
    )


def _project_frame(root: Path) -> tuple[Location | None, Location | None]:
    """(innermost frame inside `root`, innermost user frame) of the running stack."""
    resolved_root = root.resolve()
    innermost = None
    frame = sys._getframe(2)
    while frame is not None:
        filename = frame.f_code.co_filename
        if is_user_file(filename):
            location = Location(relative_path(filename, root), frame.f_lineno)
            innermost = innermost or location
            try:
                Path(filename).resolve().relative_to(resolved_root)
                return location, innermost
            except ValueError:
                pass
        frame = frame.f_back
    return innermost, innermost


class WriteLocator(TorchDispatchMode):
    """Where each watched storage is first written during a step: the op's mutated arguments."""

    def __init__(self, watched: set[int], root: Path) -> None:
        super().__init__()
        self.watched = watched
        self.root = root
        self.sites: dict[int, tuple[Location | None, Location | None]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for tensor in written_tensors(func, args, kwargs):
            key = storage_key(tensor)
            if key and key[0] in self.watched and key[0] not in self.sites:
                self.sites[key[0]] = _project_frame(self.root)
        return call_user(func, *args, **kwargs)


def describe(item: Reached) -> str:
    t = item.tensor
    shape = "scalar" if t.dim() == 0 else "x".join(map(str, t.shape))
    return f"`{item.path}` ({shape} {str(t.dtype).removeprefix('torch.')})"


def undeclared_message(culprits: Sequence[Reached], difference: str, library_site: Location | None) -> str:
    names = ", ".join(describe(c) for c in culprits)
    them = "it" if len(culprits) == 1 else "them"
    where = f" (written at {library_site.describe()})" if library_site else ""
    return (
        f"eager is not reproducible from the declared state ({difference}): the step also mutates {names}"
        f"{where}, which the unit's state does not return; restoring {them} too makes eager reproducible, so a "
        f"replay compared from the declared state would be blamed for it. Add {them} to `state` (or leave "
        "`state` out to have it discovered)"
    )


def settle(run, static_inputs: tuple, fresh_inputs: tuple, state0: tuple) -> tuple:
    """Discover or complete the unit's state before the checks that restore it; returns the new state0.

    `run` is the session's UnitRun: its `state_fn` is replaced when state is discovered or completed.
    """
    unit = run.unit
    inputs = storages(tensors_in((static_inputs, fresh_inputs)))
    if unit.state is None:
        watched = distinct(reachable_tensors(unit.fn), inputs)
        found = mutated_by([lambda: run.step(fresh_inputs[0]), lambda: run.step(fresh_inputs[1])], watched)
        if found:
            tensors = [item.tensor for item in found]
            run.state_fn = lambda: tensors
            run.result.notes.append("state discovered: " + ", ".join(item.path for item in found))
            state0 = clone_all(tensors)
            run.snapshot_host()
        del watched

    def step():
        return run.step(static_inputs)

    def restore():
        run.restore(state0)

    difference = eager_difference(step, restore, run.state_tensors, unit.atol, unit.rtol)
    if difference is None:
        return state0
    exclude = inputs | storages(run.state_tensors()) | storages(state0)
    culprits = carried_over(step, restore, distinct(reachable_tensors(unit.fn), exclude))
    if not culprits:  # nothing reachable explains it: every live tensor on the unit's device
        culprits = _unreached_culprits(step, restore, exclude, unit.fn, run.device)
    if not culprits:
        return state0
    return _adopt(run, culprits, difference, state0, step)


def _unreached_culprits(step, restore, exclude: set[int], fn, device: torch.device) -> list[Reached]:
    """The live tensors outside the unit's reach that two steps leave different, named by whoever holds
    them. Only those few are named: naming costs passes over the whole heap."""
    known = exclude | storages([item.tensor for item in reachable_tensors(fn)])
    unreached = [t for t in live_tensors(device) if (key := storage_key(t)) and key[0] not in known]
    tensors = [item.tensor for item in carried_over(step, restore, distinct([Reached("", (), t) for t in unreached]))]
    del unreached
    return [Reached(name, (), tensor) for name, tensor in zip(owner_names(tensors), tensors)]


def _adopt(run, culprits: list[Reached], difference: str, state0: tuple, step) -> tuple:
    """Make the culprits part of the state if that makes eager reproducible; report them if declared."""
    unit = run.unit
    declared = run.state_fn
    extra = [item.tensor for item in culprits]

    def complete_state() -> list[torch.Tensor]:
        return (tensors_in(declared()) if declared is not None else []) + extra

    run.state_fn = complete_state
    complete0 = tuple(state0) + clone_all(extra)

    def restore():
        run.restore(complete0)

    if eager_difference(step, restore, run.state_tensors, unit.atol, unit.rtol) is not None:
        run.state_fn = declared  # something else (a Python counter, the RNG) also changes: not ours to name
        return state0
    if unit.state is None:
        run.result.notes.append("state discovered outside the unit's reach: " + ", ".join(c.path for c in culprits))
        return complete0
    locator = WriteLocator(storages(extra), run.options.root)
    restore()
    with locator:
        step()
    restore()
    project_site, library_site = locator.sites.get(storage_key(extra[0])[0], (None, None))
    run.add("GD306", undeclared_message(culprits, difference, library_site if library_site != project_site else None),
            project_site)
    return complete0
