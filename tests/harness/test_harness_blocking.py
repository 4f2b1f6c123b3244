"""GD101's busy-GPU probe: which CUDA calls in a runtime trace make a waiting line a sync, on the CPU.

The GPU side (a CuPy sync caught, a long line and launch back-pressure cleared) is in
tests/hazards/test_hazard_sync.py; here the trace parsing and the decision run on synthetic
Chrome-trace events (what kineto exports), and the per-line profiler ranges on a real CPU profile.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from graphready.harness.checks.syncs.blocking import (
    BlockingSite,
    RangedStretches,
    blocking_message,
    blocking_sites,
    unconfirmed_note,
)
from graphready.harness.runtime_trace import ApiCall, api_name, parse_trace
from graphready.harness.frames import Location
from graphready.harness.linetrace import SegmentTracer

ROOT = Path(__file__).resolve().parents[2]
WAIT_US = 12_500.0
THREAD = 7
LINE = Location("model.py", 12)
OTHER = Location("model.py", 13)


def event(category: str, name: str, ts: float, dur: float, tid: int = THREAD) -> dict:
    return {"ph": "X", "cat": category, "name": name, "ts": ts, "dur": dur, "tid": tid, "pid": 1}


def stretch(index: int, ts: float, dur: float) -> dict:
    return event("user_annotation", RangedStretches.range_name(index), ts, dur)


def runtime(name: str, ts: float, dur: float, tid: int = THREAD) -> dict:
    return event("cuda_runtime", name, ts, dur, tid)


def test_api_names_lose_version_and_per_thread_suffixes():
    assert api_name("cuMemcpyDtoH_v2") == "cuMemcpyDtoH"
    assert api_name("cudaMemcpy_ptds") == "cudaMemcpy"
    assert api_name("cudaStreamSynchronize_ptsz") == "cudaStreamSynchronize"
    assert api_name("cudaLaunchKernel_v7000") == "cudaLaunchKernel"
    assert api_name("cudaMemcpyAsync") == "cudaMemcpyAsync"


def test_syncs_always_block_copies_and_frees_only_when_they_lasted_a_wait_launches_never():
    def call(name: str, dur: float) -> ApiCall:
        return ApiCall(name, THREAD, 0.0, dur)

    for name in ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cuCtxSynchronize"):
        assert call(name, 5.0).blocks(WAIT_US), name
    for name in ("cudaMemcpy", "cuMemcpyDtoH_v2", "cudaFree", "cudaFreeHost"):
        assert call(name, 40_000.0).blocks(WAIT_US) and not call(name, 30.0).blocks(WAIT_US), name
    # Launch back-pressure: the CPU blocked 300 ms inside a launch is not a sync; nor are async or query calls.
    for name in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync",
                 "cudaStreamWaitEvent", "cudaEventQuery", "cudaStreamIsCapturing"):  # fmt: skip
        assert not call(name, 300_000.0).blocks(WAIT_US), name


def test_a_stretch_holds_the_calls_made_inside_its_range_on_its_thread():
    trace = parse_trace([
        stretch(0, 100.0, 50.0),
        runtime("cudaLaunchKernel", 90.0, 5.0),  # before the range
        runtime("cudaLaunchKernel", 110.0, 5.0),
        runtime("cudaDeviceSynchronize", 120.0, 20.0, tid=8),  # another thread
        runtime("cudaEventQuery", 145.0, 10.0),  # ends after the range
        event("cuda_driver", "cuLaunchKernel", 130.0, 2.0),
        {"ph": "i", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "ts": 120.0, "tid": THREAD},  # no span
        event("cpu_op", "aten::add", 111.0, 3.0),
    ])  # fmt: skip
    assert [call.name for call in trace.calls_in(RangedStretches.range_name(0))] == ["cudaLaunchKernel", "cuLaunchKernel"]
    assert trace.calls_in(RangedStretches.range_name(1)) == []
    assert len(trace.calls) == 5


def test_the_library_frame_is_the_innermost_python_function_and_a_builtins_caller():
    trace = parse_trace([
        event("python_function", "units.py(559): __call__", 0.0, 100.0),
        event("python_function", "<built-in function deviceSynchronize>", 10.0, 50.0),
        event("python_function", "torch/cuda/__init__.py(1152): synchronize", 70.0, 20.0),
        event("python_function", "<built-in method item of Tensor object at 0x7f1bd5552350>", 71.0, 10.0),
        runtime("cudaDeviceSynchronize", 11.0, 40.0),
        runtime("cudaStreamSynchronize", 72.0, 5.0),
        runtime("cudaLaunchKernel", 95.0, 2.0),
        runtime("cudaLaunchKernel", 200.0, 2.0),
    ])  # fmt: skip
    sync, item, launch, outside = trace.calls
    assert trace.library(sync) == "<built-in function deviceSynchronize> in units.py(559): __call__"
    assert trace.library(item) == "<built-in method item of Tensor object> in torch/cuda/__init__.py(1152): synchronize"
    assert trace.library(launch) == "units.py(559): __call__"
    assert trace.library(outside) is None


def test_a_waiting_line_is_a_sync_only_with_a_blocking_call_in_its_stretches():
    stretches = [(LINE, "Module._wrapped_call_impl (torch/nn/modules/module.py)"), (OTHER, None), (LINE, None)]
    back_pressure = parse_trace([
        stretch(0, 0.0, 320_000.0),
        runtime("cudaLaunchKernel", 10.0, 300_000.0),
        stretch(1, 320_100.0, 10.0),
        runtime("cudaDeviceSynchronize", 320_102.0, 5.0),  # a sync, but on a line that never waited
    ])  # fmt: skip
    assert blocking_sites(stretches, back_pressure, {LINE}, WAIT_US) == {}

    synced = parse_trace([
        stretch(0, 0.0, 50_000.0),
        event("python_function", "<built-in function deviceSynchronize>", 100.0, 45_000.0),
        runtime("cudaDeviceSynchronize", 101.0, 44_000.0),
        stretch(2, 60_000.0, 50_000.0),
        runtime("cudaStreamSynchronize", 60_001.0, 45_000.0),
    ])  # fmt: skip
    sites = blocking_sites(stretches, synced, {LINE}, WAIT_US)
    assert sites == {LINE: BlockingSite("cudaDeviceSynchronize", "<built-in function deviceSynchronize>", 2)}

    no_stack = parse_trace([stretch(0, 0.0, 50_000.0), runtime("cudaMemcpy", 10.0, 40_000.0)])
    site = blocking_sites(stretches, no_stack, {LINE}, WAIT_US)[LINE]
    assert (site.call, site.detail, site.count) == ("cudaMemcpy", stretches[0][1], 1)


def _two_lines(x):
    y = x * 3.0
    return torch.relu(y)


def test_each_stretch_of_user_code_runs_inside_its_own_profiler_range():
    """On a real (CPU) profile: the range of the stretch at a line holds the ops that line ran."""
    first = inspect.getsourcelines(_two_lines)[1]
    stretches = RangedStretches(lambda ended, library: None)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with SegmentTracer(stretches.boundary, ROOT):
            _two_lines(torch.ones(4))
        stretches.close()
    events = prof.events()
    ranges = {e.name: e.time_range for e in events if e.name.startswith("graphready.stretch.")}
    assert len(ranges) == len(stretches.stretches) + 1  # the last range ends at close()
    lines = [location and location.line for location, _ in stretches.stretches]
    for op, line in (("aten::mul", first + 1), ("aten::relu", first + 2)):
        span = next(e.time_range for e in events if e.name == op)
        holding = [lines[i] for i in range(len(lines)) if ranges[RangedStretches.range_name(i)].start <= span.start
                   and span.end <= ranges[RangedStretches.range_name(i)].end]  # fmt: skip
        assert holding == [line], (op, holding, lines)


def test_the_message_names_the_call_its_caller_and_the_count():
    text = blocking_message(BlockingSite("cudaStreamSynchronize", "<built-in function deviceSynchronize>", 2))
    assert "in cudaStreamSynchronize (2 times per step, called from <built-in function deviceSynchronize>)" in text
    assert "sync debug mode reports nothing" in text


def test_a_missing_runtime_trace_leaves_the_waiting_lines_as_a_note():
    note = unconfirmed_note({OTHER, LINE}, "the profiler recorded no CUDA runtime or driver call")
    assert note.startswith("GD101 not decided for model.py:12, model.py:13:")
    assert "no CUDA runtime or driver call" in note
