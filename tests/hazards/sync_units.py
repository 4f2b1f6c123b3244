"""GD101 from the busy-GPU probe: a real sync outside torch, and two lines that only look like one.

The probe (graphready/harness/checks/syncs/blocking.py) flags a line that returns only once the GPU has
drained. A CuPy stream sync does that and is a sync. So does a line that keeps the CPU busy for
longer than the probe's queued GPU work (an HF model's forward called from one user line took
about 320 ms under line tracing), and a line whose kernel launches block because the launch queue
is full; neither made the CPU wait in a synchronizing call, and neither may be reported.
"""

from __future__ import annotations

import importlib.util
import itertools
import time

import torch

from graphready.harness import Unit

N = 1024
HOST_LINE_S = 0.3  # longer than the probe's queued sleeps, as the HF forward was
QUEUE_MS = 300.0  # GPU work queued ahead of the launches on the step's own stream
LAUNCHES = 4096  # more than the launch queue holds: the CPU blocks in cudaLaunchKernel


def _vector(seed: int) -> tuple[torch.Tensor]:
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(N, device="cuda", generator=generator),)


def _sleep_cycles(ms: float) -> int:
    """Cycles of `torch.cuda._sleep` that keep the GPU busy for about `ms`."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1_000_000)
    start.record()
    torch.cuda._sleep(1_000_000)
    end.record()
    end.synchronize()
    return int(1_000_000 / max(start.elapsed_time(end), 1e-3) * ms)


class CupyStreamSync:
    """CuPy's null stream is the legacy default stream: syncing it waits for all work queued there."""

    def __init__(self) -> None:
        import cupy

        self.cupy = cupy

    def __call__(self, x):
        y = x * 2.0
        self.cupy.cuda.Stream.null.synchronize()  # hazard: GD101
        return y + 1.0


class SlowHostLine:
    """One line that keeps the CPU away for longer than the probe's queued GPU work; nothing waits."""

    def __call__(self, x):
        y = x * 2.0
        time.sleep(HOST_LINE_S)
        return y + 1.0


class LaunchBackPressure:
    """Thousands of launches behind 300 ms of queued work, from one C-level call: the launch queue fills."""

    def __init__(self) -> None:
        self.cycles = _sleep_cycles(QUEUE_MS)
        self.scratch = torch.empty(N, device="cuda")

    def __call__(self, x):
        self.scratch.copy_(x)
        torch.cuda._sleep(self.cycles)
        list(map(torch.Tensor.add_, itertools.repeat(self.scratch, LAUNCHES), itertools.repeat(1.0, LAUNCHES)))
        return self.scratch * 1.0


def sync_units() -> list[Unit]:
    units = [
        Unit("clean_slow_host_line", SlowHostLine(), _vector),
        Unit("clean_launch_back_pressure", LaunchBackPressure(), _vector),
    ]
    if importlib.util.find_spec("cupy") is not None:
        units.append(Unit("cupy_stream_sync", CupyStreamSync(), _vector))
    return units
