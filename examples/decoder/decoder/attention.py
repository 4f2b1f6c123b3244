"""Single-token decode attention over a growing KV cache, with ALiBi position bias."""

from __future__ import annotations

import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int, max_len: int):
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)
        self.register_buffer("slopes", 2.0 ** -torch.arange(1, heads + 1).float())
        self.register_buffer("k_cache", torch.zeros(max_len, dim))
        self.register_buffer("v_cache", torch.zeros(max_len, dim))
        self.register_buffer("length", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        n = self.length.item()  # expect: GR101
        self.k_cache[n] = k[0]
        self.v_cache[n] = v[0]
        self.length.add_(1)
        keys = self.k_cache[: n + 1].view(n + 1, self.heads, self.head_dim)
        values = self.v_cache[: n + 1].view(n + 1, self.heads, self.head_dim)
        scores = torch.einsum("hd,khd->hk", q.view(self.heads, self.head_dim), keys) / self.head_dim**0.5
        distance = n - torch.arange(n + 1, device=x.device)
        scores = scores - self.slopes.unsqueeze(1) * distance
        mixed = torch.einsum("hk,khd->hd", torch.softmax(scores, dim=-1), values)
        return self.out(mixed.reshape(1, -1))
