"""The decode loop: an eager step, a one-time CUDA-graph capture, and replay."""

from __future__ import annotations

import torch

from decoder.model import TinyDecoder


class Runner:
    def __init__(self, vocab: int = 1000, dim: int = 256, layers: int = 4, device: str = "cuda"):
        self.device = torch.device(device)
        self.model = TinyDecoder(vocab, dim, layers).to(self.device).eval()
        self.token = torch.zeros(1, dtype=torch.long, device=self.device)
        self.logits = torch.zeros(1, vocab, device=self.device)
        self.graph = torch.cuda.CUDAGraph()
        self.stream = torch.cuda.Stream(device=self.device)

    @torch.inference_mode()
    def step(self, token: torch.Tensor) -> torch.Tensor:
        self.token.copy_(token)
        return self.model(self.token)

    @torch.inference_mode()
    def capture(self, temperature: float = 0.7) -> None:
        scale = torch.full((1, 1), 1.0 / temperature, device=self.device)
        with torch.cuda.graph(self.graph, stream=self.stream):
            self.logits.copy_(self.model(self.token) * scale)  # expect: GR601

    def replay(self, token: torch.Tensor) -> torch.Tensor:
        self.token = token  # expect: GR306
        self.graph.replay()
        return self.logits
