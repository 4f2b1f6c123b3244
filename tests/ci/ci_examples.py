"""Source files the CI tests lint: one hot host sync, as the README example has it."""

HOT_SYNC = """import torch
from graphready import hot_path


@hot_path
def post_block(x: torch.Tensor) -> torch.Tensor:
    peak = x.abs().max().item()
    return x * 0.5
"""
