"""GD309 padded-replay: a graph captured for K rows, replayed for a real batch of b < K rows padded to K.

An engine captures a graph per batch size and replays the next larger one for any batch in
between: the real rows go first, the padded rows after, and the engine's replay preparation decides
what the padded rows hold. Bugs live there (SGLang, vLLM): a pad branch that resets some buffers
and not others, so padded rows keep an earlier batch's cache slots and the captured KV write
scatters junk into live slots; a buffer refreshed on `[:bs]` while a longer one is handed to the
graph; metadata sized by the real batch where the graph takes the padded one.

For each b in (1, K/2, K-1), twice: a full batch of K rows replayed first (two different ones, so
rows a previous replay left behind differ between the two runs), then the padded batch. The real
rows of the outputs (the first ones along the dimension where the real batch is shorter) must equal
`fn` run eager on the b rows. With the unit's `pad_inputs` hook, the state the padded replay leaves
must equal eager's too, the inputs it prepares must have the captured shapes, and padded rows that
differ between the two runs (another batch's values) are traced to the preparation line that wrote
only the head; when nothing else shows, those are reported (a warning) if the step indexes with them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from graphready.findings import Severity
from graphready.harness.blame import UnitContractError, call_user, is_cuda_failure, raised_by_user
from graphready.harness.checks.replay import padded_trace
from graphready.harness.checks.replay.padded_messages import (
    lines_at, mismatch_message, raised_message, shape_message, stale_index_message, unhooked_message)
from graphready.harness.checks.replay.padded_trace import PrepTrace, span
from graphready.harness.compare import as_outputs, clone_all, first_difference
from graphready.harness.frames import Location, exception_user_frame, relative_path
from graphready.harness.reach import reachable_tensors
from graphready.harness.tracer import storage_key, tensors_in
from graphready.harness.unit import callable_location, padded_key

REAL_SEED = 3  # the padded batch; the session's own inputs use seeds 0-2
PREVIOUS_SEEDS = (4, 5)  # the full batches replayed before it: what stale padded rows hold


def real_sizes(key: int) -> list[int]:
    """The real batch sizes a graph captured for `key` rows is replayed padded for."""
    return sorted({1, key // 2, key - 1} - {0, key})


def row_dim(full: Sequence[int], real: Sequence[int]) -> int | None:
    """The one dimension a real batch is shorter in than the graph's tensor; None when the shapes are equal.

    ValueError when they differ otherwise (rank, several dimensions, a longer real batch)."""
    full, real = tuple(full), tuple(real)
    if full == real:
        return None
    dims = [d for d, (f, r) in enumerate(zip(full, real)) if f != r]
    if len(full) != len(real) or len(dims) != 1 or real[dims[0]] > full[dims[0]]:
        raise ValueError(f"{real} is no batch of rows of {full}")
    return dims[0]


def head(t: torch.Tensor, dim: int | None, rows: int) -> torch.Tensor:
    return t if dim is None else t.narrow(dim, 0, rows)


def padding(t: torch.Tensor, dim: int, rows: int) -> torch.Tensor:
    return t.narrow(dim, rows, t.shape[dim] - rows)


def real_rows_difference(eager: Sequence[torch.Tensor], graphed: Sequence[torch.Tensor], atol: float,
                         rtol: float) -> str | None:
    """How the real rows of a padded replay's outputs differ from eager's outputs; None when they match."""
    if len(eager) != len(graphed):
        return f"{len(graphed)} outputs instead of {len(eager)}"
    heads = []
    for i, (e, g) in enumerate(zip(eager, graphed)):
        try:
            dim = row_dim(g.shape, e.shape)
        except ValueError:
            return f"output {i} is {tuple(g.shape)} graphed and {tuple(e.shape)} eager"
        heads.append(head(g, dim, 0 if dim is None else e.shape[dim]))
    return first_difference(eager, heads, atol, rtol)


def check_prepared(prepared: Any, statics: Sequence[torch.Tensor], key: int) -> list[torch.Tensor]:
    """The tensors `pad_inputs` returned, when they are as many as the graph's inputs (else a contract error)."""
    tensors = tensors_in(prepared)
    if len(tensors) != len(statics):
        raise UnitContractError(
            f"the unit's pad_inputs returned {len(tensors)} tensors for the graph captured for {key}, whose "
            f"make_inputs(seed, key={key}) makes {len(statics)}: pad_inputs(inputs, key) must return the inputs "
            "that graph replays with")
    return tensors


