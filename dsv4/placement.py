"""Place a DeepSeek-V4 model over N devices and load each part's weights straight onto its device.

Layer i lives on ``devices[i * n // L]`` (as ``DSV4Model`` places it). The globals (embedding, head, final norm,
hc_head) load on the first device; the model then moves the head, norm and hc_head to the last one, where the
MTP layer (when asked for) loads too. Weights come
from a checkpoint (read lazily, only the shards holding that device's tensors) or are drawn synthetically on the
device, so no part of the model ever passes through host memory as a whole.
"""

from __future__ import annotations

from typing import Callable, Iterator

import torch

from dsv4.checkpoint import checkpoint_specs, load_checkpoint
from dsv4.config import DSV4Config
from dsv4.synth import iter_synthetic_weights

Progress = Callable[[int, int, str], None]


def layer_placement(config: DSV4Config, devices: list[torch.device]) -> dict[torch.device, list[int]]:
    """Device -> its decoder layers, in layer order: layer i goes to devices[i * n // L]."""
    n, layers = len(devices), config.num_hidden_layers
    placement: dict[torch.device, list[int]] = {}
    for i in range(layers):
        placement.setdefault(devices[i * n // layers], []).append(i)
    return placement


def weight_parts(config: DSV4Config, devices: list[torch.device], checkpoint: str | None = None,
                 fmt: str = "nvfp4", seed: int = 0, mtp: bool = False) -> list[tuple[int, Callable[..., Iterator]]]:
    """(entry count, load) per part: the globals on the first device, then each device's layers, then (``mtp``)
    the MTP layer on the last device.

    ``load(progress=None)`` yields (official name, value) on that part's device; ``progress(n, total, name)`` is
    called after each entry.
    """
    parts = [(devices[0], [], True, False)]
    parts += [(device, layers, False, False) for device, layers in layer_placement(config, devices).items()]
    if mtp:
        parts.append((devices[-1], [], False, True))
    out = []
    for device, wanted, with_globals, with_mtp in parts:
        count = len(checkpoint_specs(config, wanted, with_globals, with_mtp))
        if checkpoint:
            def load(device=device, wanted=wanted, with_globals=with_globals, with_mtp=with_mtp, progress=None):
                return iter(load_checkpoint(checkpoint, config, device, wanted, progress,
                                            include_globals=with_globals, mtp=with_mtp).items())
        else:
            def load(device=device, wanted=wanted, with_globals=with_globals, with_mtp=with_mtp, progress=None,
                     count=count):
                entries = iter_synthetic_weights(config, fmt, device, seed, wanted, with_globals, with_mtp)
                for n, item in enumerate(entries, 1):
                    yield item
                    if progress is not None:
                        progress(n, count, item[0])
        out.append((count, load))
    return out


def load_placed_weights(config: DSV4Config, devices: list[torch.device], checkpoint: str | None = None,
                        fmt: str = "nvfp4", seed: int = 0, progress: Progress | None = None,
                        mtp: bool = False) -> dict:
    """Every weight ``DSV4Model(config, weights, devices)`` needs (``mtp``: with the MTP layer), each on its device."""
    weights: dict = {}
    for _, load in weight_parts(config, devices, checkpoint, fmt, seed, mtp):
        weights.update(load(progress=progress))
    return weights
