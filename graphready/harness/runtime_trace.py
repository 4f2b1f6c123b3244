"""Which CUDA API calls that can block the CPU ran inside a stretch of a step, from the CUDA runtime trace.

The busy-GPU probe (`blocking.py`) sees that a line returned only once the GPU had drained; it cannot
see why. A synchronizing call (`cudaDeviceSynchronize`, a synchronous `cudaMemcpy` to the host) is a
sync; a CPU blocked inside a kernel launch because the launch queue is full (launch back-pressure)
is not, and neither is a CPU starved by other processes. CUPTI, through `torch.profiler` (kineto),
records every runtime and driver API call with its thread, start and duration; the probe wraps each
stretch of user code in a named profiler range, so a call belongs to the stretch whose range holds
it on the same thread. With `with_stack`, the profiler's Python functions around a call name the
library function that made it.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import re
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

RUNTIME_CATEGORIES = ("cuda_runtime", "cuda_driver")
RANGE_CATEGORY = "user_annotation"
KERNEL_CATEGORY = "kernel"
PYTHON_CATEGORY = "python_function"

# Always wait for the GPU: a device, stream or event sync (runtime and driver API).
SYNCHRONIZING = frozenset({
    "cudaDeviceSynchronize", "cudaThreadSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
    "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize",
})  # fmt: skip
# Block the CPU depending on the memory involved (a synchronous copy to pageable or pinned host memory
# waits for the copy and the work queued before it; a device-to-device one does not), or by freeing
# memory, which waits for the device. They count as the line's wait only when they lasted that long.
MAY_BLOCK = frozenset({
    "cudaMemcpy", "cudaMemcpy2D", "cudaMemcpy3D", "cudaMemcpyPeer", "cudaMemcpy3DPeer", "cudaMemcpyToSymbol",
    "cudaMemcpyFromSymbol", "cudaMemcpyToArray", "cudaMemcpyFromArray", "cudaMemcpy2DToArray",
    "cudaMemcpy2DFromArray", "cudaMemset", "cudaMemset2D", "cudaMemset3D", "cudaFree", "cudaFreeHost",
    "cudaFreeArray", "cudaFreeMipmappedArray",
    "cuMemcpy", "cuMemcpyDtoH", "cuMemcpyHtoD", "cuMemcpyDtoD", "cuMemcpyAtoH", "cuMemcpyHtoA", "cuMemcpy2D",
    "cuMemcpy2DUnaligned", "cuMemcpy3D", "cuMemcpyPeer", "cuMemcpy3DPeer", "cuMemsetD8", "cuMemsetD16",
    "cuMemsetD32", "cuMemsetD2D8", "cuMemsetD2D16", "cuMemsetD2D32", "cuMemFree", "cuMemFreeHost",
})  # fmt: skip
# CUPTI names may carry an API version or a per-thread default stream suffix: cuMemcpyDtoH_v2, cudaMemcpy_ptds.
_SUFFIX = re.compile(r"(_v\d+)?(_pt(sz|ds))?(_v\d+)?$")


def api_name(name: str) -> str:
    """A runtime or driver call's name without its version or per-thread suffix."""
    return _SUFFIX.sub("", name)


class TraceUnavailable(Exception):
    """The profiler could not record CUDA runtime calls here (CUPTI missing, busy or refused)."""


@dataclass(frozen=True)
class ApiCall:
    """One CUDA runtime or driver API call: its name, thread and time span (µs on the profiler's clock)."""

    name: str
    thread: Any
    start_us: float
    end_us: float
    correlation: Any = None  # links a launch to the GPU kernel it queued

    @property
    def duration_us(self) -> float:
        return self.end_us - self.start_us

    def blocks(self, wait_us: float) -> bool:
        """Whether this call is where the CPU waited for the GPU (a wait of at least `wait_us`)."""
        name = api_name(self.name)
        return name in SYNCHRONIZING or (name in MAY_BLOCK and self.duration_us >= wait_us)


@dataclass(frozen=True)
class Span:
    thread: Any
    start_us: float
    end_us: float

    def holds(self, thread: Any, start_us: float, end_us: float) -> bool:
        return thread == self.thread and self.start_us <= start_us and end_us <= self.end_us


_ADDRESS = re.compile(r" (of [^>]* )?at 0x[0-9a-fA-F]+")


def _frame_name(name: str) -> str:
    """A profiled Python function's name without object addresses: `<built-in method item of Tensor>`."""
    return _ADDRESS.sub(lambda m: f" {m.group(1).strip()}" if m.group(1) else "", name)


@dataclass(frozen=True)
class KernelRun:
    """A kernel that executed on the GPU while the profiler ran, and the correlation id of its launch."""

    name: str
    correlation: Any


