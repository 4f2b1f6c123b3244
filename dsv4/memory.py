"""GPU memory a DeepSeek-V4 model needs on each of N devices, known before anything is loaded.

Per device: the stored weights placed there (their real sizes read from a checkpoint's shard headers, or the
synthetic format's sizes), the bf16 copies the model keeps of its quantized dense linears, the stacked bf16 copy of
each compressor's projections, the bf16 head on the last device, and a fixed reserve for the CUDA context, caches,
kernel workspaces and captured graphs. The globals load on the first device before the model moves the head
to the last, so both count them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from dsv4.checkpoint import checkpoint_specs, checkpoint_tensor_bytes
from dsv4.config import DSV4Config
from dsv4.names import global_specs
from dsv4.synth import spec_bytes

RESERVE_BYTES = 4 << 30
COPIED_ROLES = ("attn", "shared")  # quantized in both releases; the model keeps bf16 copies (Dense, resident)
COMPRESSOR = re.compile(r"\.compressor\.w(kv|gate)$")  # stored bf16, stacked into one bf16 copy per compressor
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


@dataclass(frozen=True)
class DeviceNeed:
    index: int
    layers: tuple[int, ...]
    weights: int  # stored weights loaded onto this device
    copies: int  # bf16 copies of dense linears and compressor projections, the head on the last device
    reserve: int = RESERVE_BYTES

    @property
    def total(self) -> int:
        return self.weights + self.copies + self.reserve


def _device_layers(config: DSV4Config, n_devices: int) -> list[list[int]]:
    layers: list[list[int]] = [[] for _ in range(n_devices)]
    for i in range(config.num_hidden_layers):
        layers[i * n_devices // config.num_hidden_layers].append(i)
    return layers


def _stored_by_layer(config: DSV4Config, checkpoint: str | None, fmt: str) -> tuple[dict[int, int], int]:
    """(layer -> stored bytes, bytes of the globals); the MTP layer counts as layer num_hidden_layers."""
    per_layer: dict[int, int] = {}
    mtp_layer = config.num_hidden_layers
    if checkpoint is None:
        mtp = config.num_nextn_predict_layers > 0
        for spec in checkpoint_specs(config, include_globals=False, mtp=mtp):
            found = _LAYER.search(spec.name)
            layer = int(found.group(1)) if found else mtp_layer
            per_layer[layer] = per_layer.get(layer, 0) + spec_bytes(spec, fmt)
        return per_layer, sum(spec_bytes(spec, fmt) for spec in global_specs(config))
    globals_bytes = 0
    for name, size in checkpoint_tensor_bytes(checkpoint).items():
        found = _LAYER.search(name)
        if name.startswith("mtp."):
            per_layer[mtp_layer] = per_layer.get(mtp_layer, 0) + size
        elif found is None:
            globals_bytes += size
        elif int(found.group(1)) <= mtp_layer:  # HF-style files keep the MTP layer as layer num_hidden_layers
            per_layer[int(found.group(1))] = per_layer.get(int(found.group(1)), 0) + size
    return per_layer, globals_bytes


def _copies(config: DSV4Config, layers: list[int], mtp: bool = False) -> int:
    specs = checkpoint_specs(config, layers, include_globals=False, mtp=mtp)
    bf16 = sum(2 * math.prod(s.shape) for s in specs if s.kind == "linear" and s.role in COPIED_ROLES)
    return bf16 + sum(2 * math.prod(s.shape) for s in specs if COMPRESSOR.search(s.name))


def memory_needed(config: DSV4Config, n_devices: int, checkpoint: str | None = None,
                  fmt: str = "nvfp4", mtp: bool = False) -> list[DeviceNeed]:
    """What each of ``n_devices`` holds at its peak while the model is built and checked (``mtp``: with the MTP
    layer, which lives on the last device next to the head)."""
    per_layer, globals_bytes = _stored_by_layer(config, checkpoint, fmt)
    head = 2 * config.vocab_size * config.hidden_size  # bf16, as `fp32_gemm_weight` keeps it
    needs = []
    for index, layers in enumerate(_device_layers(config, n_devices)):
        last = index == n_devices - 1
        weights = sum(per_layer.get(i, 0) for i in layers) + (globals_bytes if index == 0 else 0)
        copies = _copies(config, layers, mtp and last) + (head if last else 0)
        if mtp and last:
            weights += per_layer.get(config.num_hidden_layers, 0)
        needs.append(DeviceNeed(index, tuple(layers), weights, copies))
    return needs


def shortfalls(needs: list[DeviceNeed], free: list[int]) -> list[str]:
    """One line per device whose need exceeds its free bytes; empty when everything fits."""
    lines = []
    for need, available in zip(needs, free):
        if need.total > available:
            lines.append(f"cuda:{need.index} needs {need.total / 1e9:.1f} GB (weights {need.weights / 1e9:.1f} GB "
                         f"+ bf16/fp32 copies {need.copies / 1e9:.1f} GB + reserve {need.reserve / 1e9:.1f} GB) "
                         f"but has {available / 1e9:.1f} GB free")
    return lines
