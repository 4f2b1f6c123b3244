"""GD501 device-stream: the unit's tensors, the capture stream and the current device must agree.

Seed 004: a graph captured on a GPU other than cuda:0 without an explicit stream of that device
came out empty or replayed stale data. The op tracer reports ops on another device or on the
default stream during capture; this module checks what the unit hands over.
"""

from __future__ import annotations

from typing import Sequence

import torch


def misplaced_tensors(tensors: Sequence[torch.Tensor], device: torch.device, what: str) -> str | None:
    for i, t in enumerate(tensors):
        if t.device != device:
            return f"{what} {i} is on {t.device} but the unit runs on {device}"
    return None
