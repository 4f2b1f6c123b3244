"""Mixture of experts with sqrt-softplus routing and clamped SwiGLU (spec section 5).

Dispatch has a fixed shape at any batch size: each of the B*k (token, expert) pairs is one row of a
batched matrix-vector product over the stacked expert weights (`expert_matvecs`), so only the selected
experts' bytes are read and nothing depends on device values.
"""

from __future__ import annotations

import torch

from dsv4.formats import tensor_bytes
from dsv4.layers.expert_matvec import expert_matvecs, fused_available
from dsv4.layers.fp32_matvec import fp32_matvec
from dsv4.layers.kernels import runs_triton
from dsv4.layers.primitives import ACT_BLOCK, AMAX_FLOOR, FP8_MAX, act_quant
from dsv4.layers.routing import ExpertOutputs, fused_route
from dsv4.layers.swiglu import fused_swiglu
from dsv4.layers.weights import Dense, StackedDense, dense_tensor, fp32_gemm_weight, stores_quantized


def clamped_swiglu(gate: torch.Tensor, up: torch.Tensor, limit: float) -> torch.Tensor:
    """silu(min(g, limit)) * clamp(u, -limit, limit) in fp32."""
    return torch.nn.functional.silu(gate.float().clamp(max=limit)) * up.float().clamp(-limit, limit)


def swiglu_bf16(gate: torch.Tensor, up: torch.Tensor, limit: float, weight: torch.Tensor | None = None,
                quantize: bool = False) -> torch.Tensor:
    """`clamped_swiglu` times the per-row `weight` (rows past its end: 1), in bf16, FP8-quantised (`act_quant`)
    when `quantize`: one kernel on CUDA."""
    fused = fused_swiglu(gate, up, limit, weight, quantize, ACT_BLOCK, FP8_MAX, AMAX_FLOOR)
    if fused is not None:
        return fused
    h = clamped_swiglu(gate, up, limit)
    if weight is not None and weight.numel() < h.shape[0]:
        weight = torch.cat([weight, weight.new_ones(h.shape[0] - weight.numel())])
    h = (h if weight is None else h * weight.unsqueeze(-1)).to(torch.bfloat16)
    return act_quant(h) if quantize else h


class SharedExpert:
    """The expert every token runs; its gate and up projections are one stacked GEMV where resident (two
    3072-row GEMVs ran at two thirds of HBM bandwidth at batch 1)."""

    def __init__(self, weights: dict, prefix: str, device, resident: bool):
        self.gate_up = StackedDense([weights[f"{prefix}.{w}"] for w in ("w1", "w3")], device, resident,
                                    quantize_input=True)
        self.down = Dense(weights[f"{prefix}.w2"], device, resident, quantize_input=True)

    @property
    def bytes_read(self) -> int:
        return self.gate_up.bytes_read + self.down.bytes_read

    def __call__(self, x: torch.Tensor, limit: float, xq: torch.Tensor | None = None) -> torch.Tensor:
        return self.down(swiglu_bf16(*self.gate_up(x, xq=xq), limit))


