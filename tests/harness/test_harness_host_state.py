"""`Unit.host_state` on the CPU: a cache-like object's Python counter, advanced by the step, is put back by
every restore of the state (what HF's sliding-window cache layers need for a compiled step)."""

from __future__ import annotations

import pytest
import torch

from graphready.harness import host_state
from graphready.harness.session import CheckOptions, UnitRun
from graphready.harness.unit import Unit


class SlidingLayer:
    """Shaped like transformers' StaticSlidingWindowLayer: tensors plus a Python count of the tokens seen."""

    def __init__(self, window: int = 4) -> None:
        self.window = window
        self.keys = torch.zeros(window)
        self.cumulative_length_int = 0
        self.is_full = False
        self.lazy = None  # made by the first step

    def step(self, x: torch.Tensor) -> torch.Tensor:
        slot = self.cumulative_length_int % self.window
        self.keys[slot] = x
        self.cumulative_length_int += 1
        self.is_full = self.cumulative_length_int >= self.window
        if self.lazy is None:
            self.lazy = torch.ones(1)
        return x * self.cumulative_length_int + self.keys.sum()  # the count picks the mask in the real layer


def test_the_plain_attributes_are_put_back_and_tensors_are_left_alone():
    layer = SlidingLayer()
    saved = host_state.snapshot([layer, (1, 2)])  # an object without a __dict__ holds no host state
    keys = layer.keys
    for value in range(5):
        layer.step(torch.tensor(float(value)))
    host_state.put_back(saved)
    assert (layer.cumulative_length_int, layer.is_full) == (0, False)
    assert layer.keys is keys and layer.keys.sum() != 0  # tensors are the state's, restored by copy
    assert isinstance(layer.lazy, torch.Tensor)  # a tensor made since the snapshot is not replaced by None


@pytest.mark.parametrize("declared, outputs", [(True, [7.0, 7.0]), (False, [7.0, 9.0])])
def test_every_restore_puts_the_counter_back_only_when_declared(declared, outputs):
    """Undeclared, the second call starts from a count of 2: not the same state as the first."""
    layer = SlidingLayer()
    unit = Unit("sliding", layer.step, lambda seed: (torch.tensor(float(seed)),), state=lambda: [layer.keys],
                host_state=(lambda: [layer]) if declared else None)
    run = UnitRun(unit, torch.device("cpu"), CheckOptions(), lambda _phase: None)
    layer.step(torch.tensor(1.0))
    state0 = tuple(t.clone() for t in run.state_tensors())
    run.snapshot_host()
    seen = []
    for _ in range(2):
        run.restore(state0)
        seen.append(float(run.step((torch.tensor(2.0),))[0]))
    assert seen == outputs


def test_host_state_must_be_callable():
    with pytest.raises(TypeError, match="host_state must be callable"):
        Unit("u", lambda x: x, lambda seed: (torch.zeros(1),), host_state=[SlidingLayer()])
