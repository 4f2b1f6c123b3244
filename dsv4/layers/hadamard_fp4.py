"""The indexer's Hadamard transform and FP4 fake quantisation of its queries and keys, as one Triton kernel.

In torch ops the transform is three kernels per butterfly stage (seven stages for 128 channels) and the
FP4 round trip about ten more, twice per CSA layer per step. The kernel keeps a row in registers: the
same fp32 butterflies (pairs (i, i+h) in blocks of 2h, h = 1, 2, 4, ...), the n^-1/2 scale, a bf16
rounding, then per 32 values the power-of-two scale and e2m1 rounding (nearest, ties to even) of
`primitives.fp4_fake_quant`. Every step is the torch form's operation in its order, so results are
bit-identical. Other devices and sizes that are not a power of two use the torch form.
"""

from __future__ import annotations

import torch

from dsv4.layers.kernels import pdl_options, runs_triton, tl, triton, wait_for_previous_kernel

if triton is not None:
    from dsv4.layers.fp8_quant import pow2_block_exponent

    @triton.jit
    def _butterfly(y, N: tl.constexpr, H: tl.constexpr):
        """One stage: (a, b) -> (a + b, a - b) for the pairs (i, i + H) in blocks of 2H."""
        a, b = tl.split(tl.permute(tl.reshape(y, (N // (2 * H), 2, H)), (0, 2, 1)))
        return tl.reshape(tl.permute(tl.join(a + b, a - b), (0, 2, 1)), (N,))

    @triton.jit
    def _hadamard_fp4(x, out, N: tl.constexpr, LOG2N: tl.constexpr, BLOCK: tl.constexpr, FLOOR: tl.constexpr,
                      PDL: tl.constexpr):
        wait_for_previous_kernel(PDL)
        row = tl.program_id(0).to(tl.int64)
        y = tl.load(x + row * N + tl.arange(0, N)).to(tl.float32)
        for stage in tl.static_range(LOG2N):
            y = _butterfly(y, N, 1 << stage)
        y = (y * (N ** -0.5)).to(tl.bfloat16).to(tl.float32)
        blocks = tl.reshape(y, (N // BLOCK, BLOCK))
        scale = (pow2_block_exponent(blocks, 6.0, FLOOR) << 23).to(tl.float32, bitcast=True)
        mag = tl.minimum(tl.abs(blocks / scale[:, None]), 6.0)
        # e2m1 grid 0, .5, 1, 1.5, 2, 3, 4, 6: a tie goes to the even mantissa (0.75 -> 1, 1.75 -> 2, 3.5 -> 4)
        q = (0.5 * ((mag > 0.25).to(tl.float32) + (mag >= 0.75).to(tl.float32) + (mag > 1.25).to(tl.float32)
                    + (mag >= 1.75).to(tl.float32))
             + (mag > 2.5).to(tl.float32) + (mag >= 3.5).to(tl.float32) + 2.0 * (mag > 5.0).to(tl.float32))
        sign = tl.where(blocks > 0, 1.0, tl.where(blocks < 0, -1.0, 0.0))
        result = tl.reshape(q * sign * scale[:, None], (N,))
        tl.store(out + row * N + tl.arange(0, N), result.to(out.dtype.element_ty))


def fused_hadamard_fp4(x: torch.Tensor, block: int, floor: float, out: torch.Tensor | None = None) -> torch.Tensor | None:
    """`fp4_fake_quant(hadamard(x))` over the last dim (into `out` when given: contiguous, x's shape and dtype), or
    None where the torch form must run."""
    n = x.shape[-1]
    if (not runs_triton(x) or not x.is_contiguous() or x.numel() == 0 or n & (n - 1) or n < block
            or x.dtype != torch.bfloat16):
        return None
    if out is not None and (out.shape != x.shape or out.dtype != x.dtype or not out.is_contiguous()):
        return None
    if out is None:
        out = torch.empty_like(x)  # graphready: ignore[GR301] inside a capture the graph pool serves it
    _hadamard_fp4[(x.numel() // n,)](x, out, N=n, LOG2N=n.bit_length() - 1, BLOCK=block, FLOOR=floor, **pdl_options())
    return out
