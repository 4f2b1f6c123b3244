"""The Sinkhorn normalisation of mHC's combine matrix, as one Triton kernel on CUDA.

The torch form is two reductions, two adds and two divides per iteration: with 20 iterations that is
~115 kernels per hyper-connection, twice per layer, for a 4x4 matrix per token, so at batch 1 it was the
largest block of the step's launches. The kernel runs the same arithmetic in fp32 and is bit-identical:
each sum adds the four entries in index order, as torch's reduction does for a dimension of four, and the
divides round to nearest (`div_rn`, not Triton's default approximate divide). Other devices use the torch
form.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # CPU-only installs: the torch form is used
    triton = None

if triton is not None:

    @triton.jit
    def _ordered_sum(m, index, axis: tl.constexpr, HC: tl.constexpr):
        """Sum of a HC x HC tile along `axis`, adding entry 0, then 1, ... (a one-hot sum is exact)."""
        total = tl.sum(tl.where(index == 0, m, 0.0), axis=axis)
        for k in tl.static_range(1, HC):
            total = total + tl.sum(tl.where(index == k, m, 0.0), axis=axis)
        return total

    @triton.jit
    def _sinkhorn(comb, out, iters, eps, HC: tl.constexpr):
        base = tl.program_id(0) * HC * HC
        rows = tl.arange(0, HC)[:, None]
        cols = tl.arange(0, HC)[None, :]
        m = tl.load(comb + base + rows * HC + cols)
        m = tl.math.div_rn(m, _ordered_sum(m, rows, 0, HC)[None, :] + eps)
        for _ in range(iters - 1):
            m = tl.math.div_rn(m, _ordered_sum(m, cols, 1, HC)[:, None] + eps)
            m = tl.math.div_rn(m, _ordered_sum(m, rows, 0, HC)[None, :] + eps)
        tl.store(out + base + rows * HC + cols, m)


def sinkhorn_torch(comb: torch.Tensor, iters: int, eps: float) -> torch.Tensor:
    """Column-normalise, then `iters - 1` rounds of row- then column-normalisation ([..., hc, hc], fp32)."""
    comb = comb / (comb.sum(-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        comb = comb / (comb.sum(-1, keepdim=True) + eps)
        comb = comb / (comb.sum(-2, keepdim=True) + eps)
    return comb


def sinkhorn(comb: torch.Tensor, iters: int, eps: float) -> torch.Tensor:
    """`sinkhorn_torch`, as one kernel where it can run (CUDA, fp32, contiguous, power-of-two hc)."""
    hc = comb.shape[-1]
    if (triton is None or not comb.is_cuda or comb.dtype != torch.float32 or not comb.is_contiguous()
            or hc & (hc - 1) or comb.numel() == 0):
        return sinkhorn_torch(comb, iters, eps)
    out = torch.empty_like(comb)  # graphready: ignore[GR301] inside a capture the graph pool serves it
    _sinkhorn[(comb.numel() // (hc * hc),)](comb, out, iters, eps, HC=hc)
    return out
