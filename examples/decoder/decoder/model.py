"""Transformer blocks: RMSNorm, attention and a top-1 mixture of experts."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from decoder.attention import Attention


class MoE(nn.Module):
    def __init__(self, dim: int, hidden: int, n_experts: int):
        super().__init__()
        self.n_experts = n_experts
        self.gate = nn.Linear(dim, n_experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(n_experts, dim, hidden) * dim**-0.5)
        self.w2 = nn.Parameter(torch.randn(n_experts, hidden, dim) * hidden**-0.5)
        self.register_buffer("load", torch.zeros(n_experts, dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        expert = self.gate(x).argmax(-1)
        self.load.add_(torch.bincount(expert, minlength=self.n_experts))  # expect: GR201
        h = F.gelu(torch.bmm(x.unsqueeze(1), self.w1[expert]))
        return torch.bmm(h, self.w2[expert]).squeeze(1)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, max_len: int):
        super().__init__()
        self.attn_norm = nn.RMSNorm(dim)
        self.attn = Attention(dim, heads, max_len)
        self.moe_norm = nn.RMSNorm(dim)
        self.moe = MoE(dim, 4 * dim, n_experts=8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x))
        return x + self.moe(self.moe_norm(x))


class TinyDecoder(nn.Module):
    def __init__(self, vocab: int, dim: int, layers: int, heads: int = 4, max_len: int = 2048):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList([Block(dim, heads, max_len) for _ in range(layers)])
        self.norm = nn.RMSNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, token: torch.Tensor) -> torch.Tensor:
        x = self.embed(token)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))