@dataclass
class RuntimeTrace:
    calls: list[ApiCall]  # every runtime and driver call, in start order
    ranges: dict[str, Span]  # the profiler ranges by name (the last one of a name wins)
    functions: list[tuple[Span, str]]  # the Python functions (with_stack), with their spans
    kernels: list[KernelRun] = field(default_factory=list)  # the kernels that executed
    base_ns: int = 0  # wall-clock time (ns) of the trace's time 0

    def launch_of(self, kernel: KernelRun) -> ApiCall | None:
        """The runtime or driver call that launched `kernel`."""
        if kernel.correlation is None:
            return None
        return next((call for call in self.calls if call.correlation == kernel.correlation), None)

    def functions_around(self, call: ApiCall) -> list[tuple[Span, str]]:
        """The Python functions that hold `call` on its thread, innermost first."""
        holding = [(span, name) for span, name in self.functions if span.holds(*_where(call))]
        return sorted(holding, key=lambda item: item[0].start_us, reverse=True)

    def calls_in(self, range_name: str) -> list[ApiCall]:
        """The calls made inside the named range, on its thread."""
        span = self.ranges.get(range_name)
        if span is None:
            return []
        first = bisect.bisect_left(self.calls, span.start_us, key=lambda call: call.start_us)
        last = bisect.bisect_right(self.calls, span.end_us, key=lambda call: call.start_us)
        return [call for call in self.calls[first:last] if span.holds(*_where(call))]

    def library(self, call: ApiCall) -> str | None:
        """The innermost Python function around `call`, with its caller when that one is a built-in."""
        names = [_frame_name(name) for _, name in self.functions_around(call)[:2]]
        if len(names) == 2 and names[0].startswith("<built-in"):
            return f"{names[0]} in {names[1]}"
        return names[0] if names else None


def _where(call: ApiCall) -> tuple[Any, float, float]:
    return call.thread, call.start_us, call.end_us


def _span(event: dict[str, Any]) -> Span:
    start = float(event.get("ts", 0.0))
    return Span(event.get("tid"), start, start + float(event.get("dur", 0.0)))


def parse_trace(events: list[dict[str, Any]], base_ns: int = 0) -> RuntimeTrace:
    """The API calls, named ranges, Python functions and kernels of a Chrome trace's `traceEvents` (kineto's
    export); `base_ns` is its `baseTimeNanoseconds`."""
    calls, ranges, functions, kernels = [], {}, [], []
    for event in events:
        if event.get("ph") != "X":
            continue
        category, name = event.get("cat"), event.get("name", "")
        correlation = (event.get("args") or {}).get("correlation")
        if category in RUNTIME_CATEGORIES:
            span = _span(event)
            calls.append(ApiCall(name, span.thread, span.start_us, span.end_us, correlation))
        elif category == KERNEL_CATEGORY:
            kernels.append(KernelRun(name, correlation))
        elif category == RANGE_CATEGORY:
            ranges[name] = _span(event)
        elif category == PYTHON_CATEGORY:
            functions.append((_span(event), name))
    calls.sort(key=lambda call: call.start_us)
    return RuntimeTrace(calls, ranges, functions, kernels, base_ns)


def record(step: Callable[[], Any]) -> RuntimeTrace:
    """Run `step` under the profiler (CPU and CUDA activities, Python stacks); its runtime trace.

    Raises TraceUnavailable when the profiler fails or records no runtime call at all: `step` is
    expected to launch work, so an empty trace means CUPTI is not recording here. An exception
    raised by `step` itself propagates unchanged.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the profiler's own advice (acc_events, ...) is not the user's business
        try:
            prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True)
            prof.start()
        except (RuntimeError, OSError, ValueError) as exc:
            raise TraceUnavailable(f"the profiler did not start: {type(exc).__name__}: {exc}") from None
        try:
            step()
            torch.cuda.synchronize()
        except BaseException:
            with contextlib.suppress(Exception):
                prof.stop()
            raise
        fd, path = tempfile.mkstemp(prefix="graphready-trace-", suffix=".json")
        os.close(fd)
        try:
            prof.stop()
            prof.export_chrome_trace(path)
            document = json.loads(Path(path).read_text(encoding="utf-8"))
        except (RuntimeError, OSError, ValueError) as exc:
            raise TraceUnavailable(f"the profiler failed: {type(exc).__name__}: {exc}") from None
        finally:
            Path(path).unlink(missing_ok=True)
    trace = parse_trace(document.get("traceEvents", []), int(document.get("baseTimeNanoseconds") or 0))
    if not trace.calls:
        raise TraceUnavailable("the profiler recorded no CUDA runtime or driver call: CUPTI is not available")
    return trace
