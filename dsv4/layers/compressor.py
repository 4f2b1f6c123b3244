"""KV compressor (spec section 4): pools every m tokens into one cache entry with a learned per-channel softmax.

HCA (m = 128) pools the m tokens of its window. CSA (m = 4, overlapping) keeps 8 slots: the previous
window's first channel half plus the current window's second half. Two update paths share the math:
`update_eager` branches on a host position; `update_graph` computes the pooled entry every step and
commits it with `torch.where(boundary, new, old)` at a device-computed slot.
"""

from __future__ import annotations

import torch

from dsv4.layers.primitives import fp4_fake_quant, fp8_fake_quant, hadamard, linear, rms_norm, rope_tail
from dsv4.layers.weights import dense_tensor


class Compressor:
    def __init__(self, weights: dict, prefix: str, ratio: int, width: int, entries: torch.Tensor, ctx, indexer: bool):
        """`entries` is the [B, max_len // ratio, width] view of the cache the pooled entries are written to.

        The main compressor FP8-quantizes its non-RoPE channels; the indexer's applies Hadamard then FP4.
        """
        device = ctx.device
        self.ratio = ratio
        self.width = width
        self.overlap = ratio == 4
        self.indexer = indexer
        # fp32 weights and input, as the official compressor runs (its checkpoint stores them bf16)
        self.wkv = dense_tensor(weights[f"{prefix}.wkv"], device, torch.float32)
        self.wgate = dense_tensor(weights[f"{prefix}.wgate"], device, torch.float32)
        self.ape = dense_tensor(weights[f"{prefix}.ape"], device, torch.float32)
        self.norm = dense_tensor(weights[f"{prefix}.norm.weight"], device, torch.float32)
        self.ctx = ctx
        self.entries = entries
        slots = 2 * ratio if self.overlap else ratio
        channels = (1 + self.overlap) * width
        self.kv_state = torch.zeros(ctx.batch, slots, channels, dtype=torch.float32, device=device)
        self.score_state = torch.zeros(ctx.batch, slots, channels, dtype=torch.float32, device=device)
        self.reset()

    def reset(self) -> None:
        """Empty state: kv 0, score -inf (in place, so captured graphs keep their addresses)."""
        self.kv_state.zero_()
        self.score_state.fill_(float("-inf"))

    def _project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """kv and gate scores, an fp32 GEMM of the fp32 input (no bf16 rounding of the projections)."""
        return linear(x, self.wkv), linear(x, self.wgate)

    def _pool(self) -> torch.Tensor:
        """Softmax-weighted sum over the slots, per channel, fp32 -> [B, width]."""
        kv, score = self.kv_state, self.score_state
        if self.overlap:
            half, c = self.ratio, self.width
            kv = torch.cat([kv[:, :half, :c], kv[:, half:, c:]], dim=1)
            score = torch.cat([score[:, :half, :c], score[:, half:, c:]], dim=1)
        # softmax over the slot dim, spelled out: torch.softmax over a non-last dim is a slow kernel on GPU
        e = torch.exp(score - score.amax(1, keepdim=True))
        return (e / e.sum(1, keepdim=True) * kv).sum(1)

    def _finish(self, pooled: torch.Tensor, cos_sin: torch.Tensor) -> torch.Tensor:
        """norm -> RoPE at the window start -> fake-quant, as the cache stores it (bf16 [B, width])."""
        cfg = self.ctx.config
        entry = rms_norm(pooled.to(torch.bfloat16), self.norm, cfg.rms_norm_eps)
        entry = rope_tail(entry, cfg.qk_rope_head_dim, cos_sin)
        if self.indexer:
            return fp4_fake_quant(hadamard(entry), self.ctx.fp4_tables)
        nope = self.width - cfg.qk_rope_head_dim
        return torch.cat([fp8_fake_quant(entry[:, :nope]), entry[:, nope:]], dim=-1)

    def _shift(self, boundary: torch.Tensor | None) -> None:
        """CSA: the finished window's slots become the previous window."""
        half = self.ratio
        for state in (self.kv_state, self.score_state):
            new = state[:, half:]
            if boundary is not None:
                new = torch.where(boundary, new, state[:, :half])
            state[:, :half].copy_(new)

    def update_eager(self, x: torch.Tensor, position: int, rope: torch.Tensor) -> None:
        kv, score = self._project(x)
        slot = position % self.ratio + (self.ratio if self.overlap else 0)
        self.kv_state[:, slot] = kv
        self.score_state[:, slot] = score + self.ape[position % self.ratio]
        if (position + 1) % self.ratio:
            return
        start = position + 1 - self.ratio
        entry = self._finish(self._pool(), rope[start : start + 1])
        self.entries[:, position // self.ratio] = entry
        if self.overlap:
            self._shift(None)

    def update_graph(self, x: torch.Tensor, pos: torch.Tensor, rope: torch.Tensor) -> None:
        """Same as `update_eager` with the position `pos` ([1] int64) on the device and no host branch."""
        kv, score = self._project(x)
        phase = torch.remainder(pos, self.ratio)
        slot = phase + self.ratio if self.overlap else phase
        self.kv_state.index_copy_(1, slot, kv.unsqueeze(1))
        self.score_state.index_copy_(1, slot, (score + self.ape.index_select(0, phase)).unsqueeze(1))
        boundary = (phase == self.ratio - 1).view(1, 1, 1)
        start = (pos + 1 - self.ratio).clamp(min=0)
        entry = self._finish(self._pool(), rope.index_select(0, start))
        target = torch.div(pos, self.ratio, rounding_mode="floor").clamp(max=self.entries.shape[1] - 1)
        old = self.entries.index_select(1, target)
        self.entries.index_copy_(1, target, torch.where(boundary, entry.unsqueeze(1), old))
        if self.overlap:
            self._shift(boundary)
