"""GD308 stale-output: a step output the caller's loop keeps is overwritten by the next replay.

A graph writes its outputs into the same graph-pool memory on every replay. Eager, every step
returns new tensors, so a loop may keep step k's output and use it after step k+1; graphed, the
kept tensor holds step k+1's values by then. The unit's `loop(step, steps)` runs twice from the
same state: eager, and with `step` replaying the graph the way an engine's runner does (inputs
copied into the static buffers, the static outputs returned). Each output a replay returns is
tagged with that replay, and views of it inherit the tag; an op that reads a tagged tensor after
a later replay, while its values differ from what that replay returned, is a stale read at its line.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from graphready.harness.blame import call_user, raised_by_user
from graphready.harness.checks.pointers import pointer_audit, rebind_between
from graphready.harness.compare import as_outputs, clone_all, first_difference
from graphready.harness.frames import Location, current_user_frame, exception_user_frame, relative_path
from graphready.harness.tracer import storage_key, tensors_in
from graphready.harness.unit import callable_location

LOOP_STEPS = 3  # consecutive steps the unit's loop is asked for: enough for "keep k, read after k+1"
_TAG = "_graphready_replay"


@dataclass(frozen=True)
class StaleRead:
    location: Location | None
    op: str
    returned_at: int  # the replay whose output was kept
    read_after: int  # the replay that had run when it was read


class StaleReadTracer(TorchDispatchMode):
    """Tags outputs by replay and records reads of outputs that a later replay overwrote."""

    def __init__(self, root: Path | None = None) -> None:
        super().__init__()
        self.root = root
        self.replays = 0
        self.saved: dict[tuple[int, int], torch.UntypedStorage] = {}  # (storage, replay) -> its bytes then
        self.reads: list[StaleRead] = []
        self._paused = False
        self._seen: set[Location | None] = set()

    @contextlib.contextmanager
    def paused(self):
        """The harness's own work (copies, replays, comparisons) is not the loop's reads."""
        previous, self._paused = self._paused, True
        try:
            yield
        finally:
            self._paused = previous

    def returned(self, outputs: list[torch.Tensor], rewritten: list[bool]) -> list[torch.Tensor]:
        """After a replay: hand out aliases of the outputs; those the next replay rewrites (graph-pool
        memory, not state the step updates in place eager too) are tagged and their bytes kept."""
        with self.paused():
            self.replays += 1
            aliases = []
            for output, tag in zip(outputs, rewritten):
                alias = output.detach()
                key = storage_key(output)
                if tag and key is not None:
                    self.saved[(key[0], self.replays)] = output.untyped_storage().clone()
                    setattr(alias, _TAG, self.replays)
                aliases.append(alias)
            return aliases

    def check_reads(self, tensors: list[torch.Tensor], op: str) -> None:
        """Record a stale read when a tagged tensor from an earlier replay no longer holds its values."""
        with self.paused():
            for tensor in tensors:
                replay = getattr(tensor, _TAG, None)
                if replay is None or replay >= self.replays or not self._changed(tensor, replay):
                    continue
                location = current_user_frame(self.root)
                if location not in self._seen:
                    self._seen.add(location)
                    self.reads.append(StaleRead(location, op, replay, self.replays))

    def _changed(self, tensor: torch.Tensor, replay: int) -> bool:
        key = storage_key(tensor)
        saved = self.saved.get((key[0], replay)) if key else None
        if saved is None:
            return False
        then = torch.empty(0, dtype=tensor.dtype, device=tensor.device)
        then.set_(saved, tensor.storage_offset(), tensor.size(), tensor.stride())
        return first_difference((then,), (tensor,), 0.0, 0.0) is not None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self._paused:
            return call_user(func, *args, **kwargs)
        inputs = [leaf for leaf in tree_leaves((args, kwargs)) if isinstance(leaf, torch.Tensor)]
        op = str(getattr(func, "overloadpacket", func).__name__)
        self.check_reads(inputs, op)
        out = call_user(func, *args, **kwargs)
        tags = {storage_key(t)[0]: getattr(t, _TAG) for t in inputs if hasattr(t, _TAG) and storage_key(t)}
        for t in tree_leaves(out):
            key = storage_key(t) if isinstance(t, torch.Tensor) else None
            if key is not None and key[0] in tags and not hasattr(t, _TAG):
                setattr(t, _TAG, tags[key[0]])  # a view of a tagged output is as old as the output
        return out


def graphed_step(replay: Callable[[], None], static_inputs: list[torch.Tensor], outputs: list[torch.Tensor],
                 rewritten: list[bool], tracer: StaleReadTracer,
                 before_replay: Callable[[], None] = lambda: None) -> Callable[..., Any]:
    """`step(*inputs)` the way an engine runs a captured graph: copy in, `replay()`, hand out the static outputs.
    `before_replay` looks at the unit just before each replay (GD305: what the loop re-bound)."""

    def step(*inputs):
        tensors = [leaf for leaf in tree_leaves(inputs) if isinstance(leaf, torch.Tensor)]
        tracer.check_reads(tensors, "step input")
        with tracer.paused():
            before_replay()
            for dst, src in zip(static_inputs, tensors):
                dst.copy_(src)
            replay()
        aliases = tracer.returned(outputs, rewritten)
        return aliases[0] if len(aliases) == 1 else tuple(aliases)

    return step


def replay_on(graph, stream: torch.cuda.Stream) -> Callable[[], None]:
    """Replay `graph` on its capture stream, ordered after and before the caller's current stream."""

    def replay() -> None:
        current = torch.cuda.current_stream(stream.device)
        stream.wait_stream(current)
        with torch.cuda.stream(stream):
            graph.replay()
        current.wait_stream(stream)

    return replay


