"""The official DeepSeek-V4 forms the dsv4 numerics tests compare against, written from the official code's
behaviour: its RoPE table recipe, its sparse-attention kernel's online softmax, and tied indexer scores."""

from __future__ import annotations

import math

import torch


def official_rope_table(config, compressed: bool, length: int, device) -> torch.Tensor:
    """The official `precompute_freqs_cis` as [length, 2, rope_dim/2] (cos, sin): built with `device` as the
    default device, as the official model builds it; window layers plain theta, compressing layers the compress
    theta with YaRN."""
    dim, scaling = config.qk_rope_head_dim, config.rope_scaling
    base = config.compress_rope_theta if compressed else config.rope_theta
    original = scaling["original_max_position_embeddings"] if compressed else 0
    with torch.device(device):
        freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        if original > 0:
            def turns_at(rotations):
                return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

            low = max(math.floor(turns_at(scaling["beta_fast"])), 0)
            high = min(math.ceil(turns_at(scaling["beta_slow"])), dim - 1)
            high = high + 0.001 if low == high else high
            smooth = 1 - torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
            freqs = freqs / scaling["factor"] * (1 - smooth) + freqs * smooth
        angles = torch.outer(torch.arange(length), freqs)
        cis = torch.polar(torch.ones_like(angles), angles)
    return torch.stack([cis.real, cis.imag], dim=1)


def online_softmax_by_hand(q: torch.Tensor, keys: torch.Tensor, valid: torch.Tensor, sink: torch.Tensor,
                           block: int = 64) -> torch.Tensor:
    """One query's attention as the official kernel runs it: q [H, hd], keys [S, hd] bf16, valid [S], sink [H]
    -> o [H, hd] bf16. fp32 scores of all heads and keys (one GEMM), then per block of 64 keys: the running
    max, exp(old - new) on the sum and on the output, the block's exponentials against the new max (summed in
    fp64, rounded once), their bf16 copies times the block's keys; the sink term at the end, one divide."""
    k = keys.float()
    scores = torch.einsum("bhd,bsd->bhs", q.float()[None], k[None])[0] * q.shape[-1] ** -0.5
    scores = torch.where(valid, scores, float("-inf"))
    top = torch.full((q.shape[0], 1), float("-inf"))
    total, acc = torch.zeros(q.shape[0], 1), torch.zeros(q.shape)
    for start in range(0, keys.shape[0], block):
        s = scores[:, start : start + block]
        new_top = torch.maximum(top, s.max(-1, keepdim=True).values)
        rescale = torch.exp(top - new_top)
        p = torch.exp(s - new_top)
        total = total * rescale + p.double().sum(-1, keepdim=True).float()
        pv = torch.einsum("bhs,bsd->bhd", p.to(torch.bfloat16).float()[None], k[None, start : start + block])[0]
        acc = acc * rescale + pv
        top = new_top
    return (acc / (total + torch.exp(sink[:, None] - top))).to(torch.bfloat16)


def tied_scores(n: int, generator: torch.Generator, device, zeros: float = 0.2) -> torch.Tensor:
    """bf16 indexer-like scores [1, n] full of ties: 13 values in steps of 1/8, a fraction `zeros` of them 0 and
    half of those -0.0 (a ReLU'd head times a negative weight is -0.0)."""
    values = torch.randint(-6, 7, (1, n), generator=generator, device=device).to(torch.bfloat16) / 8
    zero = torch.rand(1, n, generator=generator, device=device) < zeros
    sign = torch.rand(1, n, generator=generator, device=device) < 0.5
    values = torch.where(zero, torch.zeros_like(values), values)
    return torch.where(zero & sign, -values, values)