def input_rows(statics: Sequence[torch.Tensor], real: Sequence[torch.Tensor], key: int, size: int) -> list[int | None]:
    """Per graph input, the dimension of its rows (None: not batched, or not a batch of rows)."""
    if len(real) != len(statics):
        raise UnitContractError(f"make_inputs(seed, key={size}) makes {len(real)} tensors and make_inputs(seed, "
                                f"key={key}) makes {len(statics)}: a real batch must have the captured one's inputs")
    dims: list[int | None] = []
    for full, part in zip(statics, real):
        try:
            dims.append(row_dim(full.shape, part.shape))
        except ValueError:
            dims.append(None)
    return dims


@dataclass
class PaddedRun:
    """One padded replay: what the preparation handed the graph (its own tensors and a copy), the outputs
    and state it left."""

    returned: list[torch.Tensor]
    prepared: list[torch.Tensor]
    outputs: tuple
    state: tuple
    trace: PrepTrace | None


class _Finding(Exception):
    """A GD309 verdict was added: the check ends (one error per unit)."""


class PaddedReplay:
    """GD309 for one unit whose graph was captured for `unit.key` rows."""

    def __init__(self, run, graph, static_inputs: tuple, static_outputs: tuple, state0: tuple, stream) -> None:
        self.run, self.unit, self.key = run, run.unit, run.unit.key
        self.graph, self.stream = graph, stream
        self.statics = tensors_in(static_inputs)
        self.static_outputs, self.state0 = static_outputs, state0
        self.hook = self.unit.pad_inputs
        path, line = callable_location(self.hook or self.unit.fn)
        self.fallback = Location(relative_path(path, run.options.root), line)  # where no better line is known
        self._names: dict[int, str] | None = None
        self._indexed: dict[int, Location | None] | None = None

    # -- running the unit's code ------------------------------------------------------------------
    def make(self, rows: int, seed: int) -> list[torch.Tensor]:
        return tensors_in(call_user(self.unit.make_inputs, seed, key=rows))

    def prepare(self, inputs: list[torch.Tensor], rows: int) -> tuple[list[torch.Tensor], PrepTrace | None]:
        """What the graph replays with for this batch: the hook's result, or (no hook) the real rows written
        over the head of the graph's own inputs."""
        if self.hook is None:
            for static, real, dim in zip(self.statics, inputs, input_rows(self.statics, inputs, self.key, rows)):
                head(static, dim, real.shape[dim] if dim is not None else 0).copy_(real)
            return self.statics, None
        trace = PrepTrace(self.run.options.root)
        try:
            with trace:
                returned = call_user(self.hook, tuple(inputs), self.key)
        except Exception as exc:
            if rows == self.key or not raised_by_user(exc) or is_cuda_failure(exc):
                raise
            location = exception_user_frame(exc.__traceback__, self.run.options.root)
            self.run.add("GD309", raised_message(self.key, rows, exc), location)
            raise _Finding() from None
        prepared = check_prepared(returned, self.statics, self.key)
        for i, (static, tensor) in enumerate(zip(self.statics, prepared)):
            if static.shape != tensor.shape:
                location = trace.made_at(tensor) or _refresh(trace, tensor) or self.fallback
                self.run.add("GD309", shape_message(self.key, rows, self.name(i, tensor), tuple(tensor.shape),
                                                    tuple(static.shape), inputs[i].shape), location)
                raise _Finding()
        return prepared, trace

    def replay(self, prepared: list[torch.Tensor]) -> tuple[tuple, tuple]:
        for static, tensor in zip(self.statics, prepared):
            if static is not tensor:
                static.copy_(tensor)
        torch.cuda.synchronize(self.run.device)
        with torch.cuda.stream(self.stream):
            self.graph.replay()
        self.stream.synchronize()
        return clone_all(self.static_outputs), clone_all(self.run.state_tensors())

    def padded(self, rows: int, previous_seed: int) -> PaddedRun:
        """A full batch of `key` rows replayed, then the padded batch of `rows` real rows."""
        self.run.restore(self.state0)
        self.replay(self.prepare(self.make(self.key, previous_seed), self.key)[0])
        self.run.restore(self.state0)
        returned, trace = self.prepare(self.make(rows, REAL_SEED), rows)
        prepared = list(clone_all(returned))
        outputs, state = self.replay(returned)
        return PaddedRun(returned, prepared, outputs, state, trace)

    def eager(self, rows: int) -> tuple[tuple, tuple]:
        self.run.restore(self.state0)
        outputs = clone_all(as_outputs(call_user(self.unit.fn, *self.make(rows, REAL_SEED))))
        state = clone_all(self.run.state_tensors())
        self.run.restore(self.state0)
        return outputs, state

    def indexed(self) -> dict[int, Location | None]:
        """The graph inputs the step indexes with (one traced eager step on the graph's inputs)."""
        if self._indexed is None:
            self.run.restore(self.state0)
            self._indexed = padded_trace.index_inputs(self.run.step, tuple(self.statics), self.run.options.root)
            self.run.restore(self.state0)
        return self._indexed

    # -- naming and locating ----------------------------------------------------------------------
    def name(self, index: int, tensor: torch.Tensor, detail: str = "") -> str:
        """`self.positions` (input 2): the attribute path the hook reaches the buffer by, when it does."""
        if self._names is None:
            self._names = {}
            for reached in reachable_tensors(self.hook) if self.hook is not None else ():
                key = storage_key(reached.tensor)
                if key is not None:
                    self._names.setdefault(key[0], reached.path)
        key = storage_key(tensor)
        path = self._names.get(key[0]) if key else None
        extra = f", {detail}" if detail else ""
        return f"`{path}` (input {index}{extra})" if path else f"input {index}" + (f" ({detail})" if detail else "")

    def cause(self, padded: PaddedRun, stale: list[int], real: list[torch.Tensor], dims: list[int | None],
              rows: int, uses: dict[int, Location | None] | None = None) -> tuple[str, Location]:
        """Which padded rows hold another batch's values and the line to fix: where the preparation wrote only
        the head of the first of them (the slice that chose its rows); `uses` adds where the step indexes."""
        returned, first = padded.returned, stale[0]
        refresh = _refresh(padded.trace, head(returned[first], dims[first], real[first].shape[dims[first]]))
        location = refresh or self.fallback
        pads = [where for i, dim in enumerate(dims) if dim is not None and i not in stale
                for where in [span(padding(returned[i], dim, real[i].shape[dim]))] if where is not None]
        resets = padded.trace.resets(pads)
        names = []
        for i in stale:
            where = (uses or {}).get(i)
            names.append(self.name(i, returned[i], f"an index at {lines_at([where], location)}" if where else ""))
        pronoun = "it" if len(stale) == 1 else "them"
        reset = (f", and the pad reset at {lines_at(resets, location)} leaves {pronoun} out" if resets
                 else ", and nothing resets the rows past them")
        writes = "here" if refresh else "(pad_inputs)"
        return (f"the padded rows of {', '.join(names)} still hold the previous batch's values: the preparation "
                f"writes only {'the real row' if rows == 1 else f'the first {rows} rows'} {writes}{reset}"), location

    # -- the check --------------------------------------------------------------------------------
    def unpaddable(self) -> str | None:
        """Why the harness cannot pad this unit's batches itself (no hook): a note, not a verdict."""
        for rows in real_sizes(self.key):
            try:
                real = self.make(rows, REAL_SEED)
            except Exception as exc:
                if not raised_by_user(exc) or is_cuda_failure(exc):
                    raise
                return f"make_inputs(seed, key={rows}) raised {type(exc).__name__}: {exc}"
            if len(real) != len(self.statics):
                return f"make_inputs(seed, key={rows}) makes {len(real)} tensors, key={self.key} {len(self.statics)}"
            for i, (static, tensor) in enumerate(zip(self.statics, real)):
                try:
                    row_dim(static.shape, tensor.shape)
                except ValueError:
                    return (f"input {i} is {tuple(tensor.shape)} for {rows} rows and {tuple(static.shape)} for "
                            f"{self.key}")
        return None

    def check(self) -> None:
        if self.hook is None:
            why = self.unpaddable()
            if why is not None:
                self.run.result.notes.append(f"padded replay (GD309) not checked: {why}; declare pad_inputs, or "
                                             "make inputs for any batch size up to the key")
                return
        warning: tuple[str, Location] | None = None
        try:
            for rows in real_sizes(self.key):
                real = self.make(rows, REAL_SEED)
                dims = input_rows(self.statics, real, self.key, rows)
                runs = [self.padded(rows, seed) for seed in PREVIOUS_SEEDS]
                eager_outputs, eager_state = self.eager(rows)
                stale = self.stale_inputs(runs, real, dims)
                what = next(filter(None, (self.difference(r, eager_outputs, eager_state) for r in runs)), None)
                if what is not None:
                    self.report(runs[-1], stale, real, dims, rows, what)
                    return
                if stale and warning is None:
                    warning = self.index_warning(runs[-1], stale, real, dims, rows)
        except _Finding:
            return
        finally:
            self.run.restore(self.state0)
            torch.cuda.synchronize(self.run.device)
        if warning is not None:
            self.run.add("GD309", warning[0], warning[1], Severity.WARNING)

    def report(self, padded: PaddedRun, stale: list[int], real: list[torch.Tensor], dims: list[int | None], rows: int,
               what: str) -> None:
        """The error: how the padded replay differs, and which stale padded rows (indices first) explain it."""
        if self.hook is None:
            self.run.add("GD309", unhooked_message(self.key, rows, what), self.fallback)
            return
        if not stale:
            self.run.add("GD309", mismatch_message(self.key, rows, what, ""), self.fallback)
            return
        used = self.indexed()
        culprits = [i for i in stale if i in used] or stale  # a stale index reads and writes elsewhere
        text, location = self.cause(padded, culprits, real, dims, rows)
        self.run.add("GD309", mismatch_message(self.key, rows, what, text), location)

    def difference(self, padded: PaddedRun, eager_outputs: tuple, eager_state: tuple) -> str | None:
        atol, rtol = self.unit.atol, self.unit.rtol
        what = real_rows_difference(eager_outputs, padded.outputs, atol, rtol)
        if what is not None:
            return f"its real rows differ: {what}"
        if self.hook is None:  # the harness's own padding says nothing about what padded rows write
            return None
        what = first_difference(eager_state, padded.state, atol, rtol, what="state tensor")
        if what is None:
            return None
        return f"the state it leaves differs: {what} (the padded rows wrote where the real batch does not)"

    def stale_inputs(self, runs: list[PaddedRun], real: list[torch.Tensor], dims: list[int | None]) -> list[int]:
        """Inputs whose padded rows differ between the two runs: they hold the previous batch's values."""
        if self.hook is None:  # the harness left those rows as they were: nothing the unit wrote
            return []
        first, second = runs
        stale = []
        for i, dim in enumerate(dims):
            if dim is None:
                continue
            rows = real[i].shape[dim]
            if first_difference((padding(first.prepared[i], dim, rows),), (padding(second.prepared[i], dim, rows),),
                                0.0, 0.0) is not None:
                stale.append(i)
        return stale

    def index_warning(self, padded: PaddedRun, stale: list[int], real: list[torch.Tensor], dims: list[int | None],
                      rows: int) -> tuple[str, Location] | None:
        """The warning for stale padded rows the step indexes with; None when it only computes with them."""
        used = self.indexed()
        indexed = [i for i in stale if i in used]
        if not indexed:
            return None
        text, location = self.cause(padded, indexed, real, dims, rows, used)
        return stale_index_message(self.key, rows, text), location


def _refresh(trace: PrepTrace, tensor: torch.Tensor) -> Location | None:
    where = span(tensor)
    return None if where is None else trace.refresh(where)


def applies(unit) -> bool:
    """A unit captured for an integer batch size of at least 2 (`Unit.key`): its graph can run padded."""
    return padded_key(unit.key)


def check(run, graph, static_inputs: tuple, static_outputs: tuple, state0: tuple, stream) -> None:
    """GD309 for a unit that `applies`."""
    PaddedReplay(run, graph, static_inputs, static_outputs, state0, stream).check()