def stale_message(read: StaleRead, difference: str | None) -> str:
    text = (
        f"this line reads a step output that the loop kept from replay {read.returned_at} after replay "
        f"{read.read_after} overwrote it: a graph writes its outputs into the same memory every replay, "
        "so the kept tensor now holds a later step's values (eager keeps each step's own)"
    )
    if difference:
        text += f"; the loop's result differs from eager: {difference}"
    return text + "; clone the output you keep (prev = out.clone())"


def in_graph_pool(outputs: tuple, graph) -> list[bool]:
    """Which outputs live in the graph's private pool (the memory every replay rewrites)."""
    memory = pointer_audit.Memory.from_segments(torch.cuda.memory_snapshot())
    pool = tuple(graph.pool())
    flags = []
    for output in outputs:
        block = memory.block_at(output.data_ptr())
        flags.append(block is not None and block.pool == pool)
    return flags


def check_loop(run, graph, static_inputs: tuple, static_outputs: tuple, state0: tuple, stream) -> None:
    """Run the unit's loop eager and graphed from the same state; GD308 at each stale read, GD305 for each
    attribute the graph reads that the loop re-binds between steps."""
    unit, atol, rtol = run.unit, run.unit.atol, run.unit.rtol
    watch, rebound = run.read_paths, []
    before = watch.look() if watch is not None else {}

    def look() -> None:
        if watch is not None:
            rebound.extend(path for path in watch.moved(before) if path not in rebound)

    def graphed(tracer: StaleReadTracer, before_replay: Callable[[], None]) -> Callable[..., Any]:
        return graphed_step(replay_on(graph, stream), tensors_in(static_inputs), list(static_outputs),
                            in_graph_pool(static_outputs, graph), tracer, before_replay)

    try:
        run.restore(state0)
        eager = clone_all(as_outputs(call_user(unit.loop, unit.fn, LOOP_STEPS)))
        look()
        run.restore(state0)
        tracer = StaleReadTracer(run.options.root)
        step = graphed(tracer, look)
        with tracer:
            result = clone_all(as_outputs(call_user(unit.loop, step, LOOP_STEPS)))
        torch.cuda.synchronize(stream.device)
    except Exception as exc:
        if not raised_by_user(exc):  # the check's own failure: GD001, by the session's guard
            raise
        location = exception_user_frame(exc.__traceback__, run.options.root)
        run.add("GD201", f"the unit's loop raised {type(exc).__name__}: {exc}", location)
        return
    finally:
        run.restore(state0)
    difference = first_difference(eager, result, atol, rtol)
    for read in tracer.reads:
        run.add("GD308", stale_message(read, difference), read.location)
    if rebound:
        def again() -> None:  # the loop once more, graphed, for the line tracer to see who re-binds
            run.restore(state0)
            try:
                call_user(unit.loop, graphed(StaleReadTracer(run.options.root), lambda: None), LOOP_STEPS)
            finally:
                run.restore(state0)

        detail = f"; the loop's result differs from eager: {difference}" if difference else ""
        rebind_between.report(run, rebound, rebind_between.LOOP, again, _location_of(unit.loop, run), detail)
    elif difference and not tracer.reads:
        run.add("GD301", f"the unit's loop gives a different result graphed than eager: {difference}", None)


def _location_of(fn: Callable[..., Any], run) -> Location:
    path, line = callable_location(fn)
    return Location(relative_path(path, run.options.root), line)
