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

from dsv4.formats import tensor_bytes
from dsv4.layers.argmax import argmax_rows
from dsv4.layers.block import Block, DeviceIO
from dsv4.layers.mhc import HyperHead
from dsv4.layers.primitives import make_fp4_tables, make_rope_table, vocab_logits
from dsv4.layers.weights import dense_tensor, fp32_gemm_weight
from dsv4.mtp import PREFIX as MTP_PREFIX
from dsv4.mtp import MTPLayer, Speculation

MAX_COMPRESS_RATIO = 128


def on_device(device: torch.device):
    """Make `device` current for the eager step: Triton kernels launch on the current device."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


@dataclass
class DeviceContext:
    """Per-device constants every layer on that device shares."""

    config: object
    device: torch.device
    batch: int  # sequences
    tokens_per_step: int  # consecutive tokens of each sequence in one step
    max_len: int
    resident: bool
    rope_window: torch.Tensor
    rope_compressed: torch.Tensor
    fp4_tables: tuple
    row_offsets: torch.Tensor  # [rows]: position of each row relative to its sequence's first token

    @property
    def rows(self) -> int:
        return self.batch * self.tokens_per_step

    @classmethod
    def build(cls, config, device, batch, tokens_per_step, max_len, resident) -> "DeviceContext":
        offsets = torch.arange(tokens_per_step, device=device).repeat(batch)
        return cls(config, device, batch, tokens_per_step, max_len, resident,
                   make_rope_table(config, False, max_len, device), make_rope_table(config, True, max_len, device),
                   make_fp4_tables(device), offsets)


@dataclass
class Unit:
    """One piece of the graph-ready step, run on `device`; `kind` is positions | embed | pre | attention | post |
    head, and with speculative decoding mtp | advance."""

    name: str
    kind: str
    device: torch.device
    run: Callable[[], None]


class DSV4Model:
    def __init__(self, config, weights: dict, devices: Sequence = ("cpu",), max_len: int = 1024, batch: int = 1,
                 resident: bool = True, speculative: bool = False):
        """`resident`: keep bf16 copies of the dense (non-expert) linears instead of dequantizing per call.
        `speculative`: one-draft speculative decoding with the MTP layer (weights ``mtp.0.*`` needed, batch 1):
        every step carries two tokens (rows), and the units gain the MTP layer and the accept/advance step."""
        if max_len <= 0 or max_len % MAX_COMPRESS_RATIO or max_len > config.max_position_embeddings:
            raise ValueError(f"max_len must be a positive multiple of {MAX_COMPRESS_RATIO} "
                             f"up to {config.max_position_embeddings}, got {max_len}")
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        if speculative and batch != 1:
            raise ValueError(f"speculative decoding runs one sequence, got batch {batch}")
        if speculative and f"{MTP_PREFIX}.e_proj" not in weights:
            raise ValueError(f"speculative decoding needs the MTP layer's weights ({MTP_PREFIX}.*): load them with mtp=True")
        self.config = config
        self.max_len = max_len
        self.batch = batch
        self.tokens_per_step = 2 if speculative else 1
        self.rows = batch * self.tokens_per_step
        n_layers = config.num_hidden_layers
        devices = [torch.device(d) for d in devices]
        self.layer_devices = [devices[i * len(devices) // n_layers] for i in range(n_layers)]
        self.devices = list(dict.fromkeys(self.layer_devices))
        self.contexts = {d: DeviceContext.build(config, d, batch, self.tokens_per_step, max_len, resident)
                         for d in self.devices}
        self.io = {d: DeviceIO(self.contexts[d]) for d in self.devices}
        first, last = self.devices[0], self.devices[-1]
        self.embed = dense_tensor(weights["embed.weight"], first)
        self.layers = [Block(weights, i, self.contexts[d], self.io[d]) for i, d in enumerate(self.layer_devices)]
        self.hc_head = HyperHead(weights["hc_head_fn"], weights["hc_head_scale"], weights["hc_head_base"], config, last)
        self.norm = dense_tensor(weights["norm.weight"], last, torch.float32)
        self.head = fp32_gemm_weight(weights["head.weight"], last)
        self.logits_buf = torch.zeros(self.rows, config.vocab_size, dtype=torch.float32, device=last)
        self.next_token_buf = torch.zeros(self.rows, dtype=torch.long, device=last)
        self.mtp = self.spec = None
        if speculative:
            embed = self.embed if last == first else self.embed.to(last)
            self.mtp = MTPLayer(weights, config, self.contexts[last], embed, self.head)
            self.spec = Speculation(max_len, last)

    def reset(self) -> None:
        """Forget the sequence: empty every cache and compressor state, in place."""
        for layer in self.layers:
            layer.reset()
        if self.mtp is not None:
            self.mtp.reset()
            self.spec.reset()

    @property
    def weight_bytes_per_token(self) -> int:
        """Weight bytes one decode step reads: every layer, one embedding row, hc_head, norm and the head."""
        return sum(self.weight_bytes_by_device.values())

    @property
    def speculative_bytes_per_step(self) -> int:
        """Weight bytes a speculative step reads at most: the plain step's, the second token's routed experts
        (when it shares none with the first), and the draft's MTP layer and second read of the head. Over
        `weight_bytes_per_token`, the least a speculative step can cost where decoding is bound by memory."""
        return self.weight_bytes_per_token + sum(layer.moe.routed_bytes for layer in self.layers) + self.mtp.bytes_read

    @property
    def weight_bytes_by_device(self) -> dict[torch.device, int]:
        """The same bytes split by the device that reads them (the embedding row on the first, the tail on the
        last): each device's own roofline when the layers are spread over several."""
        tail = [self.hc_head.fn, self.norm, self.head]
        by_device = {d: 0 for d in self.devices}
        for layer, device in zip(self.layers, self.layer_devices):
            by_device[device] += layer.bytes_read
        by_device[self.devices[0]] += self.embed.shape[1] * self.embed.element_size() * self.batch
        by_device[self.devices[-1]] += tensor_bytes(*tail)
        return by_device

    # -- eager path ---------------------------------------------------------------------------------
    def _check_position(self, position: int) -> None:
        last = self.max_len - self.tokens_per_step
        if not 0 <= position <= last:
            raise ValueError(f"position {position} outside 0..{last} (max_len {self.max_len}, "
                             f"{self.tokens_per_step} token(s) per step)")

    def _logits(self, streams: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        return vocab_logits(self.hc_head(streams), self.norm, self.head, self.config.rms_norm_eps, out)

    @torch.inference_mode()
    def step(self, token_ids, position: int) -> torch.Tensor:
        """Eager decode step of the main model for `token_ids` ([rows] ints: each sequence's tokens for positions
        position, position + 1, ...) ; returns fp32 logits [rows, vocab]."""
        self._check_position(position)
        ids = torch.as_tensor(token_ids, dtype=torch.long).reshape(-1).to(self.devices[0])
        if ids.numel() != self.rows:
            raise ValueError(f"expected {self.rows} token id(s), got {ids.numel()}")
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
        if ids.numel() != self.rows:
            raise ValueError(f"expected {self.rows} token id(s), got {ids.numel()}")
        for io in self.io.values():
            io.tokens.copy_(ids)
            io.pos.fill_(position)

    def embed_graph(self) -> None:  # graphready: hot
        io = self.io[self.devices[0]]
        io.streams.copy_(self.embed.index_select(0, io.tokens).unsqueeze(1).expand(-1, self.config.hc_mult, -1))

    def head_graph(self) -> None:  # graphready: hot
        self._logits(self.io[self.devices[-1]].streams, self.logits_buf)
        self.next_token_buf.copy_(argmax_rows(self.logits_buf))

    def mtp_graph(self) -> None:  # graphready: hot
        """The MTP layer on the main model's final streams and the tokens decided at p+1, p+2."""
        io = self.io[self.devices[-1]]
        self.mtp.step_graph(io.streams, self.spec.decide(self.next_token_buf), io.pos)

    def advance_graph(self) -> None:  # graphready: hot
        """Accept or reject the draft and set the next speculative step's inputs (on the device)."""
        io = self.io[self.devices[-1]]
        self.spec.advance(io.tokens, io.pos, self.mtp.draft_buf)

    def transfer(self, source: torch.device, target: torch.device) -> None:
        """Hand the residual streams to the next device (outside any graph)."""
        self.io[target].streams.copy_(self.io[source].streams)

    def units(self) -> dict[torch.device, list[Unit]]:
        """The graph-ready step as ordered pieces per device (devices in layer order)."""
        plan = {d: [Unit("positions", "positions", d, self.io[d].positions.refresh)] for d in self.devices}
        plan[self.devices[0]].append(Unit("embed", "embed", self.devices[0], self.embed_graph))
        for layer, device in zip(self.layers, self.layer_devices):
            i = layer.index
            plan[device] += [Unit(f"layer{i}.pre", "pre", device, layer.pre_attention),
                             Unit(f"layer{i}.attention", "attention", device, layer.attention),
                             Unit(f"layer{i}.post", "post", device, layer.post_attention)]
        last = self.devices[-1]
        plan[last].append(Unit("head", "head", last, self.head_graph))
        if self.mtp is not None:
            plan[last] += [Unit("mtp", "mtp", last, self.mtp_graph), Unit("advance", "advance", last, self.advance_graph)]
        return plan

    @torch.inference_mode()
    def step_graphable(self) -> None:  # graphready: hot
        """One decode step from the device buffers, with fixed shapes and no host reads."""
        previous = None
        for device, units in self.units().items():
            if previous is not None:
                self.transfer(previous, device)
            for unit in units:
                unit.run()
            previous = device
