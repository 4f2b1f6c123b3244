"""DeepSeek-V4's multi-token-prediction (MTP) layer and the device state of one-draft speculative decoding.

The MTP layer (official `MTPBlock`, weights ``mtp.0.*``) predicts the token after next: for the main model's
final residual streams h_p at position p and the token x_{p+1},
``x = e_proj(enorm(embed(x_{p+1}))) + h_proj(hnorm(h_p))`` (per stream; both GEMMs take FP8 activations like
every FP8-weight GEMM), then one decoder block (layer index num_hidden_layers: its compress ratio, non-hash
routing, its own caches, at position p), then its own hc_head and final norm and the main model's head.

A speculative step (batch 1, two tokens per step) feeds the main model the known token t at p and the draft d
for p+1; it yields greedy tokens g_{p+1}, g_{p+2}. The token decided at p+1 is g_{p+1} (or, while prefilling,
the prompt's); the draft is accepted when it equals that token. The MTP layer then runs on both rows, row k
with the token decided at p+k+1, so its row 0 drafts p+2 and its row 1 drafts p+3. `Speculation.advance`
moves on by one token (rejected: next t = g_{p+1}, draft from MTP row 0) or two (accepted: t = g_{p+2}, draft
from row 1), on the device, so steps chain without the host. What a rejected row wrote (its KV slot, its
compressor slot, a compressed entry at a boundary) is rewritten when that position is decoded again.
"""

from __future__ import annotations

import torch

from dsv4.formats import tensor_bytes
from dsv4.layers.argmax import argmax_rows
from dsv4.layers.block import Block, DeviceIO
from dsv4.layers.mhc import HyperHead
from dsv4.layers.primitives import rms_norm, vocab_logits
from dsv4.layers.weights import Dense, dense_tensor

PREFIX = "mtp.0"


class MTPLayer:
    def __init__(self, weights: dict, config, ctx, embed: torch.Tensor, head: torch.Tensor):
        """`ctx` is the last device's context (the layer sits next to the head); `embed`, `head` are the main
        model's tables on that device."""
        dev, p = ctx.device, PREFIX
        self.eps = config.rms_norm_eps
        self.io = DeviceIO(ctx)
        self.block = Block(weights, config.num_hidden_layers, ctx, self.io, prefix=p)
        self.e_proj = Dense(weights[f"{p}.e_proj"], dev, ctx.resident, quantize_input=True)
        self.h_proj = Dense(weights[f"{p}.h_proj"], dev, ctx.resident, quantize_input=True)
        self.enorm = dense_tensor(weights[f"{p}.enorm.weight"], dev, torch.float32)
        self.hnorm = dense_tensor(weights[f"{p}.hnorm.weight"], dev, torch.float32)
        self.norm = dense_tensor(weights[f"{p}.norm.weight"], dev, torch.float32)
        self.hc_head = HyperHead(weights[f"{p}.hc_head_fn"], weights[f"{p}.hc_head_scale"],
                                 weights[f"{p}.hc_head_base"], config, dev)
        self.embed, self.head = embed, head
        self.logits_buf = torch.zeros(ctx.rows, config.vocab_size, dtype=torch.float32, device=dev)
        self.draft_buf = torch.zeros(ctx.rows, dtype=torch.long, device=dev)

    def reset(self) -> None:
        self.block.reset()

    @property
    def bytes_read(self) -> int:
        """Weight bytes one draft reads: the block, the projections and norms, and the (shared) head."""
        small = [self.enorm, self.hnorm, self.norm, self.hc_head.fn, self.head]
        return self.block.bytes_read + self.e_proj.bytes_read + self.h_proj.bytes_read + tensor_bytes(*small)

    def inputs(self, streams: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """The block's input streams [rows, hc, D] bf16 from the main streams and the next tokens."""
        e = rms_norm(self.embed.index_select(0, tokens), self.enorm, self.eps)
        return self.e_proj(e).unsqueeze(1) + self.h_proj(rms_norm(streams, self.hnorm, self.eps))

    def logits(self, streams: torch.Tensor) -> torch.Tensor:
        return vocab_logits(self.hc_head(streams), self.norm, self.head, self.eps)

    def forward_eager(self, streams: torch.Tensor, tokens: torch.Tensor, position: int) -> torch.Tensor:
        """fp32 logits [rows, vocab] of the token after next, each row at position + its offset."""
        return self.logits(self.block.forward_eager(self.inputs(streams, tokens), tokens, position))

    def step_graph(self, streams: torch.Tensor, tokens: torch.Tensor, pos: torch.Tensor) -> None:  # graphready: hot
        """The graph-ready MTP step: logits into `logits_buf`, greedy drafts into `draft_buf`."""
        io = self.io
        io.streams.copy_(self.inputs(streams, tokens))
        io.tokens.copy_(tokens)
        io.pos.copy_(pos)
        io.positions.refresh()
        self.block.pre_attention()
        self.block.attention()
        self.block.post_attention()
        self.logits_buf.copy_(self.logits(io.streams))
        self.draft_buf.copy_(argmax_rows(self.logits_buf))


class Speculation:
    """Device state of one-draft speculative decoding: the next step's inputs and what has been decided."""

    def __init__(self, max_len: int, device):
        self.tokens = torch.zeros(2, dtype=torch.long, device=device)  # next step: known token, draft
        self.pos = torch.zeros(1, dtype=torch.long, device=device)  # next step's position
        self.overrides = torch.full((2,), -1, dtype=torch.long, device=device)  # prompt tokens at p+1, p+2
        self.decided = torch.zeros(2, dtype=torch.long, device=device)  # tokens at p+1, p+2 for this step
        self.accepted = torch.zeros(1, dtype=torch.long, device=device)  # drafts accepted so far
        self.emitted = torch.zeros(max_len + 2, dtype=torch.long, device=device)  # token decided at each position
        self.ahead = torch.arange(1, 3, device=device)

    def reset(self) -> None:
        for t in (self.tokens, self.pos, self.decided, self.accepted, self.emitted):
            t.zero_()
        self.overrides.fill_(-1)

    def decide(self, greedy: torch.Tensor) -> torch.Tensor:
        """Tokens at p+1, p+2: the prompt's where the host set them (prefill), else the main model's greedy ones."""
        self.decided.copy_(torch.where(self.overrides >= 0, self.overrides, greedy))
        return self.decided

    def advance(self, fed: torch.Tensor, pos: torch.Tensor, drafts: torch.Tensor) -> None:
        """Accept the draft `fed[1]` if it is the token decided at p+1, and set the next step's inputs."""
        decided = self.decided
        accepted = decided[:1] == fed[1:]
        self.emitted.index_copy_(0, pos + self.ahead, decided)
        self.accepted.add_(accepted.long())
        self.pos.copy_(pos + 1 + accepted.long())
        self.tokens.copy_(torch.cat([torch.where(accepted, decided[1:], decided[:1]),
                                     torch.where(accepted, drafts[1:], drafts[:1])]))
