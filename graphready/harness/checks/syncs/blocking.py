"""GD101 for syncs torch's sync debug mode cannot see: the CPU waiting on the GPU in a blocking CUDA call.

`torch.cuda.set_sync_debug_mode` reports only torch's own synchronizing calls; a
`cupy.cuda.runtime.deviceSynchronize()` or any extension's stream sync goes unreported. This probe
keeps the GPU visibly busy instead: sleep kernels on the legacy default stream (which a device
sync, and a sync of that stream, must wait for), topped up so that at least half a sleep is always
queued, and the step on a stream of its own so that its kernels never queue behind them. Between
user lines (`graphready.harness.linetrace`) it records an event after the sleeps; a line that took
at least a quarter of a sleep and at whose end that event has completed is a candidate.

A line must wait in two probed steps to be a candidate: a one-off stall (the OS, a garbage
collection) is not a sync. Waiting is not enough either. Measured on an H200 with transformers
5.17: a Llama decode step called from one user line is one stretch (the installed package is
library code), and under line tracing its forward keeps the CPU busy for about 320 ms with 109 kernel
launches of under 0.1 ms each and no blocking call; the queued sleeps drain meanwhile, and the
line looks like a wait even with sleeps four times as long. A CPU starved by other processes and
a CPU blocked inside a launch because the launch queue is full (launch back-pressure) look the
same. So a third step, run only when there are candidates, records the CUDA runtime trace
(`runtime_trace.py`): a candidate is reported only when a blocking API call ran on that line (a
device, stream or event synchronize; a synchronous copy or a free that lasted as long as a wait),
and the finding names the call and the library function that made it. Where the profiler cannot
record runtime calls, the candidates become a note, never a finding on timing alone.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from graphready.harness import runtime_trace
from graphready.harness.frames import Location
from graphready.harness.linetrace import Boundary, SegmentTracer

SLEEP_MS = 50.0
_CALIBRATION_CYCLES = 1_000_000


@dataclass
class BlockingSite:
    call: str  # the blocking CUDA API call, e.g. cudaDeviceSynchronize
    detail: str | None = None  # the library function that made it
    count: int = 0


@dataclass
class BlockingReport:
    """The lines that waited in a blocking call, and a note when the runtime trace could not decide."""

    sites: dict[Location, BlockingSite] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@functools.lru_cache(maxsize=None)
def _cycles_per_ms(device_index: int) -> float:
    device = torch.device("cuda", device_index)
    stream = torch.cuda.default_stream(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):
        torch.cuda._sleep(_CALIBRATION_CYCLES)  # loads the kernel before timing it
        start.record(stream)
        torch.cuda._sleep(_CALIBRATION_CYCLES)
        end.record(stream)
    end.synchronize()
    return _CALIBRATION_CYCLES / max(start.elapsed_time(end), 1e-3)


class BlockingProbe:
    """The queued sleeps, the per-line marker and the lines found waiting."""

    def __init__(self, device: torch.device, sleep_ms: float = SLEEP_MS) -> None:
        self.stream = torch.cuda.default_stream(device)
        self.sleep_ms = sleep_ms
        self.cycles = int(_cycles_per_ms(device.index) * sleep_ms)
        self.sleep_done = torch.cuda.Event()
        self.marker = torch.cuda.Event()
        self.sleeps_until = 0.0  # when the queued sleeps end, on the host clock (an estimate)
        self.started: float | None = None  # when the current line began
        self.waited: dict[Location, int] = {}

    @property
    def wait_ms(self) -> float:
        """The shortest stretch that counts as a wait."""
        return self.sleep_ms / 4

    def top_up(self, now: float) -> None:
        """Queue another sleep when less than half of one is left, so the GPU never idles mid-line."""
        if self.sleep_done.query():
            self.sleeps_until = now
        if self.sleeps_until - now < self.sleep_ms / 2000:
            with torch.cuda.stream(self.stream):
                torch.cuda._sleep(self.cycles)
            self.sleep_done.record(self.stream)
            self.sleeps_until = max(self.sleeps_until, now) + self.sleep_ms / 1000

    def boundary(self, ended: Location | None, library: str | None) -> None:
        now = time.perf_counter()
        waited = self.started is not None and now - self.started >= self.wait_ms / 1000 and self.marker.query()
        if waited and ended is not None:
            self.waited[ended] = self.waited.get(ended, 0) + 1
        self.top_up(now)
        self.marker.record(self.stream)
        self.started = time.perf_counter()


class RangedStretches:
    """Runs each stretch of user code inside a profiler range named by its index, to find its API calls."""

    def __init__(self, on_boundary: Boundary) -> None:
        self.on_boundary = on_boundary
        self.stretches: list[tuple[Location | None, str | None]] = []  # by index: line, library function called
        self._open: Any = None

    @staticmethod
    def range_name(index: int) -> str:
        return f"graphready.stretch.{index}"

    def boundary(self, ended: Location | None, library: str | None) -> None:
        if self._open is not None:
            self._open.__exit__(None, None, None)
            self.stretches.append((ended, library))
        self.on_boundary(ended, library)
        self._open = torch.profiler.record_function(self.range_name(len(self.stretches)))
        self._open.__enter__()

    def close(self) -> None:
        if self._open is not None:
            self._open.__exit__(None, None, None)
            self._open = None


def _probed_step(
    step: Callable[[], Any], device: torch.device, root: Path | None, ranged: bool = False
) -> tuple[BlockingProbe, RangedStretches | None]:
    """One step under the probe; the probe and, with `ranged`, the stretches it ran in profiler ranges."""
    probe = BlockingProbe(device)
    stretches = RangedStretches(probe.boundary) if ranged else None
    torch.cuda.synchronize(device)
    probe.top_up(time.perf_counter())
    try:
        with SegmentTracer(probe.boundary if stretches is None else stretches.boundary, root):
            step()
    finally:
        if stretches is not None:
            stretches.close()
    torch.cuda.synchronize(device)
    return probe, stretches


def blocking_sites(
    stretches: list[tuple[Location | None, str | None]],
    trace: runtime_trace.RuntimeTrace,
    candidates: set[Location],
    wait_us: float,
) -> dict[Location, BlockingSite]:
    """The candidate lines whose stretches (ranged by `RangedStretches`) made a blocking API call."""
    sites: dict[Location, BlockingSite] = {}
    for index, (location, library) in enumerate(stretches):
        if location not in candidates:
            continue
        for call in trace.calls_in(RangedStretches.range_name(index)):
            if call.blocks(wait_us):
                site = sites.setdefault(location, BlockingSite(runtime_trace.api_name(call.name)))
                site.detail = site.detail or trace.library(call) or library
                site.count += 1
    return sites


def _confirm(
    step: Callable[[], Any], device: torch.device, root: Path | None, candidates: set[Location]
) -> BlockingReport:
    """Keep the candidates at which the runtime trace of one more probed step shows a blocking call."""
    probed: list = []
    try:
        trace = runtime_trace.record(lambda: probed.append(_probed_step(step, device, root, ranged=True)))
    except runtime_trace.TraceUnavailable as exc:
        return BlockingReport(notes=[unconfirmed_note(candidates, str(exc))])
    probe, stretches = probed[0]
    return BlockingReport(blocking_sites(stretches.stretches, trace, candidates, probe.wait_ms * 1000))


def find_blocking(step: Callable[[], Any], device: torch.device, root: Path | None = None) -> BlockingReport:
    """Run `step` under the probe; the user lines that waited for the GPU in a blocking CUDA call.

    One untraced step on the probe's stream comes first: the caching allocator keeps blocks per
    stream, and a probed step must not be the one that asks the driver for memory.
    """
    default = torch.cuda.default_stream(device)
    side = torch.cuda.Stream(device=device)
    torch.cuda.synchronize(device)
    with torch.cuda.stream(side):
        step()
        candidates = set(_probed_step(step, device, root)[0].waited)
        if candidates:
            candidates &= set(_probed_step(step, device, root)[0].waited)
        report = _confirm(step, device, root, candidates) if candidates else BlockingReport()
    default.wait_stream(side)
    torch.cuda.synchronize(device)
    return report


def blocking_message(site: BlockingSite) -> str:
    times = "once" if site.count == 1 else f"{site.count} times"
    inside = f", called from {site.detail}" if site.detail else ""
    return (
        f"the CPU waits for the GPU at this line in {site.call} ({times} per step{inside}) although torch's sync "
        "debug mode reports nothing: a synchronizing call outside torch (an extension library's device or stream "
        "sync, a synchronous copy to the host) stalls every step and fails a graph capture"
    )


def unconfirmed_note(candidates: set[Location], reason: str) -> str:
    lines = ", ".join(sorted(location.describe() for location in candidates))
    return (
        f"GD101 not decided for {lines}: the line waited for a busy GPU, but the CUDA runtime trace that tells a "
        f"sync from launch back-pressure is unavailable ({reason})"
    )
