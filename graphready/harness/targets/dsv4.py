"""Built-in target `dsv4`: every decoder layer of the DeepSeek-V4 decode model as a unit, plus the full step.

    graphready check dsv4 --preset tiny|flash|pro|pro-<N>L [--checkpoint DIR] [--gpus N] [--mtp]

The model is built once per worker (each unit's `setup`), placed over the N GPUs the target sees the
way `python -m dsv4.generate --gpus N` places it: layer i on GPU i*N//L, weights loaded (or drawn)
straight onto their GPU. Units drive the graph-ready path (`DSV4Model.units()`), which reads token ids,
position and residual streams from per-device buffers: each unit copies its inputs into those
buffers (the copies are part of the captured graph) and declares its layers' KV caches and
compressor states as its state. Layer units run on their layer's GPU. On one GPU the full step is
one unit; over several it is one unit per GPU (`step.gpuK`: everything that GPU runs in a step, the
graph `GraphDecoder` captures in full mode), since the hand-over between GPUs is a copy outside
any graph. Before anything is loaded, the factory checks that every GPU has the memory its part needs.

With `--mtp` the model decodes speculatively (`DSV4Model(speculative=True)`, weights with the MTP layer):
every step carries two rows (the known token and the draft), so the layer units take 2-row inputs, and
two more units run on the last GPU: `mtp` (the MTP layer, drafting from the main model's final streams)
and `advance` (accept or reject the draft and set the next step's inputs, on the device). Their state
is the MTP block's caches and the `Speculation` buffers the advance step writes; the full step carries
both.
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
def _model(preset_name: str, checkpoint: str | None, gpus: int, mtp: bool):
    import torch

    from dsv4.config import load_config, preset
    from dsv4.model import DSV4Model
    from dsv4.placement import load_placed_weights

    config = load_config(checkpoint) if checkpoint is not None else preset(preset_name)
    devices = [torch.device("cuda", i) for i in range(gpus)] if gpus > 1 else [
        torch.device("cuda", torch.cuda.current_device())]
    weights = load_placed_weights(config, devices, checkpoint=checkpoint, mtp=mtp)
    max_len = min(MAX_LEN, config.max_position_embeddings)
    model = DSV4Model(config, weights, devices=devices, max_len=max_len, batch=BATCH, speculative=mtp)
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


def check_memory(config, checkpoint: str | None, gpus: int, label: str, mtp: bool) -> None:
    """Raise a usage error (exit 2) when a GPU lacks the memory its part of the model (`mtp`: with the MTP
    layer, on the last GPU) needs."""
    import torch

    if not torch.cuda.is_available():
        return  # listing on a machine without a GPU: `check` itself reports that
    visible = torch.cuda.device_count()
    if gpus > visible:
        raise UsageError(f"dsv4 --gpus {gpus} but {visible} GPU(s) are visible")
    from dsv4.memory import memory_needed, shortfalls

    needs = memory_needed(config, gpus, checkpoint, mtp=mtp)
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

    def __init__(self, preset_name: str, checkpoint: str | None, gpus: int, mtp: bool) -> None:
        self.preset_name = preset_name
        self.checkpoint = checkpoint
        self.gpus = gpus
        self.mtp = mtp

    def model(self):
        return _model(self.preset_name, self.checkpoint, self.gpus, self.mtp)

    def build(self) -> None:
        self.model()

    def layer_state(self, index: int) -> list:
        return _mutable_tensors(self.model().layers[index])

    def mtp_state(self) -> list:
        return _mutable_tensors(self.model().mtp.block)

    def advance_state(self) -> list:
        """The `Speculation` buffers the advance step writes: the accepted count and the emitted tokens carry
        from step to step; the next step's token, draft and position are rewritten whole, but restoring them
        keeps eager and replay starting from the same device state."""
        spec = self.model().spec
        return [spec.tokens, spec.pos, spec.accepted, spec.emitted]

    def device_state(self, device_index: int) -> list:
        model = self.model()
        device = model.devices[device_index]
        state = [t for layer in model.layers if layer.ctx.device == device for t in _mutable_tensors(layer)]
        if model.mtp is not None and device == model.devices[-1]:
            state += self.mtp_state() + self.advance_state()
        return state

    def _position(self, generator):
        """A step's first position: every row of the step (two with MTP) must fall inside max_len."""
        import torch

        model = self.model()
        return torch.randint(0, model.max_len - model.tokens_per_step + 1, (1,), generator=generator)

    def _tokens_and_position(self, seed: int, device):
        import torch

        model = self.model()
        generator = torch.Generator(device="cpu").manual_seed(seed)
        tokens = torch.randint(0, model.config.vocab_size, (model.rows,), generator=generator)
        return tokens.to(device), self._position(generator).to(device)

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
                io.positions.refresh()
                block.pre_attention()
                block.attention()
                block.post_attention()
            return io.streams

        run.__qualname__ = f"dsv4 layer{index} step"
        return run

    def mtp_inputs(self, seed: int):
        """The main model's final streams, its greedy tokens (one per row) and the position, on the last GPU."""
        device = self.model().devices[-1]
        return (self._streams(seed, device), *self._tokens_and_position(seed, device))

    def mtp_step(self, streams, greedy, position):
        """The `mtp` piece of a speculative step, fed through the buffers the main model leaves it."""
        import torch

        model = self.model()
        io = model.io[model.devices[-1]]
        with torch.inference_mode():
            io.streams.copy_(streams)
            model.next_token_buf.copy_(greedy)
            io.pos.copy_(position)
            model.mtp_graph()
        return model.mtp.logits_buf, model.mtp.draft_buf

    def advance_inputs(self, seed: int):
        """Decided tokens, the fed token and draft, the position and the MTP layer's drafts, on the last GPU.

        On odd seeds the fed draft is the token decided at p+1, so replay meets both the rejected and the
        accepted path (random tokens would almost never agree)."""
        import torch

        model = self.model()
        generator = torch.Generator(device="cpu").manual_seed(20_000 + seed)
        decided, fed, drafts = (torch.randint(0, model.config.vocab_size, (2,), generator=generator)
                                for _ in range(3))
        if seed % 2:
            fed[1] = decided[0]
        position = self._position(generator)
        return tuple(t.to(model.devices[-1]) for t in (decided, fed, position, drafts))

    def advance_step(self, decided, fed, position, drafts):
        """The `advance` piece of a speculative step, fed through the buffers the main model and the MTP layer
        leave it."""
        import torch

        model = self.model()
        io = model.io[model.devices[-1]]
        with torch.inference_mode():
            model.spec.decided.copy_(decided)
            io.tokens.copy_(fed)
            io.pos.copy_(position)
            model.mtp.draft_buf.copy_(drafts)
            model.advance_graph()
        return model.spec.tokens, model.spec.pos

    def step_outputs(self) -> tuple:
        """What a full step leaves for the caller: logits and greedy tokens, and with MTP also the drafts and
        the next step's inputs."""
        model = self.model()
        main = (model.logits_buf, model.next_token_buf)
        if model.mtp is None:
            return main
        return (*main, model.mtp.logits_buf, model.mtp.draft_buf, model.spec.tokens, model.spec.pos)

    def step_inputs(self, seed: int):
        return self._tokens_and_position(seed, self.model().devices[0])

    def full_step(self, tokens, position):
        model = self.model()
        io = model.io[model.devices[0]]
        io.tokens.copy_(tokens)
        io.pos.copy_(position)
        model.step_graphable()
        return self.step_outputs()

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
                return self.step_outputs()
            return io.streams

        run.__qualname__ = f"dsv4 step on GPU {device_index}"
        return run


