"""Built-in target `dsv4`: every decoder layer of the DeepSeek-V4 decode model as a unit, plus the full step.

    graphready check dsv4 --preset tiny|pro-4L [--checkpoint DIR]

Units drive the model's graph-ready path (`DSV4Model.units()` / `step_graphable()`), which reads its
token ids, position and residual streams from per-device buffers: each unit copies its inputs into
those buffers (the copies are part of the captured graph) and declares the layers' KV caches and
compressor states as its state. The model is built lazily, once per worker process, on the GPU the
harness assigns, so listing the units costs nothing.
"""

from __future__ import annotations

import functools
from typing import Any

from graphready.harness.unit import Unit

BATCH = 1
MAX_LEN = 1024
# bf16 matmuls: replay and eager run the same kernels, but allow a few ulps for cuBLAS workspace choices.
ATOL = RTOL = 1e-2
_STATE_WORDS = ("cache", "state")


@functools.cache
def _model(preset_name: str, checkpoint: str | None, device_index: int):
    import torch

    from dsv4.config import load_config, preset
    from dsv4.model import DSV4Model

    device = torch.device("cuda", device_index)
    if checkpoint is not None:
        from dsv4.checkpoint import load_checkpoint

        config = load_config(checkpoint)
        weights = load_checkpoint(checkpoint, config, device=device)
    else:
        from dsv4.synth import synthetic_weights

        config = preset(preset_name)
        weights = synthetic_weights(config, device=device)
    max_len = min(MAX_LEN, config.max_position_embeddings)
    return DSV4Model(config, weights, devices=[device], max_len=max_len, batch=BATCH)


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


class _Target:
    """The lazily built model of one worker and the units over it."""

    def __init__(self, preset_name: str, checkpoint: str | None) -> None:
        self.preset_name = preset_name
        self.checkpoint = checkpoint

    def model(self):
        import torch

        return _model(self.preset_name, self.checkpoint, torch.cuda.current_device())

    def io(self):
        model = self.model()
        return model.io[model.devices[0]]

    def layer_state(self, index: int) -> list:
        return _mutable_tensors(self.model().layers[index])

    def all_state(self) -> list:
        return [t for i in range(len(self.model().layers)) for t in self.layer_state(i)]

    def _tokens_and_position(self, seed: int):
        import torch

        model = self.model()
        device = model.devices[0]
        generator = torch.Generator(device="cpu").manual_seed(seed)
        tokens = torch.randint(0, model.config.vocab_size, (model.batch,), generator=generator)
        position = torch.randint(0, model.max_len, (1,), generator=generator)
        return tokens.to(device), position.to(device)

    def layer_inputs(self, seed: int):
        import torch

        model = self.model()
        tokens, position = self._tokens_and_position(seed)
        generator = torch.Generator(device="cpu").manual_seed(10_000 + seed)
        streams = torch.randn(self.io().streams.shape, generator=generator).to(self.io().streams)
        return streams, tokens, position

    def step_inputs(self, seed: int):
        return self._tokens_and_position(seed)

    def layer_step(self, index: int):
        def run(streams, tokens, position):
            import torch

            model = self.model()
            pieces = [u for u in model.units()[model.devices[0]] if u.name.startswith(f"layer{index}.")]
            io = self.io()
            with torch.inference_mode():
                io.streams.copy_(streams)
                io.tokens.copy_(tokens)
                io.pos.copy_(position)
                for piece in pieces:
                    piece.run()
            return io.streams

        run.__qualname__ = f"dsv4 layer{index} step"
        return run

    def full_step(self, tokens, position):
        model = self.model()
        io = self.io()
        io.tokens.copy_(tokens)
        io.pos.copy_(position)
        model.step_graphable()
        return model.logits_buf, model.next_token_buf


def factory(preset: str = "tiny", checkpoint: str | None = None) -> list[Unit]:
    """One unit per decoder layer and one for the whole decode step."""
    from dsv4.config import load_config
    from dsv4.config import preset as preset_config

    config = load_config(checkpoint) if checkpoint else preset_config(preset)
    target = _Target(preset, checkpoint)
    units = [
        Unit(
            f"layer{i}",
            target.layer_step(i),
            target.layer_inputs,
            state=functools.partial(target.layer_state, i),
            atol=ATOL,
            rtol=RTOL,
        )
        for i in range(config.num_hidden_layers)
    ]
    units.append(Unit("step", target.full_step, target.step_inputs, state=target.all_state, atol=ATOL, rtol=RTOL))
    return units