class MoE:
    def __init__(self, weights: dict, prefix: str, layer: int, ctx):
        cfg = ctx.config
        dev = ctx.device
        self.ctx = ctx
        self.top_k = cfg.num_experts_per_tok
        self.scale = cfg.routed_scaling_factor
        self.limit = cfg.swiglu_limit
        self.gate = fp32_gemm_weight(weights[f"{prefix}.gate.weight"], dev)
        self.hashed = cfg.is_hash_layer(layer)
        if self.hashed:
            self.tid2eid = weights[f"{prefix}.gate.tid2eid"].to(device=dev, dtype=torch.long)
        else:
            self.bias = dense_tensor(weights[f"{prefix}.gate.bias"], dev, torch.float32)
        self.w1 = weights[f"{prefix}.experts.w1"].to(dev)
        self.w2 = weights[f"{prefix}.experts.w2"].to(dev)
        self.w3 = weights[f"{prefix}.experts.w3"].to(dev)
        # FP8/FP4 experts take FP8 activations, as in the official model (NVFP4 ones too: see docs/dsv4-numerics.md)
        self.quantize_up_input = stores_quantized(self.w1)
        self.quantize_down_input = stores_quantized(self.w2)
        # the shared expert: where it is stored like the routed ones its matrices join their launches as extra
        # rows (`shared_rows`), read in NVFP4; otherwise its own GEMVs (`shared`)
        self.shared, self.shared_rows = [], None
        if cfg.n_shared_experts:
            stored = [weights[f"{prefix}.shared_experts.{w}"] for w in ("w1", "w3", "w2")]
            probe = torch.empty(0, device=dev)
            joins = all(fused_available(w, probe, s) for w, s in zip((self.w1, self.w3, self.w2), stored))
            if cfg.n_shared_experts == 1 and runs_triton(probe, "shared_rows") and joins:
                self.shared_rows = [w.to(dev) for w in stored]
            else:
                self.shared = [SharedExpert(weights, f"{prefix}.shared_experts", dev, ctx.resident)]
        rows = ctx.rows * (self.top_k + (self.shared_rows is not None))
        inter, hidden = self.w1.shape[-2], self.w2.shape[-2]
        self.gate_out = torch.zeros(rows, inter, dtype=torch.bfloat16, device=dev)
        self.up_out = torch.zeros(rows, inter, dtype=torch.bfloat16, device=dev)
        self.down_out = torch.zeros(rows, hidden, dtype=torch.bfloat16, device=dev)

    @property
    def routed_bytes(self) -> int:
        """The top-k experts' stored bytes: what each token routed to other experts reads again."""
        return sum(int(w.nbytes) // w.shape[0] for w in (self.w1, self.w2, self.w3)) * self.top_k

    @property
    def bytes_read(self) -> int:
        """Bytes per token: the top-k experts' stored bytes, the gate, and the shared expert."""
        shared = sum(expert.bytes_read for expert in self.shared) + sum(int(w.nbytes) for w in self.shared_rows or [])
        return self.routed_bytes + shared + tensor_bytes(self.gate)

    def route(self, x: torch.Tensor, token_ids: torch.Tensor, x32: torch.Tensor | None = None):
        """(expert ids [B,k], weights [B,k] fp32): hash table or top-k of sigma + bias; weights renormalised.
        `x32`: x in fp32, when the caller has it."""
        logits = fp32_matvec(x if x32 is None else x32, self.gate)
        fused = fused_route(logits, None if self.hashed else self.bias, self.tid2eid if self.hashed else None,
                            token_ids, self.top_k, self.scale)  # one kernel on CUDA
        if fused is not None:
            return fused
        sigma = torch.sqrt(torch.nn.functional.softplus(logits))
        if self.hashed:
            idx = self.tid2eid.index_select(0, token_ids)
        else:
            idx = (sigma + self.bias).topk(self.top_k, dim=-1).indices
        w = sigma.gather(1, idx)
        return idx, w / w.sum(-1, keepdim=True) * self.scale

    def __call__(self, x: torch.Tensor, token_ids: torch.Tensor, xq: torch.Tensor | None = None,
                 x32: torch.Tensor | None = None) -> torch.Tensor:
        """The layer's FFN output for x [B, D] bf16 (`outputs`, combined)."""
        return self.outputs(x, token_ids, xq, x32).combined()

    def outputs(self, x: torch.Tensor, token_ids: torch.Tensor, xq: torch.Tensor | None = None,
                x32: torch.Tensor | None = None) -> ExpertOutputs:
        """The experts' outputs for x [B, D] bf16, before their combine; `xq` (`act_quant(x)`) and `x32` (x in
        fp32) where the caller has them (the fused norm before)."""
        idx, w = self.route(x, token_ids, x32)
        flat = idx.flatten()
        routed_in = (act_quant(x) if xq is None else xq) if self.quantize_up_input else x
        joined = self.shared_rows is not None
        gate, up = expert_matvecs([self.w1, self.w3], flat, routed_in, [self.gate_out, self.up_out],
                                  self.shared_rows[:2] if joined else None)
        h = swiglu_bf16(gate, up, self.limit, w.flatten(), self.quantize_down_input)
        down = expert_matvecs([self.w2], flat, h, [self.down_out], self.shared_rows[2:] if joined else None)[0]
        shared = [down[flat.numel():]] if joined else [expert(x, self.limit, xq) for expert in self.shared]
        return ExpertOutputs(down[: flat.numel()], shared, self.top_k)
