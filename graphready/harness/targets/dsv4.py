"""Built-in target `dsv4`: every decoder layer of the DeepSeek-V4 decode model as a unit, plus the full step.

    graphready check dsv4 --preset tiny|flash|pro|pro-<N>L [--checkpoint DIR] [--gpus N]

The model is built once per worker (each unit's `setup`), placed over the N GPUs the target sees the
way `python -m dsv4.generate --gpus N` places it: layer i on GPU i*N//L, weights loaded (or drawn)
straight onto their GPU. Units drive the graph-ready path (`DSV4Model.units()`), which reads token ids,
position and residual streams from per-device buffers: each unit copies its inputs into those
buffers (the copies are part of the captured graph) and declares its layers' KV caches and
compressor states as its state. Layer units run on their layer's GPU. On one GPU the full step is
one unit; over several it is one unit per GPU (`step.gpuK`: everything that GPU runs in a step, the
graph `GraphDecoder` captures in full mode), since the hand-over between GPUs is a copy outside
any graph. Before anything is loaded, the factory checks that every GPU has the memory its part needs.
"""

from __future__ import annotations

import functools
from typing import Any

from graphready.errors import UsageError
from graphready.harness.unit import Unit

BATCH = 1
MAX_LEN = 1024
# bf16 matmuls: replay and eager run the same kernels, but allow a few ulps for cuBLAS workspace choices.
ATOL = RTOL = 1e-2
_STATE_WORDS = ("cache", "state")


class DoesNotFit(UsageError):
    """The preset cannot fit the visible GPUs: reported before loading, with the bytes needed and free."""


@functools.cache
def _model(preset_name: str, checkpoint: str | None, gpus: int):
    import torch

    from dsv4.config import load_config, preset
    from dsv4.model import DSV4Model
    from dsv4.placement import load_placed_weights

    config = load_config(checkpoint) if checkpoint is not None else preset(preset_name)
    devices = [torch.device("cuda", i) for i in range(gpus)] if gpus > 1 else [
        torch.device("cuda", torch.cuda.current_device())]
    weights = load_placed_weights(config, devices, checkpoint=checkpoint)
    max_len = min(MAX_LEN, config.max_position_embeddings)
    model = DSV4Model(config, weights, devices=devices, max_len=max_len, batch=BATCH)
    del weights
    torch.cuda.empty_cache()
    return model


def _mutable_tensors(obj: Any, seen: set[int] | None = None) -> list:
    """Cache and state tensors reachable from a layer object (KV caches, compressor states), in a fixed order."""
    import torch

    seen = set() if seen is None else seen
    found = []
    for name, value in sorted(vars(obj).items()):
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, torch.Tensor):
            if any(word in name for word in _STATE_WORDS):
                found.append(value)
        elif type(value).__module__.startswith("dsv4.layers"):
            found += _mutable_tensors(value, seen)
    return found


def check_memory(config, checkpoint: str | None, gpus: int, label: str) -> None:
    """Raise a usage error (exit 2) when a GPU lacks the memory its part of the model needs."""
    import torch

    if not torch.cuda.is_available():
        return  # listing on a machine without a GPU: `check` itself reports that
    visible = torch.cuda.device_count()
    if gpus > visible:
        raise UsageError(f"dsv4 --gpus {gpus} but {visible} GPU(s) are visible")
    from dsv4.memory import memory_needed, shortfalls

    needs = memory_needed(config, gpus, checkpoint)
    if gpus == 1:
        free = [torch.cuda.mem_get_info(torch.cuda.current_device())[0]]
    else:
        free = [torch.cuda.mem_get_info(i)[0] for i in range(gpus)]
    short = shortfalls(needs, free)
    if short:
        total = sum(n.total for n in needs)
        raise DoesNotFit(
            f"dsv4 {label} needs {total / 1e9:.1f} GB over {gpus} GPU(s) and does not fit: " + "; ".join(short)
            + f". Spread it over more GPUs (--gpus N, {visible} visible) or pick a smaller preset (pro-<N>L)."
        )


