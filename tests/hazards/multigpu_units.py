"""Two-GPU hazard units (seed 004, the per-device stream fix 6650f06 and cross-GPU copies 56b816a)."""

from __future__ import annotations

import torch

from graphready.harness import Unit

N = 1024


def _on(device: str):
    def make_inputs(seed: int):
        generator = torch.Generator(device=device).manual_seed(seed)
        return (torch.randn(N, device=device, generator=generator),)

    return make_inputs


def _current(seed: int):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(N, device="cuda", generator=generator),)


class NextGpuHop:
    """A layer on cuda:0 that hands its activations to cuda:1 inside the step."""

    def __init__(self) -> None:
        self.weight = torch.linspace(0.5, 1.5, N, device="cuda:1")

    def __call__(self, x):
        h = x.to("cuda:1")  # hazard: GD501
        return (h * self.weight).to(x.device)


class Cuda1Layer:
    """A layer that lives on cuda:1: captured and replayed on a stream of cuda:1, it must pass."""

    def __init__(self) -> None:
        self.weight = torch.linspace(0.5, 1.5, N, device="cuda:1")

    def __call__(self, x):
        return x * self.weight + 1.0


class ScaleLayer:
    """A device-agnostic layer: it runs on whichever GPU the harness assigns."""

    def __call__(self, x):
        return torch.nn.functional.silu(x) * 2.0


def hop_units() -> list[Unit]:
    return [Unit("cross_device_hop", NextGpuHop(), _on("cuda:0"), device="cuda:0")]


def clean_units() -> list[Unit]:
    return [
        Unit("layer_on_cuda1", Cuda1Layer(), _on("cuda:1"), device="cuda:1"),
        Unit("scale_a", ScaleLayer(), _current),
        Unit("scale_b", ScaleLayer(), _current),
    ]
