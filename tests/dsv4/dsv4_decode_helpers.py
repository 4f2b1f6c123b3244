"""Helpers shared by the dsv4 model tests: small configs, greedy decoding drivers and logit comparison."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from dsv4.config import preset

PROMPT = (0, 5, 7)


def three_layer_tiny():
    """tiny cut to 3 layers that still cover every kind: HCA + hash routing, CSA + top-k routing, window."""
    return dataclasses.replace(preset("tiny"), num_hidden_layers=3, num_hash_layers=1, compress_ratios=(128, 4, 0, 0))


def eager_run(model, steps: int, prompt=PROMPT):
    """Greedy decode with `model.step`: (tokens fed at each position, logits per step)."""
    fed, logits = [], []
    token = prompt[0]
    for pos in range(steps):
        out = model.step([token], pos)[0]
        fed.append(token)
        logits.append(out.clone())
        token = prompt[pos + 1] if pos + 1 < len(prompt) else int(out.argmax())
    return fed, logits


def graphable_run(model, fed):
    """Replay the same tokens through the graph-ready step; logits per step."""
    out = []
    for pos, token in enumerate(fed):
        model.load_inputs([token], pos)
        model.step_graphable()
        out.append(model.logits_buf[0].clone())
    return out


def relative_errors(a: list[torch.Tensor], b: list[torch.Tensor]) -> torch.Tensor:
    """Per step: max |a - b| over the vocabulary divided by max |b|."""
    return torch.stack([(x - y).abs().max() / y.abs().max() for x, y in zip(a, b)])


def argmax_agreement(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return sum(int(x.argmax() == y.argmax()) for x, y in zip(a, b)) / len(a)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Run torch on one thread: a decode step is thousands of tiny ops that a thread pool only slows down."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