class _Target:
    """The model one worker builds (once) and the units over it."""

    def __init__(self, preset_name: str, checkpoint: str | None, gpus: int) -> None:
        self.preset_name = preset_name
        self.checkpoint = checkpoint
        self.gpus = gpus

    def model(self):
        return _model(self.preset_name, self.checkpoint, self.gpus)

    def build(self) -> None:
        self.model()

    def layer_state(self, index: int) -> list:
        return _mutable_tensors(self.model().layers[index])

    def device_state(self, device_index: int) -> list:
        model = self.model()
        device = model.devices[device_index]
        return [t for layer in model.layers if layer.ctx.device == device for t in _mutable_tensors(layer)]

    def _tokens_and_position(self, seed: int, device):
        import torch

        model = self.model()
        generator = torch.Generator(device="cpu").manual_seed(seed)
        tokens = torch.randint(0, model.config.vocab_size, (model.batch,), generator=generator)
        position = torch.randint(0, model.max_len, (1,), generator=generator)
        return tokens.to(device), position.to(device)

    def _streams(self, seed: int, device):
        import torch

        buffer = self.model().io[device].streams
        generator = torch.Generator(device="cpu").manual_seed(10_000 + seed)
        return torch.randn(buffer.shape, generator=generator).to(buffer)

    def layer_inputs(self, index: int, seed: int):
        device = self.model().layer_devices[index]
        return (self._streams(seed, device), *self._tokens_and_position(seed, device))

    def layer_step(self, index: int):
        def run(streams, tokens, position):
            import torch

            model = self.model()
            block = model.layers[index]
            io = block.io
            with torch.inference_mode():
                io.streams.copy_(streams)
                io.tokens.copy_(tokens)
                io.pos.copy_(position)
                block.pre_attention()
                block.attention()
                block.post_attention()
            return io.streams

        run.__qualname__ = f"dsv4 layer{index} step"
        return run

    def step_inputs(self, seed: int):
        return self._tokens_and_position(seed, self.model().devices[0])

    def full_step(self, tokens, position):
        model = self.model()
        io = model.io[model.devices[0]]
        io.tokens.copy_(tokens)
        io.pos.copy_(position)
        model.step_graphable()
        return model.logits_buf, model.next_token_buf

    def device_inputs(self, device_index: int, seed: int):
        device = self.model().devices[device_index]
        streams = (self._streams(seed, device),) if device_index else ()
        return (*streams, *self._tokens_and_position(seed, device))

    def device_step(self, device_index: int):
        def run(*inputs):
            import torch

            model = self.model()
            device = model.devices[device_index]
            io = model.io[device]
            *streams, tokens, position = inputs
            with torch.inference_mode():
                if streams:
                    io.streams.copy_(streams[0])
                io.tokens.copy_(tokens)
                io.pos.copy_(position)
                for piece in model.units()[device]:
                    piece.run()
            if device == model.devices[-1]:
                return model.logits_buf, model.next_token_buf
            return io.streams

        run.__qualname__ = f"dsv4 step on GPU {device_index}"
        return run


def _layer_code() -> tuple:
    from dsv4.layers.block import Block

    return (Block.pre_attention, Block.attention, Block.post_attention)


def _step_code() -> tuple:
    from dsv4.model import DSV4Model

    return (*_layer_code(), DSV4Model.embed_graph, DSV4Model.head_graph, DSV4Model.step_graphable)


def factory(preset: str = "tiny", checkpoint: str | None = None, gpus: int = 1) -> list[Unit]:
    """One unit per decoder layer and the full step (one per GPU when the model spans several)."""
    from dsv4.config import ConfigError, load_config
    from dsv4.config import preset as preset_config

    if gpus < 1:
        raise UsageError("dsv4 needs --gpus of at least 1")
    try:
        config = load_config(checkpoint) if checkpoint else preset_config(preset)
    except ConfigError as exc:
        raise UsageError(f"dsv4: {exc}") from None
    layers = config.num_hidden_layers
    gpus = min(gpus, layers)  # a GPU beyond one per layer would hold nothing
    check_memory(config, checkpoint, gpus, f"--checkpoint {checkpoint}" if checkpoint else f"--preset {preset}")
    target = _Target(preset, checkpoint, gpus)
    spans = gpus > 1

    def pinned(device_index: int) -> str | None:
        return f"cuda:{device_index}" if spans else None

    common = dict(setup=target.build, atol=ATOL, rtol=RTOL)
    units = [
        Unit(
            f"layer{i}",
            target.layer_step(i),
            functools.partial(target.layer_inputs, i),
            state=functools.partial(target.layer_state, i),
            device=pinned(i * gpus // layers),
            reaches=_layer_code(),
            **common,
        )
        for i in range(layers)
    ]
    if not spans:
        units.append(Unit("step", target.full_step, target.step_inputs,
                          state=functools.partial(target.device_state, 0), reaches=_step_code(), **common))
        return units
    for k in range(gpus):
        units.append(Unit(f"step.gpu{k}", target.device_step(k), functools.partial(target.device_inputs, k),
                          state=functools.partial(target.device_state, k), device=pinned(k),
                          reaches=_step_code(), **common))
    return units
