"""The Sinkhorn normalisation of mHC's combine matrix, as one Triton kernel on CUDA.

The torch form is two reductions, two adds and two divides per iteration: with 20 iterations that is
~115 kernels per hyper-connection, twice per layer, for a 4x4 matrix per token, so at batch 1 it was the
largest block of the step's launches. The kernel runs the same arithmetic in fp32 and is bit-identical to it on CUDA: the
divides round to nearest (`div_rn`, not Triton's default approximate divide). Each sum adds the four
entries in the order torch's CUDA reduction does (measured: a strided column in index order, a contiguous
row as (0 + 2) + (1 + 3); torch on the CPU adds rows in index order, so CPU and CUDA already differ in the
last bit). Other devices, and hc other than 4, use the torch form.
"""

from __future__ import annotations

import torch

from dsv4.layers.kernels import pdl_options, runs_triton, tl, triton, wait_for_previous_kernel

if triton is not None:

    @triton.jit
    def _entry(m, index, k: tl.constexpr, axis: tl.constexpr):
        """Entry k along `axis` of a 4x4 tile (a one-hot sum is exact)."""
        return tl.sum(tl.where(index == k, m, 0.0), axis=axis)

    @triton.jit
    def sinkhorn_tile(m, iters, eps, HC: tl.constexpr):
        """`sinkhorn_torch` on one [HC, HC] fp32 tile held in registers (used by mHC's fused kernels too)."""
        rows = tl.arange(0, HC)[:, None]
        cols = tl.arange(0, HC)[None, :]
        # torch's CUDA sums, as measured on an H100: a column (strided) in index order, a row (contiguous,
        # one vector load) as (0 + 2) + (1 + 3)
        col_sum = ((_entry(m, rows, 0, 0) + _entry(m, rows, 1, 0)) + _entry(m, rows, 2, 0)) + _entry(m, rows, 3, 0)
        m = tl.math.div_rn(m, col_sum[None, :] + eps)
        for _ in range(iters - 1):
            row_sum = (_entry(m, cols, 0, 1) + _entry(m, cols, 2, 1)) + (_entry(m, cols, 1, 1) + _entry(m, cols, 3, 1))
            m = tl.math.div_rn(m, row_sum[:, None] + eps)
            col_sum = ((_entry(m, rows, 0, 0) + _entry(m, rows, 1, 0)) + _entry(m, rows, 2, 0)) + _entry(m, rows, 3, 0)
            m = tl.math.div_rn(m, col_sum[None, :] + eps)
        return m

    @triton.jit
    def _sinkhorn(comb, out, iters, eps, HC: tl.constexpr, PDL: tl.constexpr):
        wait_for_previous_kernel(PDL)
        offsets = tl.program_id(0) * HC * HC + tl.arange(0, HC)[:, None] * HC + tl.arange(0, HC)[None, :]
        tl.store(out + offsets, sinkhorn_tile(tl.load(comb + offsets), iters, eps, HC))


def sinkhorn_torch(comb: torch.Tensor, iters: int, eps: float) -> torch.Tensor:
    """Column-normalise, then `iters - 1` rounds of row- then column-normalisation ([..., hc, hc], fp32)."""
    comb = comb / (comb.sum(-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        comb = comb / (comb.sum(-1, keepdim=True) + eps)
        comb = comb / (comb.sum(-2, keepdim=True) + eps)
    return comb


def sinkhorn(comb: torch.Tensor, iters: int, eps: float) -> torch.Tensor:
    """`sinkhorn_torch`, as one kernel where it can run (CUDA, fp32, contiguous, hc = 4 as in DeepSeek-V4)."""
    hc = comb.shape[-1]
    if (not runs_triton(comb) or comb.dtype != torch.float32 or not comb.is_contiguous()
            or hc != 4 or comb.numel() == 0):
        return sinkhorn_torch(comb, iters, eps)
    out = torch.empty_like(comb)  # graphready: ignore[GR301] inside a capture the graph pool serves it
    _sinkhorn[(comb.numel() // (hc * hc),)](comb, out, iters, eps, HC=hc, **pdl_options())
    return out
