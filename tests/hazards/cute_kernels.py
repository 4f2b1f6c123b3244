"""A CuTeDSL kernel for the GD202 hazard: out = 2 * x, launched with or without a stream argument, compiled on
its first call or ahead of the step (`cute.compile`, the compiled kernel held by the step's object)."""

from __future__ import annotations

import cuda.bindings.driver as cuda_driver
import cutlass.cute as cute
import torch
from cutlass.cute.runtime import from_dlpack

BACKEND = "cutedsl"
THREADS = 128
ELEMENTS = 1024


@cute.kernel
def _double_kernel(src: cute.Tensor, dst: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    i = bidx * THREADS + tidx
    dst[i] = src[i] * 2.0


@cute.jit
def _double_default_stream(src: cute.Tensor, dst: cute.Tensor):
    _double_kernel(src, dst).launch(grid=[ELEMENTS // THREADS, 1, 1], block=[THREADS, 1, 1])


@cute.jit
def _double_on(src: cute.Tensor, dst: cute.Tensor, stream: cuda_driver.CUstream):
    _double_kernel(src, dst).launch(grid=[ELEMENTS // THREADS, 1, 1], block=[THREADS, 1, 1], stream=stream)


_compiled: dict[str, object] = {}


def _current_stream() -> cuda_driver.CUstream:
    return cuda_driver.CUstream(torch.cuda.current_stream().cuda_stream)


def double_without_stream(x: torch.Tensor, out: torch.Tensor) -> None:
    assert x.numel() == ELEMENTS and out.numel() == ELEMENTS
    args = (from_dlpack(x), from_dlpack(out))
    if "default" not in _compiled:
        _compiled["default"] = cute.compile(_double_default_stream, *args)
    _compiled["default"](*args)  # hazard: GD202


def double_on_current_stream(x: torch.Tensor, out: torch.Tensor) -> None:
    assert x.numel() == ELEMENTS and out.numel() == ELEMENTS
    args = (from_dlpack(x), from_dlpack(out), _current_stream())
    if "stream" not in _compiled:
        _compiled["stream"] = cute.compile(_double_on, *args)
    _compiled["stream"](*args)


def compile_without_stream(out: torch.Tensor):
    """The kernel compiled ahead of the step, as an engine does at load time, and the wrapper its arguments need.

    The compiled kernel keeps weak proxies to its compile-time arguments, dead once they go: a step that holds
    it holds dead proxies too (issue 26: they once killed the pointer audit's walk)."""
    scratch = torch.empty_like(out)
    return cute.compile(_double_default_stream, from_dlpack(scratch), from_dlpack(out)), from_dlpack


def compile_on_stream(out: torch.Tensor):
    """`compile_without_stream`'s clean twin: the compiled kernel takes the stream to launch on."""
    scratch = torch.empty_like(out)
    return cute.compile(_double_on, from_dlpack(scratch), from_dlpack(out), _current_stream()), from_dlpack


def current_stream() -> cuda_driver.CUstream:
    return _current_stream()
