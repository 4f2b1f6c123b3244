"""GD203 lazy-capture-work: capture a unit with no warm-up, in a worker of its own, and report the
first-call work that ran inside the capture.

The cold worker (`graphready.harness.worker serve --cold`) builds the target and the unit's setup,
then captures the unit before anything else ran it, under `FirstCallHooks` (JIT compiles, module
loads, host pinning) and the caching allocator's memory history with Python stacks: a block the
capture allocated that is still live once the step's outputs are dropped is something the step
kept (`self.buf = torch.empty(...)`), located at the user line that allocated it. A second
capture in the same process (warm) tells first-call work from work done on every step
(`lazy_report.first_call_work`). The captures run under no dispatch mode: torch.compile refuses
to compile under one, and a first-call compile is among what this check must see.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any, Callable

import torch

from graphready.harness.blame import InternalFailure, call_user, raised_by_user
from graphready.harness.checks.capture import _first_exception, _raised_by_graphready, new_graph
from graphready.harness.checks.compiled import uses_compiler_graphs
from graphready.harness.checks.cold.lazy_hooks import FirstCallHooks
from graphready.harness.checks.cold.lazy_report import CaptureObservation, Work, describe_bytes, lazy_findings
from graphready.harness.checks.user_code import is_user_code, traceback_location
from graphready.harness.frames import Location, relative_path
from graphready.harness.result import UnitResult, make_finding
from graphready.harness.unit import Unit, callable_location

_LIVE = "active_allocated"


def _history(enabled: bool) -> bool:
    """Turn the allocator's memory history (state and Python stacks of live blocks) on or off."""
    record = getattr(torch.cuda.memory, "_record_memory_history", None)
    if record is None:
        return False
    try:
        if enabled:
            record("state", context="alloc", stacks="python")
        else:
            record(None)
    except Exception:  # a torch without Python stacks in the history
        return False
    return True


def _live_blocks(device: torch.device) -> list[dict]:
    return [
        block
        for segment in torch.cuda.memory_snapshot()
        if segment.get("device") == device.index
        for block in segment.get("blocks", [])
        if block.get("state") == _LIVE
    ]


def _block_location(block: dict, root: Path | None) -> Location | None:
    for frame in block.get("frames") or []:  # innermost first
        filename = str(frame.get("filename", ""))
        if is_user_code(filename):
            return Location(relative_path(filename, root), int(frame.get("line", 0)))
    return None


def _kept_allocations(device: torch.device, before: set[int], root: Path | None) -> list[Work]:
    """New live blocks by the user line that allocated them. Blocks no user line made (the graph's
    own RNG state, made when a graph is registered) are torch's business, not the unit's."""
    by_line: dict[Location, int] = {}
    for block in _live_blocks(device):
        location = None if block["address"] in before else _block_location(block, root)
        if location is not None:
            by_line[location] = by_line.get(location, 0) + int(block.get("requested_size") or block.get("size", 0))
    return [Work("lazy-alloc", describe_bytes(nbytes), location) for location, nbytes in by_line.items()]


def observe_capture(step: Callable[[], Any], device: torch.device, root: Path | None, fallback: Location) -> CaptureObservation:
    """Capture `step()` once on a fresh stream and record the work it did. Never raises for capture errors."""
    observation = CaptureObservation()
    stream = torch.cuda.Stream(device=device)
    graph = new_graph()
    torch.cuda.synchronize(device)
    before = {block["address"] for block in _live_blocks(device)}
    history = _history(True)
    outputs = None
    try:
        with FirstCallHooks(root, fallback) as hooks:
            try:
                with torch.cuda.graph(graph, stream=stream):
                    outputs = step()
            except Exception as exc:  # the capture failed; this process is poisoned now
                first = _first_exception(exc)
                if _raised_by_graphready(first):
                    raise first from None  # a hook of ours: GD001 (cold_check_unit), not a cold capture failure
                observation.error = f"{type(first).__name__}: {first}"
                observation.error_location = traceback_location(first.__traceback__, root)
        observation.work = list(hooks.work)
        del outputs
        gc.collect()
        if history:
            try:
                observation.work += _kept_allocations(device, before, root)
            except Exception:  # the allocator's records are unreadable after a broken capture
                pass
    finally:
        if history:
            _history(False)
    return observation


def _inputs(unit: Unit) -> tuple:
    inputs = call_user(unit.make_inputs, 0)
    return tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)


def cold_check_unit(unit: Unit, device: torch.device, options, on_phase: Callable[[str], None] = lambda _: None) -> UnitResult:
    """GD203 for one unit: its cold capture compared with a warm one. `options` is a session CheckOptions.

    The unit's own errors are the main check's to report; an exception that gets out of here is
    graphready's (GD001 for the cold capture check), and the worker retires, since it may have broken
    off a capture."""
    result = UnitResult(name=unit.name, device=str(device))
    path, line = callable_location(unit.fn)
    fallback = Location(relative_path(path, options.root), line)
    phase = "cold capture"

    def phase_is(name: str) -> None:
        nonlocal phase
        phase = name
        on_phase(name)

    try:
        _cold_check(unit, device, options.root, fallback, result, phase_is)
    except Exception as exc:
        result.capture = "failed"
        result.add_internal_failure(InternalFailure.of(phase, exc), fallback.path, fallback.line)
    return result


def _cold_check(unit: Unit, device: torch.device, root: Path | None, fallback: Location, result: UnitResult,
                on_phase: Callable[[str], None]) -> None:
    if uses_compiler_graphs(unit.fn):
        result.notes.append("no capture without warm-up: torch.compile(mode=\"reduce-overhead\") captures this unit itself")
        return
    torch.cuda.set_device(device)
    on_phase("cold inputs")
    try:
        inputs = _inputs(unit)
    except Exception as exc:
        if not raised_by_user(exc):
            raise
        # the main check reports the unit's own errors
        result.notes.append(f"no capture without warm-up: make_inputs raised {type(exc).__name__}")
        return
    on_phase("cold capture")
    cold = observe_capture(lambda: call_user(unit.fn, *inputs), device, root, fallback)
    warm = None
    if cold.error is None:
        on_phase("warm capture")
        warm = observe_capture(lambda: call_user(unit.fn, *inputs), device, root, fallback)
    result.capture = "failed" if cold.error is not None or (warm is not None and warm.error is not None) else "ok"
    compared = warm if warm is not None and warm.error is None else None
    for finding in lazy_findings(cold, compared, fallback):
        location = finding.location or fallback
        result.findings.append(make_finding("GD203", finding.message, unit=unit.name, path=location.path,
                                            line=location.line, severity=finding.severity))
