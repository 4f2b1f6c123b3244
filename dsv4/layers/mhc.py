"""Manifold-constrained hyper-connections (spec section 3): 4 residual streams mixed around every block."""

from __future__ import annotations

import torch

from dsv4.layers.mhc_kernels import BlockNorm, fused_post, fused_pre
from dsv4.layers.primitives import ACT_BLOCK, AMAX_FLOOR, FP8_MAX, rms_norm_for_gemm
from dsv4.layers.routing import ExpertOutputs
from dsv4.layers.sinkhorn import sinkhorn
from dsv4.layers.weights import dense_tensor


class HyperConnection:
    """hc_pre / hc_post for one block (attention or FFN) of one layer."""

    def __init__(self, fn, scale, base, config, device):
        self.fn = dense_tensor(fn, device, torch.float32)  # [(2+hc)*hc, hc*D]
        self.scale = dense_tensor(scale, device, torch.float32)  # [3]
        self.base = dense_tensor(base, device, torch.float32)  # [(2+hc)*hc]
        self.hc = config.hc_mult
        self.iters = config.hc_sinkhorn_iters
        self.hc_eps = config.hc_eps
        self.norm_eps = config.rms_norm_eps
        # the combine matrix's Sinkhorn runs here, beside the block (see mhc_kernels)
        self.side = torch.cuda.Stream(device) if torch.device(device).type == "cuda" else None
        self.in_flight = None  # the side work's inputs, kept alive until `join`

    def _mix(self, streams: torch.Tensor) -> torch.Tensor:
        flat = streams.flatten(1).float()
        r = torch.rsqrt(flat.square().mean(-1, keepdim=True) + self.norm_eps)
        return (flat @ self.fn.T) * r

    def pre(self, streams: torch.Tensor, post_out: torch.Tensor | None = None,
            comb_out: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """streams [B,hc,D] bf16 -> (block input [B,D] bf16, post weights [B,hc], combine matrix [B,hc,hc]); post
        and comb written to `post_out`, `comb_out` when given (the kernels write there directly)."""
        fused = fused_pre(streams, self.fn, self.scale, self.base, self.iters, self.hc_eps, self.norm_eps,
                          side=self.side, post_out=post_out, comb_out=comb_out)
        if fused is not None:  # four kernels on CUDA, comb's on the side stream: `join` before reading it
            x, post, comb, self.in_flight = fused
            return x, post, comb
        hc = self.hc
        m = self._mix(streams)
        pre = torch.sigmoid(m[:, :hc] * self.scale[0] + self.base[:hc]) + self.hc_eps
        post = 2 * torch.sigmoid(m[:, hc : 2 * hc] * self.scale[1] + self.base[hc : 2 * hc])
        logits = (m[:, 2 * hc :] * self.scale[2] + self.base[2 * hc :]).unflatten(-1, (hc, hc))
        comb = sinkhorn(torch.softmax(logits, -1) + self.hc_eps, self.iters, self.hc_eps)
        x = (pre.unsqueeze(-1) * streams.float()).sum(1)
        post = post if post_out is None else post_out.copy_(post)
        return x.to(streams.dtype), post, comb if comb_out is None else comb_out.copy_(comb)

    def pre_normed(self, streams: torch.Tensor, weight: torch.Tensor, eps: float, fp32: bool,
                   post_out: torch.Tensor | None = None, comb_out: torch.Tensor | None = None):
        """`pre`, then the block's RMSNorm for its GEMMs: (`rms_norm_for_gemm`'s (normed, act_quant, fp32 copy or
        None) of the block input, post, comb). On CUDA the norm runs in pre's last kernel, one launch fewer."""
        norm = BlockNorm(weight, eps, ACT_BLOCK, FP8_MAX, AMAX_FLOOR, fp32)
        fused = fused_pre(streams, self.fn, self.scale, self.base, self.iters, self.hc_eps, self.norm_eps,
                          side=self.side, post_out=post_out, comb_out=comb_out, block_norm=norm)
        if fused is not None:
            normed, post, comb, self.in_flight = fused
            return normed, post, comb
        x, post, comb = self.pre(streams, post_out, comb_out)
        return rms_norm_for_gemm(x, weight, eps, fp32), post, comb

    def join(self) -> None:
        """Make the current stream wait for the combine matrix `pre` started on the side stream."""
        if self.in_flight is not None and self.side is not None:  # no side stream: comb ran in order
            torch.cuda.current_stream(self.side.device).wait_stream(self.side)
        self.in_flight = None

    @staticmethod
    def post(y: torch.Tensor | ExpertOutputs, streams: torch.Tensor, post: torch.Tensor, comb: torch.Tensor,
             out: torch.Tensor | None = None) -> torch.Tensor:
        """X'_k = post_k * y + sum_j comb[j,k] X_j, in fp32, returned as bf16 [B,hc,D] (written to `out` when given).
        `y`: the block output, or the MoE's expert outputs (combined inside the kernel on CUDA).

        The official order: the streams are mixed first (summed over j), then the block output is added.
        """
        fused = fused_post(y, streams, post, comb, out)  # one kernel on CUDA
        if fused is not None:
            return fused
        if isinstance(y, ExpertOutputs):
            y = y.combined()
        mixed = (comb.unsqueeze(-1) * streams.float().unsqueeze(2)).sum(1)
        result = (post.unsqueeze(-1) * y.float().unsqueeze(1) + mixed).to(streams.dtype)
        return result if out is None else out.copy_(result)


class HyperHead:
    """hc_head: collapse the streams before the final norm (sigmoid weights, no Sinkhorn)."""

    def __init__(self, fn, scale, base, config, device):
        self.fn = dense_tensor(fn, device, torch.float32)  # [hc, hc*D]
        self.scale = dense_tensor(scale, device, torch.float32)  # [1]
        self.base = dense_tensor(base, device, torch.float32)  # [hc]
        self.hc_eps = config.hc_eps
        self.norm_eps = config.rms_norm_eps

    def __call__(self, streams: torch.Tensor) -> torch.Tensor:
        fused = fused_pre(streams, self.fn, self.scale, self.base, 0, self.hc_eps, self.norm_eps, head=True)
        if fused is not None:  # two kernels on CUDA
            return fused
        flat = streams.flatten(1).float()
        r = torch.rsqrt(flat.square().mean(-1, keepdim=True) + self.norm_eps)
        m = (flat @ self.fn.T) * r
        pre = torch.sigmoid(m * self.scale[0] + self.base) + self.hc_eps
        return (pre.unsqueeze(-1) * streams.float()).sum(1).to(streams.dtype)