def _layer_code() -> tuple:
    from dsv4.layers.block import Block
    from dsv4.layers.positions import StepPositions

    return (StepPositions.refresh, Block.pre_attention, Block.attention, Block.post_attention)


def _mtp_code() -> tuple:
    from dsv4.model import DSV4Model
    from dsv4.mtp import MTPLayer, Speculation

    return (DSV4Model.mtp_graph, MTPLayer.step_graph, Speculation.decide)


def _advance_code() -> tuple:
    from dsv4.model import DSV4Model
    from dsv4.mtp import Speculation

    return (DSV4Model.advance_graph, Speculation.advance)


def _step_code(mtp: bool) -> tuple:
    from dsv4.model import DSV4Model

    main = (*_layer_code(), DSV4Model.embed_graph, DSV4Model.head_graph, DSV4Model.step_graphable)
    return (*main, *_mtp_code(), *_advance_code()) if mtp else main


def factory(preset: str = "tiny", checkpoint: str | None = None, gpus: int = 1, mtp: bool = False) -> list[Unit]:
    """One unit per decoder layer and the full step (one per GPU when the model spans several); `mtp`: the
    speculative model, with the MTP layer and the accept/advance step as units of their own (last GPU)."""
    from dsv4.config import ConfigError, load_config
    from dsv4.config import preset as preset_config

    if gpus < 1:
        raise UsageError("dsv4 needs --gpus of at least 1")
    try:
        config = load_config(checkpoint) if checkpoint else preset_config(preset)
    except ConfigError as exc:
        raise UsageError(f"dsv4: {exc}") from None
    if mtp and config.num_nextn_predict_layers < 1:
        raise UsageError("dsv4 --mtp: the config has no MTP layer (num_nextn_predict_layers is 0)")
    layers = config.num_hidden_layers
    gpus = min(gpus, layers)  # a GPU beyond one per layer would hold nothing
    label = f"--checkpoint {checkpoint}" if checkpoint else f"--preset {preset}"
    check_memory(config, checkpoint, gpus, label + (" --mtp" if mtp else ""), mtp)
    target = _Target(preset, checkpoint, gpus, mtp)
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
    if mtp:
        units += [
            Unit("mtp", target.mtp_step, target.mtp_inputs, state=target.mtp_state, device=pinned(gpus - 1),
                 reaches=(*_layer_code(), *_mtp_code()), **common),
            Unit("advance", target.advance_step, target.advance_inputs, state=target.advance_state,
                 device=pinned(gpus - 1), reaches=_advance_code(), **common),
        ]
    if not spans:
        units.append(Unit("step", target.full_step, target.step_inputs,
                          state=functools.partial(target.device_state, 0), reaches=_step_code(mtp), **common))
        return units
    for k in range(gpus):
        units.append(Unit(f"step.gpu{k}", target.device_step(k), functools.partial(target.device_inputs, k),
                          state=functools.partial(target.device_state, k), device=pinned(k),
                          reaches=_step_code(mtp), **common))
    return units
