"""y[n] = W[ids[n]] @ x[n] for stacked expert weights, reading only the selected experts.

On CUDA with an NVFP4 weight, a Triton kernel decodes the packed e2m1 nibbles on the fly (one pass over the
FP4 bytes, no dequantized copy): it sums e2m1 * x inside each 16-weight block, applies the block's e4m3
scale, then the global scale, all in fp32, and rounds the result to bf16. That is the fallback's math
(`index_select(ids).dequantize()`, then a bf16 batched matmul) except that the weights are never rounded
to bf16, so results agree to bf16 precision, not bit for bit; on a GPU every path uses the kernel.
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
BLOCK_BYTES = 256  # packed bytes per row per iteration = 512 weights


if triton is not None:

    @triton.jit
    def _e2m1(code):
        """fp32 value of e2m1 codes (bit 3 sign): for magnitude m >= 2 the fp32 bit pattern is (m + 252) << 22."""
        mag = code & 7
        bits = tl.where(mag >= 2, (mag + 252) << 22, tl.where(mag == 1, 252 << 22, 0))
        return (bits | ((code & 8) << 28)).to(tl.float32, bitcast=True)

    @triton.jit
    def _nvfp4_matvec(packed, scale, global_scale, ids, x, out, n_out, n_bytes,
                      sp_e, sp_o, ss_e, ss_o, sx_n, so_n,
                      BLOCK_O: tl.constexpr, BLOCK_B: tl.constexpr):
        slot = tl.program_id(1)
        expert = tl.load(ids + slot)
        rows = tl.program_id(0) * BLOCK_O + tl.arange(0, BLOCK_O)
        row_ok = rows < n_out
        acc = tl.zeros([BLOCK_O], dtype=tl.float32)
        for start in range(0, n_bytes, BLOCK_B):
            cols = start + tl.arange(0, BLOCK_B)
            col_ok = cols < n_bytes
            p = tl.load(packed + expert * sp_e + rows[:, None] * sp_o + cols[None, :],
                        mask=row_ok[:, None] & col_ok[None, :], other=0).to(tl.int32)
            x_lo = tl.load(x + slot * sx_n + 2 * cols, mask=col_ok, other=0.0).to(tl.float32)
            x_hi = tl.load(x + slot * sx_n + 2 * cols + 1, mask=col_ok, other=0.0).to(tl.float32)
            prod = _e2m1(p & 15) * x_lo[None, :] + _e2m1(p >> 4) * x_hi[None, :]
            # 8 packed bytes = one 16-weight scale block: sum inside blocks, then apply the block scales
            partial = tl.sum(tl.reshape(prod, (BLOCK_O, BLOCK_B // 8, 8)), axis=2)
            blocks = start // 8 + tl.arange(0, BLOCK_B // 8)
            s = tl.load(scale + expert * ss_e + rows[:, None] * ss_o + blocks[None, :],
                        mask=row_ok[:, None] & (blocks[None, :] < n_bytes // 8), other=0.0).to(tl.float32)
            acc += tl.sum(partial * s, axis=1)
        acc = acc * tl.load(global_scale + expert)
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
    # Triton launches on the current device's current stream: callers make x.device current
    _nvfp4_matvec[grid](packed, scale, weight.global_scale, ids, x, out, n_out, n_bytes,
                        packed.stride(0), packed.stride(1), scale.stride(0), scale.stride(1),
                        x.stride(0), out.stride(0), BLOCK_O=BLOCK_OUT, BLOCK_B=BLOCK_BYTES)
    return out
