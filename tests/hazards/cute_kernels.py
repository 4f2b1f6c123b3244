"""A CuTeDSL kernel for the GD202 hazard: out = 2 * x, launched with or without a stream argument."""

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
    _compiled["default"](*args)


def double_on_current_stream(x: torch.Tensor, out: torch.Tensor) -> None:
    assert x.numel() == ELEMENTS and out.numel() == ELEMENTS
    args = (from_dlpack(x), from_dlpack(out), _current_stream())
    if "stream" not in _compiled:
        _compiled["stream"] = cute.compile(_double_on, *args)
    _compiled["stream"](*args)
