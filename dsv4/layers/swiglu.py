"""The experts' clamped SwiGLU, times the routing weight, rounded to bf16 and (optionally) FP8-quantised for
the down projection, as one Triton kernel on CUDA.

In torch ops that chain is about ten kernels per expert GEMM pair (casts, clamps, silu, products, the FP8
round trip), for a [top_k, 3072] tile at batch 1: pure launch cost. The kernel computes the torch form's
fp32 arithmetic in its order (`silu(min(g, limit)) * clamp(u, -limit, limit)`, then the weight), rounds
to bf16, and quantises each 128-wide block of those bf16 values with the same code as `fp8_quant`; only
silu's exponential may differ in the last fp32 bit, so results agree to bf16 rounding. Other devices,
strided inputs and widths that are not a multiple of the block use the torch form.
"""

from __future__ import annotations

import torch

from dsv4.layers.kernels import pdl_options, runs_triton, tl, triton, wait_for_previous_kernel

BLOCKS = 8  # quantisation blocks per program

if triton is not None:
    from dsv4.layers.fp8_quant import fp8_round_trip

    @triton.jit
    def _swiglu(gate, up, weight, out, n, n_weighted, limit, HAS_WEIGHT: tl.constexpr, QUANT: tl.constexpr,
                BLOCK: tl.constexpr, BLOCKS_: tl.constexpr, QMAX: tl.constexpr, FLOOR: tl.constexpr, PDL: tl.constexpr):
        wait_for_previous_kernel(PDL)
        row = tl.program_id(0)
        blocks = tl.program_id(1) * BLOCKS_ + tl.arange(0, BLOCKS_)
        cols = blocks[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
        ok = cols < n
        g = tl.minimum(tl.load(gate + row * n + cols, mask=ok, other=0.0).to(tl.float32), limit)
        u = tl.load(up + row * n + cols, mask=ok, other=0.0).to(tl.float32)
        h = g * tl.sigmoid(g) * tl.minimum(tl.maximum(u, -limit), limit)
        if HAS_WEIGHT:
            h = h * tl.load(weight + row, mask=row < n_weighted, other=1.0)
        h = h.to(tl.bfloat16).to(tl.float32)
        if QUANT:
            h = fp8_round_trip(h, QMAX, FLOOR)
        tl.store(out + row * n + cols, h.to(tl.bfloat16), mask=ok)


def fused_swiglu(gate: torch.Tensor, up: torch.Tensor, limit: float, weight: torch.Tensor | None, quantize: bool,
                 block: int, qmax: float, floor: float) -> torch.Tensor | None:
    """bf16 [rows, n] (FP8-quantised per `block` channels when `quantize`), or None where the torch form must run.
    `weight`: fp32, one routing weight per row (rows past its end: 1, the shared expert's), or None. Programs
    cover whole blocks either way."""
    if (not runs_triton(gate) or gate.dim() != 2 or gate.shape != up.shape or gate.numel() == 0
            or not (gate.is_contiguous() and up.is_contiguous()) or gate.shape[-1] % block
            or (weight is not None and (weight.dtype != torch.float32 or not weight.is_contiguous()))):
        return None
    rows, n = gate.shape
    out = torch.empty(rows, n, dtype=torch.bfloat16, device=gate.device)  # graphready: ignore[GR301] graph pool
    grid = (rows, triton.cdiv(n // block, BLOCKS))
    n_weighted = weight.numel() if weight is not None else 0
    _swiglu[grid](gate, up, weight if weight is not None else gate, out, n, n_weighted, limit, HAS_WEIGHT=weight is not None,
                  QUANT=quantize, BLOCK=block, BLOCKS_=BLOCKS, QMAX=qmax, FLOOR=floor, **pdl_options())
    return out
