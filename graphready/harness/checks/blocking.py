"""GD101 for syncs torch's sync debug mode cannot see: the CPU waiting on the GPU anywhere.

`torch.cuda.set_sync_debug_mode` reports only torch's own synchronizing calls; a
`cupy.cuda.runtime.deviceSynchronize()` or any extension's stream sync goes unreported. This probe
keeps the GPU visibly busy instead: sleep kernels on the legacy default stream (which a device
sync, and a sync of that stream, must wait for), topped up so that at least half a sleep is always
queued, and the step on a stream of its own so that its kernels never queue behind them. Between
user lines (`graphready.harness.linetrace`) it records an event after the sleeps; a line that took
at least a quarter of a sleep and at whose end that event has completed waited for the GPU. Each
wait is reported at the user line that called it, with the library function it called as detail.

Measured on an H100 with torch 2.11: entering `torch.cuda.stream(torch.cuda.default_stream())`
while the legacy stream has work queued waits for that work too; it is reported like a sync.

A line must wait in two traced steps to count: a one-off stall (the OS, a garbage collection) is
not a sync. A line that computes on the CPU for longer than half a sleep would still look like
one, and so would a line starved of CPU while other workers share the machine (seen with ten
workers on one H100: a CuTeDSL `from_dlpack` line flagged in one run of five). A third step with
sleeps four times as long settles it: a wait lasts as long as the GPU work queued before it, a
stall does not grow with it.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from graphready.harness.frames import Location
from graphready.harness.linetrace import SegmentTracer

SLEEP_MS = 50.0
CONFIRM_SLEEP_MS = 4 * SLEEP_MS
_CALIBRATION_CYCLES = 1_000_000


@dataclass
class BlockingSite:
    count: int = 0
    detail: str | None = None  # the last library function the line called


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
        self.sites: dict[Location, BlockingSite] = {}

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
        waited = self.started is not None and now - self.started >= self.sleep_ms / 4000 and self.marker.query()
        if waited and ended is not None:
            site = self.sites.setdefault(ended, BlockingSite(detail=library))
            site.count += 1
        self.top_up(now)
        self.marker.record(self.stream)
        self.started = time.perf_counter()


def _probed_step(
    step: Callable[[], Any], device: torch.device, root: Path | None, sleep_ms: float = SLEEP_MS
) -> dict[Location, BlockingSite]:
    probe = BlockingProbe(device, sleep_ms)
    torch.cuda.synchronize(device)
    probe.top_up(time.perf_counter())
    with SegmentTracer(probe.boundary, root):
        step()
    torch.cuda.synchronize(device)
    return probe.sites


def find_blocking(step: Callable[[], Any], device: torch.device, root: Path | None = None) -> dict[Location, BlockingSite]:
    """Run `step` under the probe; the user lines that waited for the GPU in three steps, with counts.

    One untraced step on the probe's stream comes first: the caching allocator keeps blocks per
    stream, and a probed step must not be the one that asks the driver for memory.
    """
    default = torch.cuda.default_stream(device)
    side = torch.cuda.Stream(device=device)
    torch.cuda.synchronize(device)
    with torch.cuda.stream(side):
        step()
        first = _probed_step(step, device, root)
        second = _probed_step(step, device, root) if first else {}
        candidates = {location: site for location, site in second.items() if location in first}
        confirmed = _probed_step(step, device, root, CONFIRM_SLEEP_MS) if candidates else {}
    default.wait_stream(side)
    torch.cuda.synchronize(device)
    return {location: site for location, site in candidates.items() if location in confirmed}


def blocking_message(site: BlockingSite) -> str:
    times = "once" if site.count == 1 else f"{site.count} times"
    inside = f" inside {site.detail}" if site.detail else ""
    return (
        f"the CPU waits for the GPU at this line ({times} per step{inside}) although torch's sync debug mode "
        "reports nothing: a synchronizing call outside torch (an extension library's device or stream sync) or a "
        "switch to the legacy default stream while it has work queued; either stalls every step"
    )
