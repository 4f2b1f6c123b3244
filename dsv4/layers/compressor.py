"""KV compressor (spec section 4): pools every m tokens into one cache entry with a learned per-channel softmax.

HCA (m = 128) pools the m tokens of its window. CSA (m = 4, overlapping) pools the previous window's first
channel half with the current window's second half; its 8 slots are two halves used by alternate windows
(window w writes half w % 2), so nothing is shifted and re-running a position rewrites exactly what it wrote
(a rejected speculative token leaves no trace). Two update paths share the math: `update_eager` branches on
a host position; `update_graph` computes the pooled entry every step and commits it at the slot the step's
`RatioPositions` computed: the window's entry where the window closes, else the token's scratch row past
the entries, which nothing reads.
"""

from __future__ import annotations

import torch

from dsv4.layers.compressor_pool import fused_state_pool
from dsv4.layers.fp32_matvec import fp32_matvec
from dsv4.layers.primitives import FP8_BLOCK, hadamard_fp4, norm_rope_tail
from dsv4.layers.weights import dense_tensor, fp32_gemm_weight


class Compressor:
    def __init__(self, weights: dict, prefix: str, ratio: int, width: int, entries: torch.Tensor, ctx, indexer: bool,
                 positions):
        """`entries` is the [B, max_len // ratio + T, width] view of the cache the pooled entries are written to,
        its last T rows the scratch rows of a step's T tokens; `positions` the device's `StepPositions`.

        The main compressor FP8-quantizes its non-RoPE channels; the indexer's applies Hadamard then FP4.
        """
        device = ctx.device
        self.ratio = ratio
        self.width = width
        self.overlap = ratio == 4
        self.indexer = indexer
        # an fp32 GEMM, as the official compressor runs, of the weights as stored (bf16: `fp32_matvec`);
        # wkv and wgate stacked: one GEMV reads both (two small ones ran at a third of HBM bandwidth)
        self.projection = torch.cat([fp32_gemm_weight(weights[f"{prefix}.{name}"], device)
                                     for name in ("wkv", "wgate")])
        self.ape = dense_tensor(weights[f"{prefix}.ape"], device, torch.float32)
        self.norm = dense_tensor(weights[f"{prefix}.norm.weight"], device, torch.float32)
        self.ctx = ctx
        self.entries = entries
        self.at_ratio = positions.use(ratio)
        self.positions = positions
        slots = 2 * ratio if self.overlap else ratio
        channels = (1 + self.overlap) * width
        self.kv_state = torch.zeros(ctx.batch, slots, channels, dtype=torch.float32, device=device)
        self.score_state = torch.zeros(ctx.batch, slots, channels, dtype=torch.float32, device=device)
        self.reset()

    def reset(self) -> None:
        """Empty state: kv 0, score -inf (in place, so captured graphs keep their addresses)."""
        self.kv_state.zero_()
        self.score_state.fill_(float("-inf"))

    def _project(self, x: torch.Tensor, x32: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """kv and gate scores, an fp32 GEMM of the fp32 input (no bf16 rounding of the projections); `x32`: x in
        fp32, when the caller has it."""
        kv, score = fp32_matvec(x if x32 is None else x32, self.projection).chunk(2, dim=-1)
        return kv.contiguous(), score.contiguous()

    def _pool(self, half) -> torch.Tensor:
        """Softmax-weighted sum over the slots, per channel, fp32 -> [B, width]. `half`: the current window's
        half of the CSA slots (int or [1] device tensor); HCA ignores it."""
        kv, score = self.kv_state, self.score_state
        if self.overlap:
            kv, score = self._halves(kv, half), self._halves(score, half)
        # softmax over the slot dim, spelled out: torch.softmax over a non-last dim is a slow kernel on GPU
        e = torch.exp(score - score.amax(1, keepdim=True))
        return (e / e.sum(1, keepdim=True) * kv).sum(1)

    def _halves(self, state: torch.Tensor, half) -> torch.Tensor:
        """CSA: [previous window's slots, first channel half | current window's slots, second channel half]."""
        c, halves = self.width, state.unflatten(1, (2, self.ratio))
        if isinstance(half, int):
            previous, current = halves[:, 1 - half], halves[:, half]
        else:
            previous, current = halves.index_select(1, 1 - half)[:, 0], halves.index_select(1, half)[:, 0]
        return torch.cat([previous[..., :c], current[..., c:]], dim=1)

    def _finish(self, pooled: torch.Tensor, cos_sin: torch.Tensor, slots: torch.Tensor | None = None) -> torch.Tensor:
        """norm -> RoPE at the window start -> fake-quant, as the cache stores it (bf16 [B, width]); with `slots`
        (the [T] device slots of the B x T rows) committed to the entries there instead (the main compressor's
        norm kernel writes them itself), returning the entries."""
        cfg = self.ctx.config
        scatter = None if slots is None or self.indexer else (self.entries, slots)
        entry = norm_rope_tail(pooled, self.norm, cfg.rms_norm_eps, cfg.qk_rope_head_dim, cos_sin,
                               dtype=torch.bfloat16, quant_block=0 if self.indexer else FP8_BLOCK, scatter=scatter)
        if not self.indexer:
            return entry
        entry = hadamard_fp4(entry, self.ctx.fp4_tables)
        return entry if slots is None else self.entries.index_copy_(1, slots, entry.unflatten(0, (-1, slots.numel())))

    def update_eager(self, x: torch.Tensor, position: int, rope: torch.Tensor) -> None:
        """The step's tokens in order (x [B*T] rows in (sequence, token) order, token t at `position + t`),
        branching on the host position: a window's entry is pooled and committed where it closes."""
        kv, score = self._project(x)
        steps = self.ctx.tokens_per_step
        for t in range(steps):
            at = position + t
            half = at // self.ratio % 2
            slot = at % self.ratio + (half * self.ratio if self.overlap else 0)
            self.kv_state[:, slot] = kv[t::steps]
            self.score_state[:, slot] = score[t::steps] + self.ape[at % self.ratio]
            if (at + 1) % self.ratio:
                continue
            start = at + 1 - self.ratio
            self.entries[:, at // self.ratio] = self._finish(self._pool(half), rope[start : start + 1])

    def update_graph(self, x: torch.Tensor, x32: torch.Tensor | None = None) -> None:
        """Same as `update_eager`, no host branch: the slots and positions come from the step's `RatioPositions`
        (computed on the device); every token's pooled entry is committed, at its window's entry where the
        window closes, else at the token's scratch row. One projection, state pool, finish and commit for all
        the step's tokens. `x32`: x in fp32, when the caller has it."""
        kv, score = self._project(x, x32)
        p, steps = self.at_ratio, self.ctx.tokens_per_step
        pooled = fused_state_pool(kv, score, self.ape, self.kv_state, self.score_state, self.positions.at,
                                  self.ratio, self.overlap, self.width)
        if pooled is None:
            pooled = torch.stack([self._write_and_pool(kv[t::steps], score[t::steps], slice(t, t + 1))
                                  for t in range(steps)], dim=1).flatten(0, 1)
        self._finish(pooled, self.positions.start_rows[self.ratio], p.target)

    def _write_and_pool(self, kv: torch.Tensor, score: torch.Tensor, row: slice) -> torch.Tensor:
        """The torch form of `fused_state_pool` for one token (`row` of the step's positions)."""
        p = self.at_ratio
        slot = p.slot[row] if self.overlap else p.phase[row]
        self.kv_state.index_copy_(1, slot, kv.unsqueeze(1))
        self.score_state.index_copy_(1, slot, (score + self.ape.index_select(0, p.phase[row])).unsqueeze(1))
        return self._pool(p.half[row])
