"""Replay the graph-ready decode step as CUDA graphs, over one or several GPUs of one process.

Modes (how each device's units from `DSV4Model.units()` are grouped):
  layer  one graph per layer (plus small embed/head graphs),
  split  per layer a graph before attention, attention run eagerly, a graph after (the log's A/B split),
  full   everything a device runs in one step, embed and head included: one graph per GPU.

Every device gets one explicit `torch.cuda.Stream(device=...)` used for warm-up, capture and replay
(capturing on the default stream of a non-current device replays stale or empty work, seed log 004).
Token ids and the position reach each device by `copy_` from pinned host rows, one row per position so
a row is never rewritten while a copy from it may be pending; a speculative model (`DSV4Model(speculative=
True)`) can instead take them from its own device state (`step_speculative`), so its steps chain on the GPU. The residual streams cross devices with a
copy outside any graph, ordered by events. With `use_graphs=False` (always on CPU) the same units run
eagerly in the same order, which is what replay is compared against.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from dsv4.model import DSV4Model, Unit

MODES = ("layer", "split", "full")
WARMUP_STEPS = 2


@dataclass
class Segment:
    """Consecutive units of one device: captured as one graph, or run eagerly when `graph` stays None."""

    units: list[Unit]
    capture: bool
    graph: torch.cuda.CUDAGraph | None = None

    def run_units(self) -> None:
        for unit in self.units:
            unit.run()


@dataclass
class DevicePlan:
    device: torch.device
    segments: list[Segment]
    stream: torch.cuda.Stream | None = None
    done: torch.cuda.Event | None = None
    pool: tuple | None = None
    previous: torch.device | None = None  # the device whose streams this one receives


def group_units(units: Sequence[Unit], mode: str) -> list[Segment]:
    """Split one device's units into segments for `mode`."""
    if mode == "full":
        return [Segment(list(units), capture=True)]
    segments: list[Segment] = []
    for unit in units:
        if segments and segments[-1].units[-1].kind == "positions":  # the step's positions join the next graph
            segments[-1].units.append(unit)
        elif mode == "split" and unit.kind == "attention":
            segments.append(Segment([unit], capture=False))
        elif mode == "layer" and unit.kind in ("attention", "post"):
            segments[-1].units.append(unit)
        else:
            segments.append(Segment([unit], capture=True))
    return segments


