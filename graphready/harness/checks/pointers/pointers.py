"""GD307 unknown-pointer on the GPU: read the captured graph's pointers and judge each one.

Right after capture (before any replay or harness allocation can reuse a block) the graph's node
arguments are read (`graph_params`) and classified against the allocator's snapshot and the
storages the unit names (`pointer_audit`). After the replay checks, the blocks that were fine at
capture are looked up again in the allocator's trace: one freed since then is a finding too.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import Any

import torch

from graphready.findings import Severity
from graphready.harness.checks.pointers import alloc_history
from graphready.harness.checks.pointers import graph_params
from graphready.harness.checks.pointers import pointer_audit as audit_rules
from graphready.harness.checks.pointers.reachable import reachable_tensors
from graphready.harness.frames import Location
from graphready.harness.reach import owner_names
from graphready.harness.tracer import storage_key, tensors_in

_OWNED_KINDS = ("input", "state", "output", "attribute", audit_rules.LIBRARY, audit_rules.UNKNOWN)


@dataclass
class CaptureAudit:
    """What the re-check after the replays needs: the live blocks the graph uses, and when that was."""

    watched: dict[audit_rules.Block, list[audit_rules.Verdict]]
    since: int | None


def _spans(kind: str, tensors: list[torch.Tensor]) -> list[audit_rules.Span]:
    spans = []
    for index, tensor in enumerate(tensors):
        key = storage_key(tensor)
        if key is not None and tensor.device.type == "cuda":
            spans.append(audit_rules.Span(key[0], key[0] + key[1], kind, f"{kind} {index}"))
    return spans


def owner_spans(unit: Any, inputs: tuple, state: list[torch.Tensor], outputs: tuple) -> list[audit_rules.Span]:
    """Storages of the static inputs, the state, the outputs, then every tensor the unit reaches."""
    roots = [unit.fn, *unit.reaches, unit.state, unit.setup]
    reached = reachable_tensors(root for root in roots if root is not None)
    return [*_spans("input", tensors_in(inputs)), *_spans("state", state), *_spans("output", list(outputs)),
            *_spans("attribute", reached)]


def python_holders(memory: audit_rules.Memory, wanted: set[int]) -> tuple[list[int], list[torch.Tensor]]:
    """Which of the blocks starting at `wanted` some live Python tensor holds: their starts, and one
    such tensor each. One pass over the heap, run only when the graph uses memory nobody named (a library workspace, a stray tensor)."""
    starts: list[int] = []
    tensors: list[torch.Tensor] = []
    for obj in gc.get_objects():
        if not issubclass(type(obj), torch.Tensor):
            continue
        try:
            key = storage_key(obj) if obj.device.type == "cuda" else None
        except Exception:  # a tensor subclass that cannot say where it lives
            continue
        block = memory.block_at(key[0]) if key else None
        if block is not None and block.start in wanted and block.start not in starts:
            starts.append(block.start)
            tensors.append(obj)
    return starts, tensors


def _traces(snapshot: dict) -> list[dict]:
    return [event for device in snapshot.get("device_traces", []) for event in device]


def _allocation(run, block: audit_rules.Block, address: int, traces: list[dict]) -> tuple[Location | None, str | None, int]:
    """Where the buffer at `address` was allocated (the user's line, and `user line (via library line)`
    to show), and its size. A freed block may have merged with its neighbours, so its allocation is looked
    up in the trace by the address the graph holds."""
    frames, size = block.frames, block.size
    if not (block.live and frames):
        event = alloc_history.allocation_event(traces, address)
        frames, size = (event.get("frames", []), event.get("size", size)) if event else ((), size)
    location = alloc_history.user_location(frames, run.options.root)
    if location is None:
        return None, None, size
    library = alloc_history.library_line(frames)
    return location, location.describe() + (f" (via {library})" if library else ""), size


def audit_capture(run, graph: torch.cuda.CUDAGraph, inputs: tuple, outputs: tuple,
                  traced_reads: set[int]) -> CaptureAudit | None:
    """Classify every pointer the captured graph holds; GD307 for unknown and freed blocks.
    `traced_reads`: the storages from outside the step that the captured ops were given."""
    try:
        words = graph_params.read_graph(graph.raw_cuda_graph())
    except (AttributeError, RuntimeError):  # torch without keep_graph: no cudaGraph_t to read
        words = None
    if words is None:
        run.result.notes.append("pointer audit skipped: the graph's nodes cannot be read on this driver")
        return None
    snapshot = torch.cuda.memory._snapshot()
    memory = audit_rules.Memory.from_segments(snapshot["segments"])
    owners = audit_rules.Owners(owner_spans(run.unit, inputs, run.state_tensors(), outputs))
    verdicts = audit_rules.audit(words.nodes, memory, owners, tuple(graph.pool()))
    unowned = {v.block.start for v in verdicts if v.kind == audit_rules.UNOWNED}
    holders: dict[int, str] = {}
    if unowned:
        starts, tensors = python_holders(memory, unowned)
        holders = dict(zip(starts, owner_names(tensors)))
        del tensors
        verdicts = audit_rules.resolve_unowned(verdicts, set(holders))
    verdicts, stale = audit_rules.drop_stale_bytes(verdicts, traced_reads)
    traces = _traces(snapshot)
    for block, group in audit_rules.findings_by_block(verdicts).items():
        location, where, size = _allocation(run, block, group[0].value, traces)
        freed = group[0].kind == audit_rules.FREED
        message = audit_rules.finding_message(size, group, where, holders.get(block.start))
        run.add("GD307", message, location, Severity.ERROR if freed else Severity.WARNING)
    run.result.notes.append(audit_rules.summary_note(verdicts, len(words.nodes), words.unreadable, stale))
    watched: dict[audit_rules.Block, list[audit_rules.Verdict]] = {}
    for verdict in verdicts:
        if verdict.kind in _OWNED_KINDS and verdict.block is not None and verdict.block.pool == audit_rules.DEFAULT_POOL:
            watched.setdefault(verdict.block, []).append(verdict)
    return CaptureAudit(watched, alloc_history.latest_time(traces))


def recheck(run, capture: CaptureAudit | None) -> None:
    """GD307 for blocks the graph uses that were live at capture and have been freed since."""
    if capture is None or capture.since is None or not capture.watched:
        return
    traces = _traces(torch.cuda.memory._snapshot())
    freed = alloc_history.freed_after(traces, (block.start for block in capture.watched), capture.since)
    for block, group in capture.watched.items():
        if block.start in freed:
            location, where, size = _allocation(run, block, group[0].value, traces)
            message = audit_rules.freed_later_message(size, group, where)
            run.add("GD307", message, location)
