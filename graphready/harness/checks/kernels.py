"""GD202 escaped-kernels: compare the kernels an eager step launches with those the graph holds.

A kernel launched on another stream during capture (a CuTeDSL kernel called without its
`stream` argument, a launch on the legacy default stream) runs once, eagerly, and is missing
from the graph: replay silently skips it. A launch that went into the graph does not execute
during capture, so every kernel the GPU runs during a profiled capture escaped: its launch call
in the runtime trace, pinned to the user's call site, is the line to fix.
"""

from __future__ import annotations

import ctypes
import re
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

from graphready.harness import runtime_trace
from graphready.harness.call_sites import CallSite, CallSites
from graphready.harness.checks.capture import new_graph
from graphready.harness.checks.pointers.graph_params import cuda_driver, graph_nodes
from graphready.harness.frames import Location, relative_path
from graphready.output.summary import counted

CU_GRAPH_NODE_TYPE_KERNEL = 0
_NOT_KERNELS = ("Memcpy", "Memset", "cudaMemcpy", "cudaMemset")


def eager_kernel_count(step: Callable[[], Any]) -> int | None:
    """Kernels one eager step launches, counted by the CUDA profiler (None if it is unavailable)."""
    try:
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            step()
            torch.cuda.synchronize()
        events = prof.events()
    except Exception:
        return None
    return sum(
        1
        for event in events
        if event.device_type == DeviceType.CUDA and not event.name.startswith(_NOT_KERNELS)
    )


def graph_kernel_count(graph: torch.cuda.CUDAGraph) -> int | None:
    """Kernel nodes in a captured graph, read from its cudaGraph_t through the driver API."""
    lib = cuda_driver()
    raw = getattr(graph, "raw_cuda_graph", None)
    if lib is None or raw is None:
        return None
    try:
        nodes = graph_nodes(lib, raw())
    except (RuntimeError, OSError):  # the graph was not kept (torch built without keep_graph), or unreadable
        return None
    node_type = ctypes.c_int(-1)
    kernels = 0
    for node in nodes:
        if lib.cuGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(node_type)) != 0:
            return None
        kernels += node_type.value == CU_GRAPH_NODE_TYPE_KERNEL
    return kernels


def replay_kernel_count(replay: Callable[[], None]) -> int | None:
    """Fallback when the graph's nodes cannot be read: the kernels one replay executes."""
    return eager_kernel_count(replay)


def escaped_message(eager: int, graph: int) -> str:
    fix = "ran on another stream during capture and replay skips them (pass the current stream to the kernel)"
    if graph == 0:
        return f"the captured graph is empty but the eager step launches {counted(eager, 'kernel')}: they {fix}"
    return f"the graph holds {counted(graph, 'kernel')} but the eager step launches {eager}: {eager - graph} {fix}"


CAPTURE_RANGE = "graphready: escaped-kernel capture"
_FUNCTION = re.compile(r"^(?P<path>.+)\((?P<line>\d+)\): (?P<name>[^ ]+)$")  # kineto's "file.py(12): name"
_NAME_CHARS = 80


def escaped_launches(step: Callable[[], Any], stream: torch.cuda.Stream,
                     root: Path | None = None) -> dict[Location | None, list[str]]:
    """Capture `step` once more, into a graph of its own that is then dropped, under the profiler; the
    kernels that executed meanwhile (they escaped the graph) by the user line that launched them (None
    when no user call site was found). Raises runtime_trace.TraceUnavailable when the profiler cannot
    record here; an exception from the step propagates."""

    def capture() -> None:
        graph = new_graph()
        with warnings.catch_warnings(), torch.profiler.record_function(CAPTURE_RANGE):
            warnings.simplefilter("ignore")  # the original capture already reported its warnings
            with torch.cuda.graph(graph, stream=stream):
                step()

    with CallSites() as sites:
        trace = runtime_trace.record(capture)
    return launch_lines(trace, CAPTURE_RANGE, sites.sites, root)


def _while_capturing(calls: list[runtime_trace.ApiCall]) -> list[runtime_trace.ApiCall]:
    """The calls between the stream's begin- and end-capture calls. Before the begin, `torch.cuda.graph` itself
    launches kernels (it fills the RNG's seed and offset for the graph): they run, but escape nothing."""
    begins = [i for i, call in enumerate(calls) if "StreamBeginCapture" in call.name]
    ends = [i for i, call in enumerate(calls) if "StreamEndCapture" in call.name]
    return calls[begins[0] + 1:ends[-1] if ends else len(calls)] if begins else calls


def launch_lines(trace: runtime_trace.RuntimeTrace, range_name: str, sites: list[CallSite],
                 root: Path | None = None) -> dict[Location | None, list[str]]:
    """The kernels that executed after a launch made inside `range_name` while the stream was capturing, by the
    user line of that launch."""
    calls = _while_capturing(trace.calls_in(range_name))
    launches = {call.correlation: call for call in calls if call.correlation is not None}
    found: dict[Location | None, list[str]] = {}
    for kernel in trace.kernels:
        call = launches.get(kernel.correlation)
        if call is not None:
            found.setdefault(_user_line(trace, call, sites, root), []).append(kernel.name)
    return found


def _user_line(trace: runtime_trace.RuntimeTrace, call: runtime_trace.ApiCall, sites: list[CallSite],
               root: Path | None) -> Location | None:
    """The last call made before `call`, on its thread, by the innermost user function that holds it."""
    for _, name in trace.functions_around(call):
        function = _FUNCTION.match(name)
        if function is None:
            continue
        made = [site for site in sites if site.thread == call.thread and site.code.co_name == function["name"]
                and _same_file(site.code.co_filename, function["path"])
                and (site.time_ns - trace.base_ns) / 1000 <= call.start_us]
        if made:
            return Location(relative_path(made[-1].code.co_filename, root), made[-1].line)
    return None


def _same_file(filename: str, shown: str) -> bool:
    """kineto shows a file relative to the sys.path entry it was found under."""
    filename, shown = Path(filename).as_posix(), Path(shown).as_posix()
    return filename == shown or filename.endswith("/" + shown.lstrip("/"))


def escaped_at_message(kernels: list[str]) -> str:
    names = ", ".join(sorted({name[:_NAME_CHARS] for name in kernels}))
    what = f"{counted(len(kernels), 'kernel')} ({names})"
    return (f"{what} launched here ran during capture on another stream, outside the graph, and replay skips "
            "them (pass the current stream to the kernel)")
