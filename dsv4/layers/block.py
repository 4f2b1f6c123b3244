"""One transformer layer: mHC around attention, mHC around the MoE (spec section 2).

`forward_eager` takes a host position. The graph-ready path is cut in three pieces so that a decoder can
capture them together (one graph per layer) or around an eager attention (split mode):
`pre_attention` (mHC pre, norm, projections, every cache/state write), `attention` (indexer top-k and
masked attention) and `post_attention` (output projection, mHC post, the FFN half). The pieces talk
through buffers allocated here once, and read token/position from the device's `DeviceIO`.
"""

from __future__ import annotations

import torch

from dsv4.formats import tensor_bytes
from dsv4.layers.attention import Attention
from dsv4.layers.mhc import HyperConnection
from dsv4.layers.moe import MoE
from dsv4.layers.positions import StepPositions
from dsv4.layers.weights import dense_tensor


class DeviceIO:
    """The per-device inputs of a graph-ready step: token ids and residual streams per row, the position
    of each sequence's first token in the step, and what the layers derive from that position (`positions`,
    refreshed once per step before the device's first layer)."""

    def __init__(self, ctx):
        config, rows, device = ctx.config, ctx.rows, ctx.device
        self.device = device
        self.tokens = torch.zeros(rows, dtype=torch.long, device=device)
        self.pos = torch.zeros(1, dtype=torch.long, device=device)
        self.streams = torch.zeros(rows, config.hc_mult, config.hidden_size, dtype=torch.bfloat16, device=device)
        self.positions = StepPositions(ctx, self.pos)


class Block:
    def __init__(self, weights: dict, index: int, ctx, io: DeviceIO, prefix: str | None = None):
        """Layer `index` of the config (its attention kind and routing); weights under `prefix`
        (default ``layers.{index}``; the MTP layer's are under ``mtp.0``)."""
        cfg = ctx.config
        dev = ctx.device
        p = prefix or f"layers.{index}"
        self.index = index
        self.ctx = ctx
        self.io = io
        self.eps = cfg.rms_norm_eps
        self.attn_norm = dense_tensor(weights[f"{p}.attn_norm.weight"], dev, torch.float32)
        self.ffn_norm = dense_tensor(weights[f"{p}.ffn_norm.weight"], dev, torch.float32)
        self.hc_attn = HyperConnection(*(weights[f"{p}.hc_attn_{n}"] for n in ("fn", "scale", "base")), cfg, dev)
        self.hc_ffn = HyperConnection(*(weights[f"{p}.hc_ffn_{n}"] for n in ("fn", "scale", "base")), cfg, dev)
        self.attn = Attention(weights, f"{p}.attn", index, ctx, io.positions)
        self.moe = MoE(weights, f"{p}.ffn", index, ctx)
        b, h, hc = ctx.rows, cfg.num_attention_heads, cfg.hc_mult
        self.q_buf = torch.zeros(b, h, cfg.head_dim, dtype=torch.bfloat16, device=dev)
        self.o_buf = torch.zeros(b, h, cfg.head_dim, dtype=torch.bfloat16, device=dev)
        self.post_buf = torch.zeros(b, hc, dtype=torch.float32, device=dev)
        self.comb_buf = torch.zeros(b, hc, hc, dtype=torch.float32, device=dev)
        self.qi_buf = self.wi_buf = None
        if self.attn.indexer is not None:
            self.qi_buf = torch.zeros(b, cfg.index_n_heads, cfg.index_head_dim, dtype=torch.bfloat16, device=dev)
            self.wi_buf = torch.zeros(b, cfg.index_n_heads, dtype=torch.bfloat16, device=dev)

    def reset(self) -> None:
        self.attn.reset()

    @property
    def bytes_read(self) -> int:
        """Weight bytes one decode step reads for this layer."""
        small = [self.attn_norm, self.ffn_norm, self.hc_attn.fn, self.hc_ffn.fn, self.attn.sink]
        comps = [c for c in (self.attn.compressor, self.attn.indexer and self.attn.indexer.compressor) if c]
        small += [c.projection for c in comps]
        return self.attn.bytes_read + self.moe.bytes_read + tensor_bytes(*small)

    def _ffn(self, streams: torch.Tensor, token_ids: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """The FFN half on `streams`; the new streams are written to `out` when given."""
        # the experts' and the router's inputs
        (x, xq, x32), post, comb = self.hc_ffn.pre_normed(streams, self.ffn_norm, self.eps, fp32=True)
        y = self.moe.outputs(x, token_ids, xq, x32)  # combined inside mHC post
        self.hc_ffn.join()
        return HyperConnection.post(y, streams, post, comb, out)

    def forward_eager(self, streams: torch.Tensor, token_ids: torch.Tensor, position: int) -> torch.Tensor:
        (x, _, _), post, comb = self.hc_attn.pre_normed(streams, self.attn_norm, self.eps, fp32=False)
        y = self.attn.forward_eager(x, position)
        self.hc_attn.join()
        return self._ffn(HyperConnection.post(y, streams, post, comb), token_ids)

    def pre_attention(self) -> None:  # graphready: hot
        io = self.io
        # the kernels write post, comb, q (and the indexer's qi, wi) straight into the buffers attention and
        # post_attention read; comb is written on the mHC side stream, which `join` waits for
        (x, xq, x32), _, _ = self.hc_attn.pre_normed(io.streams, self.attn_norm, self.eps, self.attn.ratio > 0,
                                                     self.post_buf, self.comb_buf)  # x32: the compressors' input
        self.attn.prepare_graph(x, self.q_buf, self.qi_buf, self.wi_buf, xq, x32)
        self.hc_attn.join()

    def attention(self) -> None:  # graphready: hot
        self.attn.attend_graph(self.q_buf, self.qi_buf, self.wi_buf, self.o_buf,
                               self.io.positions.rope_rows[bool(self.attn.ratio)])

    def post_attention(self) -> None:  # graphready: hot
        io = self.io
        y = self.attn.output(self.o_buf, None)  # attention rotated it back
        streams = HyperConnection.post(y, io.streams, self.post_buf, self.comb_buf)
        self._ffn(streams, io.tokens, out=io.streams)
