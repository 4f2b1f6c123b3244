"""DeepSeek-V4 decode model: an eager step and a graph-ready step over the same preallocated state.

`DSV4Model.step(token_ids, position)` is the eager decode step (host position, branches, sliced caches).
`DSV4Model.step_graphable()` is the graph-ready step: it reads token ids and the position from per-device
buffers (`load_inputs` or a `copy_` from pinned memory fills them), uses fixed shapes and masks only, and
leaves fp32 logits in `logits_buf` and the greedy token in `next_token_buf`. On several GPUs run it
through `dsv4.graphs.GraphDecoder`, which makes each device current (via its stream) for its units. `units()` exposes the same
step as an ordered list of pieces per device so `dsv4.graphs.GraphDecoder` can capture them.

Layers may be spread over several devices: layer i lives on `devices[i * n // L]`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from dsv4.layers.block import Block, DeviceIO
from dsv4.layers.mhc import HyperHead
from dsv4.layers.primitives import make_fp4_tables, make_rope_table, rms_norm
from dsv4.layers.weights import dense_tensor
from graphready import hot_path

MAX_COMPRESS_RATIO = 128


def on_device(device: torch.device):
    """Make `device` current for the eager step: Triton kernels launch on the current device."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


@dataclass
class DeviceContext:
    """Per-device constants every layer on that device shares."""

    config: object
    device: torch.device
    batch: int
    max_len: int
    resident: bool
    rope_window: torch.Tensor
    rope_compressed: torch.Tensor
    fp4_tables: tuple

    @classmethod
    def build(cls, config, device, batch, max_len, resident) -> "DeviceContext":
        return cls(config, device, batch, max_len, resident,
                   make_rope_table(config, False, max_len, device), make_rope_table(config, True, max_len, device),
                   make_fp4_tables(device))


@dataclass
class Unit:
    """One piece of the graph-ready step, run on `device`; `kind` is embed | pre | attention | post | head."""

    name: str
    kind: str
    device: torch.device
    run: Callable[[], None]


