"""y[n] = W[ids[n]] @ x[n] for stacked expert weights, reading only the selected experts.

On CUDA with an NVFP4 weight, a Triton kernel decodes the packed e2m1 nibbles and block scales on the fly
(one pass over the FP4 bytes; no dequantized copy is written). Each weight element is rounded to bf16
exactly as `NVFP4Weight.dequantize` would, products and sums are fp32, the result is bf16: the same math as
the fallback (`index_select(ids).dequantize()` then a bf16 batched matmul) with another summation order.
"""

from __future__ import annotations

import torch

from dsv4.formats import NVFP4_BLOCK, NVFP4Weight

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: the torch fallback is used
    triton = None

BLOCK_OUT = 16
BLOCK_BYTES = 128  # packed bytes per row per iteration = 256 weights


if triton is not None:

    @triton.jit
    def _e2m1(code):
        """Value of an e2m1 code (bit 3 sign, 2 exponent bits, 1 mantissa bit) as fp32."""
        mag = code & 7
        exp = mag >> 1
        mant = (mag & 1).to(tl.float32)
        power = tl.where(exp == 1, 1.0, tl.where(exp == 2, 2.0, 4.0))
        value = tl.where(exp == 0, mant * 0.5, (1.0 + mant * 0.5) * power)
        return tl.where((code & 8) != 0, -value, value)

    @triton.jit
    def _nvfp4_matvec(packed, scale, global_scale, ids, x, out, n_out, n_bytes,
                      sp_e, sp_o, ss_e, ss_o, sx_n, so_n,
                      BLOCK_O: tl.constexpr, BLOCK_B: tl.constexpr):
        slot = tl.program_id(1)
        expert = tl.load(ids + slot)
        rows = tl.program_id(0) * BLOCK_O + tl.arange(0, BLOCK_O)
        row_ok = rows < n_out
        g = tl.load(global_scale + expert)
        acc = tl.zeros([BLOCK_O], dtype=tl.float32)
        for start in range(0, n_bytes, BLOCK_B):
            cols = start + tl.arange(0, BLOCK_B)
            col_ok = cols < n_bytes
            mask = row_ok[:, None] & col_ok[None, :]
            p = tl.load(packed + expert * sp_e + rows[:, None] * sp_o + cols[None, :], mask=mask, other=0).to(tl.int32)
            s = tl.load(scale + expert * ss_e + rows[:, None] * ss_o + cols[None, :] // 8, mask=mask, other=0.0)
            s = s.to(tl.float32) * g
            w_lo = (_e2m1(p & 15) * s).to(tl.bfloat16).to(tl.float32)
            w_hi = (_e2m1(p >> 4) * s).to(tl.bfloat16).to(tl.float32)
            x_lo = tl.load(x + slot * sx_n + 2 * cols, mask=col_ok, other=0.0).to(tl.float32)
            x_hi = tl.load(x + slot * sx_n + 2 * cols + 1, mask=col_ok, other=0.0).to(tl.float32)
            acc += tl.sum(w_lo * x_lo[None, :] + w_hi * x_hi[None, :], axis=1)
        tl.store(out + slot * so_n + rows, acc.to(tl.bfloat16), mask=row_ok)


def fused_available(weight, x: torch.Tensor) -> bool:
    return triton is not None and x.is_cuda and isinstance(weight, NVFP4Weight) and NVFP4_BLOCK == 16


def expert_matvec(weight, ids: torch.Tensor, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Write W[ids[n]] @ x[n] into `out` ([N, out] bf16) for `ids` [N] and `x` [N, in] bf16; returns `out`."""
    if not fused_available(weight, x):
        w = weight.index_select(ids).dequantize(dtype=torch.bfloat16)
        return out.copy_(torch.bmm(w, x.unsqueeze(-1)).squeeze(-1))
    packed, scale = weight.packed, weight.scale
    n_out, n_bytes = packed.shape[-2], packed.shape[-1]
    grid = (triton.cdiv(n_out, BLOCK_OUT), ids.numel())
    _nvfp4_matvec[grid](packed, scale, weight.global_scale, ids, x, out, n_out, n_bytes,
                        packed.stride(0), packed.stride(1), scale.stride(0), scale.stride(1),
                        x.stride(0), out.stride(0), BLOCK_O=BLOCK_OUT, BLOCK_B=BLOCK_BYTES)
    return out
