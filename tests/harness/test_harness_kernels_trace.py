"""GD202's escaped launches: which user line launched each kernel that ran during a profiled capture."""

from __future__ import annotations

import dis
import sys
from pathlib import Path

import pytest

from graphready.harness.call_sites import CallSite, CallSites
from graphready.harness.checks.kernels import CAPTURE_RANGE, escaped_at_message, launch_lines
from graphready.harness.runtime_trace import parse_trace
from graphready.harness.frames import Location

THREAD = 7
BASE_NS = 1_000_000_000


def _step(kernel, other):
    other()
    kernel()  # the launch line
    return other()


LAUNCH_LINE = _step.__code__.co_firstlineno + 2


def _event(cat, name, ts, dur, **args):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "tid": THREAD, "args": args}


def _trace(launch_ts: float, kernel_correlation: int = 5):
    shown = f"{Path(__file__).parent.name}/{Path(__file__).name}"
    events = [
        _event("user_annotation", CAPTURE_RANGE, 100, 900),
        _event("python_function", "torch/cuda/graphs.py(10): __enter__", 101, 5),
        _event("python_function", f"{shown}({_step.__code__.co_firstlineno}): _step", 110, 500),
        _event("python_function", "cutlass/base_dsl/jit_executor.py(300): __call__", 300, 100),
        # torch.cuda.graph fills the RNG's seed and offset before it begins capturing: those kernels run
        _event("cuda_runtime", "cudaLaunchKernel", 102, 1, correlation=2),
        _event("kernel", "void at::native::vectorized_elementwise_kernel<2, FillFunctor<long>>", 103, 1, correlation=2),
        _event("cuda_runtime", "cudaStreamBeginCapture", 104, 1, correlation=3),
        _event("cuda_runtime", "cudaLaunchKernel", 150, 3, correlation=4),  # captured: never executes
        _event("cuda_driver", "cuLaunchKernel", launch_ts, 4, correlation=5),
        _event("cuda_runtime", "cudaStreamEndCapture", 990, 1, correlation=6),
        _event("kernel", "kernel_double_0", 2000, 2, correlation=kernel_correlation),
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 5, "ts": 2000},
    ]
    return parse_trace(events, BASE_NS)


def _sites(*times_us):
    """Call sites of _step at its three calls, made at the given trace times (µs)."""
    offsets = [i.offset for i in dis.get_instructions(_step.__code__) if i.opname.startswith("CALL")]
    return [CallSite(_step.__code__, offset, THREAD, BASE_NS + int(t * 1000)) for offset, t in zip(offsets, times_us)]


def test_an_executed_kernel_is_located_at_the_user_line_of_its_launch():
    trace = _trace(launch_ts=350)
    found = launch_lines(trace, CAPTURE_RANGE, _sites(120, 290, 700), Path(__file__).parent)
    assert found == {Location(Path(__file__).name, LAUNCH_LINE): ["kernel_double_0"]}
    assert trace.launch_of(trace.kernels[-1]).name == "cuLaunchKernel"


def test_a_launch_outside_the_profiled_capture_is_not_an_escape():
    assert launch_lines(_trace(launch_ts=1500), CAPTURE_RANGE, _sites(120, 290, 700)) == {}


def test_without_call_sites_the_kernel_is_counted_but_not_located():
    assert launch_lines(_trace(launch_ts=350), CAPTURE_RANGE, []) == {None: ["kernel_double_0"]}


def test_torchs_own_kernels_before_the_capture_begins_are_no_escape():
    """Measured on an H200 (torch 2.11): entering `torch.cuda.graph` runs two fills; a step whose graph lacks only
    kernels it launches outside capture got a false GD202 from them."""
    trace = _trace(launch_ts=1500)
    assert [kernel.correlation for kernel in trace.kernels] == [2, 5]
    assert launch_lines(trace, CAPTURE_RANGE, []) == {}


def test_a_kernel_without_a_launch_in_the_trace_is_skipped():
    assert launch_lines(_trace(launch_ts=350, kernel_correlation=99), CAPTURE_RANGE, _sites(120, 290, 700)) == {}


def test_the_message_names_the_kernels_once():
    text = escaped_at_message(["kernel_double_0", "kernel_double_0"])
    assert text.startswith("2 kernels (kernel_double_0) launched here") and "current stream" in text


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is Python 3.12+")
def test_call_sites_record_the_line_of_each_user_call():
    with CallSites() as sites:
        _step(lambda: None, lambda: None)
    lines = [site.line for site in sites.sites if site.code is _step.__code__]
    assert lines == [LAUNCH_LINE - 1, LAUNCH_LINE, LAUNCH_LINE + 1]
    assert all(site.thread == sites.sites[0].thread for site in sites.sites)
