"""The Triton stand-in for the CuTeDSL GD202 kernel: out = 2 * x, on the default or the current stream."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BACKEND = "triton"
BLOCK = 128


@triton.jit
def _double(src, dst, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offsets, tl.load(src + offsets) * 2.0)


def double_without_stream(x: torch.Tensor, out: torch.Tensor) -> None:
    # What a CuTeDSL kernel does when called without `stream`: launch on the default stream.
    with torch.cuda.stream(torch.cuda.default_stream(x.device)):
        _double[(x.numel() // BLOCK,)](x, out, BLOCK=BLOCK)  # hazard: GD202


def double_on_current_stream(x: torch.Tensor, out: torch.Tensor) -> None:
    _double[(x.numel() // BLOCK,)](x, out, BLOCK=BLOCK)


def _tensor(x: torch.Tensor) -> torch.Tensor:
    return x


def compile_without_stream(out: torch.Tensor):
    """The stand-in for a kernel compiled ahead of the step: the launch, and the (identity) argument wrapper."""
    return double_without_stream, _tensor


def compile_on_stream(out: torch.Tensor):
    return (lambda x, y, stream: double_on_current_stream(x, y)), _tensor


def current_stream() -> None:
    return None


@triton.jit
def scale_cold(src, dst, BLOCK: tl.constexpr):
    """GD203: first launched inside a capture (it compiles there)."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offsets, tl.load(src + offsets) * 3.0)


@triton.jit
def scale_warm(src, dst, BLOCK: tl.constexpr):
    """GD203's clean twin: the same kernel, compiled and loaded by the unit's setup."""
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offsets, tl.load(src + offsets) * 3.0)
