"""The compressor's per-step state write and softmax pool, as one Triton kernel on CUDA.

`Compressor.update_graph` in torch ops is ~25 kernels per compressor, token and step at batch 1: the slot
arithmetic on the device position, two `index_copy_` into the states, the positional bias, CSA's half
selection (index selects and concatenations) and the softmax over the slots spelled out. The kernel takes the
step's positions as a device tensor and, for each token in order (two in a speculative step), writes the
token's kv and biased score into its slot, then pools its window (a barrier between the block's writes and its
reads, and between its reads and the next token's writes): one launch per step, not per token. The
arithmetic is the torch form's (fp32; max over the slots; libdevice `expf`; e / sum rounded to nearest, times
kv, summed over the slots); the sums add in another order, so the pooled entry agrees to fp32 rounding, not
bit for bit. Other devices use the torch form.
"""

from __future__ import annotations

import torch

from dsv4.layers.kernels import libdevice, pdl_options, runs_triton, tl, triton, wait_for_previous_kernel

if triton is not None:

    @triton.jit
    def _state_pool(kv, score, ape, kv_state, score_state, at, pooled, width, channels, slots,
                    RATIO: tl.constexpr, OVERLAP: tl.constexpr, POOLED: tl.constexpr, ROWS: tl.constexpr,
                    BLOCK_C: tl.constexpr, TOKENS: tl.constexpr, PARTS: tl.constexpr, PDL: tl.constexpr):
        """One sequence's channel block, token after token: write the token's slot, then pool its window."""
        wait_for_previous_kernel(PDL)
        b = tl.program_id(0)
        cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
        col_ok = cols < width
        state = b.to(tl.int64) * slots * channels
        i = tl.arange(0, ROWS)
        for t in tl.static_range(TOKENS):
            p = tl.load(at + t)
            phase = p % RATIO
            half = (p // RATIO) % 2
            slot = phase
            if OVERLAP:
                slot = phase + half * RATIO
            row = b.to(tl.int64) * TOKENS + t  # rows in (sequence, token) order
            # the token's row: its kv and score + the positional bias, written to its slot (both halves for CSA)
            for part in tl.static_range(PARTS):
                offset = part * width
                new_kv = tl.load(kv + row * channels + offset + cols, mask=col_ok, other=0.0)
                new_score = tl.load(score + row * channels + offset + cols, mask=col_ok, other=0.0) + \
                    tl.load(ape + phase * channels + offset + cols, mask=col_ok, other=0.0)
                tl.store(kv_state + state + slot * channels + offset + cols, new_kv, mask=col_ok)
                tl.store(score_state + state + slot * channels + offset + cols, new_score, mask=col_ok)
            tl.debug_barrier()  # the block's writes are visible to all its threads before they read the window
            if OVERLAP:  # CSA: the previous window's first channel half, then the current window's second half
                current = i >= RATIO
                rows = tl.where(current, half * RATIO + i - RATIO, (1 - half) * RATIO + i)
                offsets = rows[:, None] * channels + tl.where(current, width, 0)[:, None] + cols[None, :]
            else:  # HCA: the window's slots
                offsets = i[:, None] * channels + cols[None, :]
            ok = col_ok[None, :] & (i < POOLED)[:, None]
            v = tl.load(kv_state + state + offsets, mask=ok, other=0.0)
            s = tl.load(score_state + state + offsets, mask=ok, other=float("-inf"))
            e = libdevice.exp(s - tl.max(s, axis=0)[None, :])
            weights = tl.math.div_rn(e, tl.sum(e, axis=0)[None, :])
            tl.store(pooled + row * width + cols, tl.sum(weights * v, axis=0), mask=col_ok)
            tl.debug_barrier()  # ... and done reading it before the next token writes its slot


def fused_state_pool(kv: torch.Tensor, score: torch.Tensor, ape: torch.Tensor, kv_state: torch.Tensor,
                     score_state: torch.Tensor, at: torch.Tensor, ratio: int, overlap: bool,
                     width: int) -> torch.Tensor | None:
    """For the step's tokens in order (their positions `at` [T] on the device; kv and score rows [B*T, channels]
    in (sequence, token) order): write each token's slot of the states (in place) and pool its window. Returns
    the pooled windows [B*T, width] fp32, or None where the torch form must run."""
    tensors = (kv, score, ape, kv_state, score_state)
    batch, tokens = kv_state.shape[0], at.numel()
    if (not runs_triton(kv) or any(t.dtype != torch.float32 or not t.is_contiguous() for t in tensors)
            or at.dtype != torch.int64 or at.device != kv.device or not at.is_contiguous()
            or kv.shape[0] != batch * tokens):
        return None
    pooled = kv.new_empty((kv.shape[0], width))
    window = 2 * ratio if overlap else ratio  # slots pooled per channel
    rows = triton.next_power_of_2(window)
    block = max(16, min(128, 4096 // rows))
    _state_pool[(batch, triton.cdiv(width, block))](
        kv, score, ape, kv_state, score_state, at, pooled, width, kv_state.shape[2], kv_state.shape[1],
        RATIO=ratio, OVERLAP=overlap, POOLED=window, ROWS=rows, BLOCK_C=block, TOKENS=tokens,
        PARTS=1 + overlap, num_warps=4, **pdl_options())
    return pooled