class DSV4Model:
    def __init__(self, config, weights: dict, devices: Sequence = ("cpu",), max_len: int = 1024, batch: int = 1,
                 resident: bool = True):
        """`resident`: keep bf16 copies of the dense (non-expert) linears instead of dequantizing per call."""
        if max_len <= 0 or max_len % MAX_COMPRESS_RATIO or max_len > config.max_position_embeddings:
            raise ValueError(f"max_len must be a positive multiple of {MAX_COMPRESS_RATIO} "
                             f"up to {config.max_position_embeddings}, got {max_len}")
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        self.config = config
        self.max_len = max_len
        self.batch = batch
        n_layers = config.num_hidden_layers
        devices = [torch.device(d) for d in devices]
        self.layer_devices = [devices[i * len(devices) // n_layers] for i in range(n_layers)]
        self.devices = list(dict.fromkeys(self.layer_devices))
        self.contexts = {d: DeviceContext.build(config, d, batch, max_len, resident) for d in self.devices}
        self.io = {d: DeviceIO(config, batch, d) for d in self.devices}
        first, last = self.devices[0], self.devices[-1]
        self.embed = dense_tensor(weights["embed.weight"], first)
        self.layers = [Block(weights, i, self.contexts[d], self.io[d]) for i, d in enumerate(self.layer_devices)]
        self.hc_head = HyperHead(weights["hc_head_fn"], weights["hc_head_scale"], weights["hc_head_base"], config, last)
        self.norm = dense_tensor(weights["norm.weight"], last, torch.float32)
        self.head = dense_tensor(weights["head.weight"], last, torch.float32)
        self.logits_buf = torch.zeros(batch, config.vocab_size, dtype=torch.float32, device=last)
        self.next_token_buf = torch.zeros(batch, dtype=torch.long, device=last)

    def reset(self) -> None:
        """Forget the sequence: empty every cache and compressor state, in place."""
        for layer in self.layers:
            layer.reset()

    @property
    def weight_bytes_per_token(self) -> int:
        """Weight bytes one decode step reads: every layer, one embedding row, hc_head, norm and the fp32 head."""
        tail = [self.hc_head.fn, self.norm, self.head]
        row = self.embed.shape[1] * self.embed.element_size() * self.batch
        return sum(layer.bytes_read for layer in self.layers) + row + sum(t.numel() * t.element_size() for t in tail)

    # -- eager path ---------------------------------------------------------------------------------
    def _check_position(self, position: int) -> None:
        if not 0 <= position < self.max_len:
            raise ValueError(f"position {position} outside 0..{self.max_len - 1} (max_len {self.max_len})")

    def _logits(self, streams: torch.Tensor) -> torch.Tensor:
        x = rms_norm(self.hc_head(streams), self.norm, self.config.rms_norm_eps)
        return x.float() @ self.head.T

    @torch.inference_mode()
    def step(self, token_ids, position: int) -> torch.Tensor:
        """Eager decode step for `token_ids` ([B] ints) at `position`; returns fp32 logits [B, vocab]."""
        self._check_position(position)
        ids = torch.as_tensor(token_ids, dtype=torch.long).reshape(-1).to(self.devices[0])
        if ids.numel() != self.batch:
            raise ValueError(f"expected {self.batch} token id(s), got {ids.numel()}")
        streams = self.embed[ids].unsqueeze(1).expand(-1, self.config.hc_mult, -1).contiguous()
        for layer, device in zip(self.layers, self.layer_devices):
            streams, ids = streams.to(device), ids.to(device)
            with on_device(device):
                streams = layer.forward_eager(streams, ids, position)
        with on_device(self.devices[-1]):
            return self._logits(streams)

    # -- graph-ready path ---------------------------------------------------------------------------
    def load_inputs(self, token_ids, position: int) -> None:
        """Fill every device's token/position buffers from the host (what a graph decoder does with pinned copies)."""
        self._check_position(position)
        ids = torch.as_tensor(token_ids, dtype=torch.long).reshape(-1)
        if ids.numel() != self.batch:
            raise ValueError(f"expected {self.batch} token id(s), got {ids.numel()}")
        for io in self.io.values():
            io.tokens.copy_(ids)
            io.pos.fill_(position)

    @hot_path
    def embed_graph(self) -> None:
        io = self.io[self.devices[0]]
        io.streams.copy_(self.embed.index_select(0, io.tokens).unsqueeze(1).expand(-1, self.config.hc_mult, -1))

    @hot_path
    def head_graph(self) -> None:
        self.logits_buf.copy_(self._logits(self.io[self.devices[-1]].streams))
        self.next_token_buf.copy_(self.logits_buf.argmax(-1))

    def transfer(self, source: torch.device, target: torch.device) -> None:
        """Hand the residual streams to the next device (outside any graph)."""
        self.io[target].streams.copy_(self.io[source].streams)

    def units(self) -> dict[torch.device, list[Unit]]:
        """The graph-ready step as ordered pieces per device (devices in layer order)."""
        plan: dict[torch.device, list[Unit]] = {d: [] for d in self.devices}
        plan[self.devices[0]].append(Unit("embed", "embed", self.devices[0], self.embed_graph))
        for layer, device in zip(self.layers, self.layer_devices):
            i = layer.index
            plan[device] += [Unit(f"layer{i}.pre", "pre", device, layer.pre_attention),
                             Unit(f"layer{i}.attention", "attention", device, layer.attention),
                             Unit(f"layer{i}.post", "post", device, layer.post_attention)]
        plan[self.devices[-1]].append(Unit("head", "head", self.devices[-1], self.head_graph))
        return plan

    @hot_path
    @torch.inference_mode()
    def step_graphable(self) -> None:
        """One decode step from the device buffers, with fixed shapes and no host reads."""
        previous = None
        for device, units in self.units().items():
            if previous is not None:
                self.transfer(previous, device)
            for unit in units:
                unit.run()
            previous = device
