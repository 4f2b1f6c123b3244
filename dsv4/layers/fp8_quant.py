"""e4m3 fake quantisation with one power-of-two scale per block, as one Triton kernel on CUDA.

The torch form (`primitives.fp8_fake_quant`) is ~18 kernels (amax, the scale's bit arithmetic, divide,
clamp, two casts, multiply); it runs before every FP8/FP4-weight GEMM and on every KV-cache write, so at
batch 1 it was a large share of the step's launches. This kernel does the same arithmetic in fp32 and is
bit-identical: the scale is built from the fp32 bits of ``max(amax, floor) * (1/qmax)`` (exponent, plus
one when any mantissa bit is set), ``x / scale`` is an exact multiply by the reciprocal power of two, and
fp32 -> e4m3 rounds to nearest even in both. Other devices, strided inputs and widths that are not a
multiple of the block use the torch form. Rows may be strided (a channel slice of a wider tensor), and the
kernel may write over its input: the KV entries quantise their non-RoPE channels in place.
"""

from __future__ import annotations

import torch

from dsv4.layers.kernels import pdl_options, runs_triton, tl, triton, wait_for_previous_kernel

ROWS = 16  # blocks per program

if triton is not None:

    @triton.jit
    def pow2_block_exponent(v, QMAX: tl.constexpr, FLOOR: tl.constexpr):
        """Biased fp32 exponent of each row's power-of-two scale, ``2^ceil(log2(max(amax, floor) / qmax))``
        read from the bits of the fp32 product (`primitives.pow2_round_scale`), for a tile [rows, block]."""
        y = tl.maximum(tl.max(tl.abs(v), axis=1), FLOOR) * (1.0 / QMAX)
        bits = y.to(tl.int32, bitcast=True)
        return ((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0).to(tl.int32)

    @triton.jit
    def fp8_round_trip(v, QMAX: tl.constexpr, FLOOR: tl.constexpr):
        """e4m3 fake quantisation of each row of an fp32 tile [rows, block] (one row = one scale block)."""
        exponent = pow2_block_exponent(v, QMAX, FLOOR)
        scale = (exponent << 23).to(tl.float32, bitcast=True)
        inverse = ((254 - exponent) << 23).to(tl.float32, bitcast=True)
        q = tl.minimum(tl.maximum(v * inverse[:, None], -QMAX), QMAX)
        return q.to(tl.float8e4nv).to(tl.float32) * scale[:, None]

    @triton.jit
    def _fp8_fake_quant(x, out, n_blocks, row_blocks, x_stride, out_stride, BLOCK: tl.constexpr, ROWS_: tl.constexpr,
                        QMAX: tl.constexpr, FLOOR: tl.constexpr, PDL: tl.constexpr):
        wait_for_previous_kernel(PDL)
        blocks = tl.program_id(0) * ROWS_ + tl.arange(0, ROWS_)
        ok = blocks < n_blocks
        row, column = blocks // row_blocks, (blocks % row_blocks) * BLOCK
        channels = tl.arange(0, BLOCK)[None, :]
        v = tl.load(x + (row * x_stride + column)[:, None] + channels, mask=ok[:, None], other=0.0).to(tl.float32)
        tl.store(out + (row * out_stride + column)[:, None] + channels,
                 fp8_round_trip(v, QMAX, FLOOR).to(out.dtype.element_ty), mask=ok[:, None])


def _rows(t: torch.Tensor) -> torch.Tensor | None:
    """`t` as [rows, width] with unit channel stride (a view), or None when it has no such view."""
    if t.dim() == 2 and t.stride(1) == 1:
        return t
    return t.view(-1, t.shape[-1]) if t.is_contiguous() else None


def fused_fp8_fake_quant(x: torch.Tensor, block: int, qmax: float, floor: float,
                         out: torch.Tensor | None = None) -> torch.Tensor | None:
    """The kernel's result (in `out` when given: x's shape, x itself allowed, since each block is read before it
    is written), or None where the torch form must run (no Triton, not CUDA, strided channels, ragged)."""
    if not runs_triton(x) or x.shape[-1] % block or x.numel() == 0:
        return None
    if out is None:
        out = torch.empty_like(x)  # graphready: ignore[GR301] inside a capture the graph pool serves it, same address each replay
    rows, out_rows = _rows(x), _rows(out)
    if rows is None or out_rows is None or out.shape != x.shape:
        return None
    n_blocks = x.numel() // block
    _fp8_fake_quant[(triton.cdiv(n_blocks, ROWS),)](rows, out_rows, n_blocks, x.shape[-1] // block, rows.stride(0),
                                                     out_rows.stride(0), BLOCK=block, ROWS_=ROWS, QMAX=qmax,
                                                     FLOOR=floor, **pdl_options())
    return out
