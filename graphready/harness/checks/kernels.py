"""GD202 escaped-kernels: compare the kernels an eager step launches with those the graph holds.

A kernel launched on another stream during capture (a CuTeDSL kernel called without its
`stream` argument, a launch on the legacy default stream) runs once, eagerly, and is missing
from the graph: replay silently skips it.
"""

from __future__ import annotations

import ctypes
from typing import Any, Callable

import torch

from graphready.harness.checks.graph_params import cuda_driver, graph_nodes

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


def _kernels(n: int) -> str:
    return f"{n} kernel" if n == 1 else f"{n} kernels"


def escaped_message(eager: int, graph: int) -> str:
    fix = "ran on another stream during capture and replay skips them (pass the current stream to the kernel)"
    if graph == 0:
        return f"the captured graph is empty but the eager step launches {_kernels(eager)}: they {fix}"
    return f"the graph holds {_kernels(graph)} but the eager step launches {eager}: {eager - graph} {fix}"
