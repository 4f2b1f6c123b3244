"""The compressor's per-step state write and softmax pool, as one Triton kernel on CUDA.

`Compressor.update_graph` in torch ops is ~25 kernels per compressor and step at batch 1: the slot arithmetic
on the device position, two `index_copy_` into the states, the positional bias, CSA's half selection (index
selects and concatenations) and the softmax over the slots spelled out. The kernel takes the position as a
[1] device tensor, writes this token's kv and biased score into its slot, and pools the window from
registers, the new row standing in for the one it overwrote, so nothing is read back after the write. The
arithmetic is the torch form's (fp32; max over the slots; libdevice `expf`; e / sum rounded to nearest, times
kv, summed over the slots); the sums add in another order, so the pooled entry agrees to fp32 rounding, not
bit for bit. Other devices use the torch form.
"""

from __future__ import annotations

import torch

from dsv4.layers.kernels import libdevice, runs_triton, tl, triton

if triton is not None:

    @triton.jit
    def _state_pool(kv, score, ape, kv_state, score_state, pos, pooled, width, channels, slots,
                    RATIO: tl.constexpr, OVERLAP: tl.constexpr, POOLED: tl.constexpr, ROWS: tl.constexpr,
                    BLOCK_C: tl.constexpr):
        b = tl.program_id(0)
        cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
        col_ok = cols < width
        p = tl.load(pos)
        phase = p % RATIO
        half = (p // RATIO) % 2
        slot = phase
        if OVERLAP:
            slot = phase + half * RATIO
        row_in = b.to(tl.int64) * channels
        state = b.to(tl.int64) * slots * channels
        # the token's row: its kv and score + the positional bias, written to its slot (both channel halves for CSA)
        new_kv = tl.load(kv + row_in + cols, mask=col_ok, other=0.0)
        new_score = tl.load(score + row_in + cols, mask=col_ok, other=0.0) + \
            tl.load(ape + phase * channels + cols, mask=col_ok, other=0.0)
        tl.store(kv_state + state + slot * channels + cols, new_kv, mask=col_ok)
        tl.store(score_state + state + slot * channels + cols, new_score, mask=col_ok)
        i = tl.arange(0, ROWS)
        if OVERLAP:  # CSA: the previous window's first channel half, then the current window's second half
            hi_kv = tl.load(kv + row_in + width + cols, mask=col_ok, other=0.0)
            hi_score = tl.load(score + row_in + width + cols, mask=col_ok, other=0.0) + \
                tl.load(ape + phase * channels + width + cols, mask=col_ok, other=0.0)
            tl.store(kv_state + state + slot * channels + width + cols, hi_kv, mask=col_ok)
            tl.store(score_state + state + slot * channels + width + cols, hi_score, mask=col_ok)
            current = i >= RATIO
            rows = tl.where(current, half * RATIO + i - RATIO, (1 - half) * RATIO + i)
            offsets = rows[:, None] * channels + tl.where(current, width, 0)[:, None] + cols[None, :]
            fresh = (current & (rows == slot))[:, None]
            fresh_kv, fresh_score = hi_kv, hi_score
        else:  # HCA: the window's slots
            offsets = i[:, None] * channels + cols[None, :]
            fresh = (i == slot)[:, None]
            fresh_kv, fresh_score = new_kv, new_score
        ok = col_ok[None, :] & (i < POOLED)[:, None]
        v = tl.where(fresh, fresh_kv[None, :], tl.load(kv_state + state + offsets, mask=ok, other=0.0))
        s = tl.where(fresh, fresh_score[None, :],
                     tl.load(score_state + state + offsets, mask=ok, other=float("-inf")))
        e = libdevice.exp(s - tl.max(s, axis=0)[None, :])
        weights = tl.math.div_rn(e, tl.sum(e, axis=0)[None, :])
        tl.store(pooled + b.to(tl.int64) * width + cols, tl.sum(weights * v, axis=0), mask=col_ok)


def fused_state_pool(kv: torch.Tensor, score: torch.Tensor, ape: torch.Tensor, kv_state: torch.Tensor,
                     score_state: torch.Tensor, pos: torch.Tensor, ratio: int, overlap: bool,
                     width: int) -> torch.Tensor | None:
    """Write the token's slot of the states (in place) and return the pooled window [B, width] fp32, or None
    where the torch form must run."""
    tensors = (kv, score, ape, kv_state, score_state)
    if (not runs_triton(kv) or any(t.dtype != torch.float32 or not t.is_contiguous() for t in tensors)
            or pos.numel() != 1 or pos.dtype != torch.int64 or pos.device != kv.device):
        return None
    batch = kv.shape[0]
    pooled = kv.new_empty((batch, width))
    window = 2 * ratio if overlap else ratio  # slots pooled per channel
    rows = triton.next_power_of_2(window)
    block = max(16, min(128, 4096 // rows))
    _state_pool[(batch, triton.cdiv(width, block))](
        kv, score, ape, kv_state, score_state, pos, pooled, width, kv_state.shape[2], kv_state.shape[1],
        RATIO=ratio, OVERLAP=overlap, POOLED=window, ROWS=rows, BLOCK_C=block, num_warps=4)
    return pooled