class GraphDecoder:
    def __init__(self, model: DSV4Model, mode: str = "full", use_graphs: bool | None = None):
        if mode not in MODES:
            raise ValueError(f"unknown graph mode {mode!r}; choose one of {', '.join(MODES)}")
        on_cuda = all(d.type == "cuda" for d in model.devices)
        if use_graphs is None:
            use_graphs = on_cuda
        if use_graphs and not on_cuda:
            raise ValueError("CUDA graphs need every model device to be a CUDA device")
        self.model = model
        self.mode = mode
        self.use_graphs = use_graphs
        self.captured = False
        self.last_done: torch.cuda.Event | None = None
        plans, previous = [], None
        for device, units in model.units().items():
            plan = DevicePlan(device, group_units(units, mode), previous=previous)
            if on_cuda:
                plan.stream = torch.cuda.Stream(device=device)
                plan.done = torch.cuda.Event()
                plan.pool = torch.cuda.graph_pool_handle() if use_graphs else None
            plans.append(plan)
            previous = device
        self.plans = plans
        pin = on_cuda
        self.host_tokens = torch.zeros(model.max_len, model.rows, dtype=torch.long, pin_memory=pin)
        self.host_positions = torch.arange(model.max_len, dtype=torch.long).pin_memory() if pin else \
            torch.arange(model.max_len, dtype=torch.long)
        # speculative models: the prompt tokens the host imposes at p+1, p+2 (-1: the model's own)
        self.host_overrides = torch.full((model.max_len, 2), -1, dtype=torch.long, pin_memory=pin)

    @property
    def capture_count(self) -> int:
        """How many graphs `capture` makes (0 without graphs)."""
        if not self.use_graphs:
            return 0
        return sum(seg.capture for plan in self.plans for seg in plan.segments)

    # -- capture --------------------------------------------------------------------------------------
    def capture(self, on_progress: Callable[[str], None] | None = None) -> None:
        """Warm up on the capture streams, capture every graph segment, then reset the model's state."""
        if self.captured:
            return
        for _ in range(WARMUP_STEPS):
            self.step([0] * self.model.rows, 0)
        self.synchronize()
        if self.use_graphs:
            with torch.inference_mode():
                for plan in self.plans:
                    for seg in plan.segments:
                        if seg.capture:
                            if on_progress is not None:
                                on_progress(f"{plan.device}: {seg.units[0].name}..{seg.units[-1].name}")
                            seg.graph = torch.cuda.CUDAGraph()
                            with torch.cuda.graph(seg.graph, pool=plan.pool, stream=plan.stream):
                                seg.run_units()
            self.synchronize()
        self.model.reset()
        self.synchronize()
        self.last_done = None
        self.captured = True

    def synchronize(self) -> None:
        for plan in self.plans:
            if plan.stream is not None:
                plan.stream.synchronize()

    # -- stepping -------------------------------------------------------------------------------------
    def step(self, token_ids, position: int, overrides: Sequence[int] | None = None) -> torch.Tensor:
        """One decode step for host token ids (one per row) at `position`; returns the logits buffer (device).

        `overrides` (speculative models): the tokens at position+1, position+2 when the host knows them (a
        prompt being prefilled), -1 where the model's own greedy tokens decide."""
        self._check(position)
        self.host_tokens[position] = torch.as_tensor(token_ids, dtype=torch.long).reshape(-1)
        self.host_overrides[position] = torch.as_tensor([-1, -1] if overrides is None else overrides)
        self.replay(position, source="host")
        return self.model.logits_buf

    def step_greedy(self, position: int) -> torch.Tensor:
        """One decode step fed with the previous step's greedy token, read on the device (no host sync)."""
        if self.model.spec is not None:
            raise ValueError("a speculative model steps with step_speculative()")
        self._check(position)
        self.replay(position, source="greedy")
        return self.model.logits_buf

    def step_speculative(self) -> None:
        """One speculative step fed from the model's device state (token, draft, position): no host sync."""
        if self.model.spec is None:
            raise ValueError("step_speculative() needs a DSV4Model built with speculative=True")
        self.replay(0, source="speculative")

    def _check(self, position: int) -> None:
        last = self.model.max_len - self.model.tokens_per_step
        if not 0 <= position <= last:
            raise ValueError(f"position {position} outside 0..{last}")

    def _load_inputs(self, plan: DevicePlan, position: int, source: str) -> None:
        io, spec = self.model.io[plan.device], self.model.spec
        if source == "speculative":
            io.tokens.copy_(spec.tokens, non_blocking=True)
            io.pos.copy_(spec.pos, non_blocking=True)
            if plan.device == self.model.devices[-1]:
                spec.overrides.fill_(-1)
            return
        if source == "greedy":
            io.tokens.copy_(self.model.next_token_buf, non_blocking=True)
        else:
            io.tokens.copy_(self.host_tokens[position], non_blocking=True)
            if spec is not None and plan.device == self.model.devices[-1]:
                spec.overrides.copy_(self.host_overrides[position], non_blocking=True)
        io.pos.copy_(self.host_positions[position : position + 1], non_blocking=True)

    def _prepare_device(self, plan: DevicePlan, position: int, source: str) -> None:
        """Receive the residual streams from the previous device and load token/position."""
        if plan.previous is not None:
            self.model.transfer(plan.previous, plan.device)
        self._load_inputs(plan, position, source)

    def replay(self, position: int, source: str = "host") -> None:  # graphready: hot
        """Run every device's segments in layer order on its own stream, chained by events. `source`: where the
        token ids and position come from (host | greedy | speculative, see `_load_inputs`).

        Each stream first waits for its device's default stream (work queued there, such as a reset, comes
        first) and the last device's default stream waits for the step, so callers may read `logits_buf`.
        """
        with torch.inference_mode():
            wait_for = self.last_done
            for plan in self.plans:
                if plan.stream is None:
                    self._prepare_device(plan, position, source)
                    for seg in plan.segments:
                        seg.run_units()
                    continue
                with torch.cuda.stream(plan.stream):
                    plan.stream.wait_stream(torch.cuda.default_stream(plan.device))
                    if wait_for is not None:
                        plan.stream.wait_event(wait_for)
                    self._prepare_device(plan, position, source)
                    for seg in plan.segments:
                        if seg.graph is not None:
                            seg.graph.replay()
                        else:
                            seg.run_units()
                    plan.done.record(plan.stream)
                wait_for = plan.done
            if wait_for is not None:
                torch.cuda.default_stream(self.plans[-1].device).wait_event(wait_for)
            self.last_done = wait_for
