"""Greedy decoding's argmax over the vocabulary, as two Triton kernels on CUDA.

torch's `argmax` over one row of 129,280 fp32 logits runs as a single-block reduction: ~28 us at batch 1 on an
H100, longer than the rest of the head's small kernels together. Here one kernel takes the max and its first
index in each block of the row, and one picks among the blocks; ties go to the lowest index, as torch's (the
first occurrence of the max). Other devices use torch.
"""

from __future__ import annotations

import torch

from dsv4.layers.kernels import pdl_options, runs_triton, tl, triton, wait_for_previous_kernel

BLOCK = 4096  # logits per program of the first pass

if triton is not None:

    @triton.jit
    def _block_argmax(logits, best, where, n, blocks, BLOCK: tl.constexpr, PDL: tl.constexpr):
        wait_for_previous_kernel(PDL)
        row, block = tl.program_id(0), tl.program_id(1)
        cols = block * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(logits + row.to(tl.int64) * n + cols, mask=cols < n, other=float("-inf"))
        top, at = tl.max(v, axis=0, return_indices=True, return_indices_tie_break_left=True)
        tl.store(best + row * blocks + block, top)
        tl.store(where + row * blocks + block, block * BLOCK + at)

    @triton.jit
    def _row_argmax(best, where, out, blocks, BLOCKS: tl.constexpr, PDL: tl.constexpr):
        wait_for_previous_kernel(PDL)
        row = tl.program_id(0)
        i = tl.arange(0, BLOCKS)
        v = tl.load(best + row * blocks + i, mask=i < blocks, other=float("-inf"))
        _, at = tl.max(v, axis=0, return_indices=True, return_indices_tie_break_left=True)
        tl.store(out + row, tl.load(where + row * blocks + at).to(tl.int64))


def argmax_rows(logits: torch.Tensor) -> torch.Tensor:
    """`logits.argmax(-1)` for [rows, n] logits (int64 [rows])."""
    if not runs_triton(logits) or logits.dim() != 2 or not logits.is_contiguous() \
            or logits.dtype != torch.float32:
        return logits.argmax(-1)
    rows, n = logits.shape
    blocks = triton.cdiv(n, BLOCK)
    best = logits.new_empty((rows, blocks))  # graphready: ignore[GR301] inside a capture the graph pool serves it
    where = torch.empty((rows, blocks), dtype=torch.int32, device=logits.device)  # graphready: ignore[GR301]
    out = torch.empty(rows, dtype=torch.int64, device=logits.device)  # graphready: ignore[GR301]
    _block_argmax[(rows, blocks)](logits, best, where, n, blocks, BLOCK=BLOCK, num_warps=8, **pdl_options())
    _row_argmax[(rows,)](best, where, out, blocks, BLOCKS=triton.next_power_of_2(blocks), **pdl_options())
    return out
