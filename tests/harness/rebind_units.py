"""GPU units for GD305 between replays: attributes the graph reads, re-bound by the code an engine runs
between steps (its input preparation, its decode loop), each beside the engine idiom that stays clean.

`# hazard: GD305` marks the line each firing unit must be reported at.
"""

from __future__ import annotations

import torch

from graphready.harness import Unit

N, BATCH, MAX_BATCH, TABLE_ROWS, SLOTS = 256, 8, 32, 64, 4


def _generator(seed: int) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(seed)


def _vector(seed: int) -> torch.Tensor:
    return torch.randn(N, device="cuda", generator=_generator(seed))


class PreparedBias:
    """A runner whose input preparation installs the batch's bias by assigning a new tensor."""

    def __init__(self) -> None:
        self.bias = torch.zeros(N, device="cuda")

    def __call__(self, x):
        return torch.tanh(x + self.bias)

    def make_inputs(self, seed: int):
        generator = _generator(seed)
        self.bias = torch.randn(N, device="cuda", generator=generator) * 0.1  # hazard: GD305
        return (torch.randn(N, device="cuda", generator=generator),)


class CopiedPreparedBias(PreparedBias):
    def make_inputs(self, seed: int):
        generator = _generator(seed)
        self.bias.copy_(torch.randn(N, device="cuda", generator=generator) * 0.1)
        return (torch.randn(N, device="cuda", generator=generator),)


class PersistentInputBuffers:
    """vLLM / SGLang: the graph reads persistent buffers sized for the largest batch; the preparation writes
    the batch into their head (`input_buffers["positions"][:n].copy_(...)`, `self.seq_lens[:bs].copy_(...)`)."""

    def __init__(self) -> None:
        self.input_buffers = {
            "positions": torch.zeros(MAX_BATCH, dtype=torch.int64, device="cuda"),
            "scales": torch.ones(MAX_BATCH, device="cuda"),
        }
        self.rotary = torch.linspace(-1.0, 1.0, TABLE_ROWS * N, device="cuda").view(TABLE_ROWS, N)

    def __call__(self, x):
        positions = self.input_buffers["positions"][:BATCH]
        return x * self.rotary[positions] * self.input_buffers["scales"][:BATCH, None]

    def make_inputs(self, seed: int):
        generator = _generator(seed)
        positions = torch.randint(0, TABLE_ROWS, (BATCH,), device="cuda", generator=generator)
        self.input_buffers["positions"][:BATCH].copy_(positions)
        self.input_buffers["scales"][:BATCH].copy_(torch.rand(BATCH, device="cuda", generator=generator))
        return (torch.randn(BATCH, N, device="cuda", generator=generator),)


class HostSideBatchInfo:
    """SGLang keeps per-batch bookkeeping the graph never reads (`seq_lens_cpu`, request indices): the
    preparation re-binds it every step, which changes nothing for the graph."""

    def __init__(self) -> None:
        self.scale = torch.linspace(0.5, 1.5, N, device="cuda")
        self.seq_lens_cpu = torch.zeros(BATCH, dtype=torch.int64)
        self.req_pool_indices = torch.zeros(BATCH, dtype=torch.int64, device="cuda")

    def __call__(self, x):
        return torch.tanh(x * self.scale)

    def make_inputs(self, seed: int):
        generator = _generator(seed)
        self.seq_lens_cpu = torch.arange(BATCH) + seed
        self.req_pool_indices = torch.randint(0, MAX_BATCH, (BATCH,), device="cuda", generator=generator)
        return (torch.randn(N, device="cuda", generator=generator),)


class ReshapedCache:
    """A flat cache handed to the step reshaped by the preparation: the new view keeps the same storage."""

    def __init__(self) -> None:
        self.kv = torch.linspace(-1.0, 1.0, SLOTS * N, device="cuda")

    def __call__(self, x):
        return (self.kv * x).sum(0)

    def make_inputs(self, seed: int):
        self.kv = self.kv.view(SLOTS, N)
        return (_vector(seed),)


class LoopRefreshedBias:
    """A decode loop that feeds each step's output back as the next step's bias, by assigning a new tensor."""

    def __init__(self) -> None:
        self.bias = torch.zeros(N, device="cuda")

    def __call__(self, x):
        return torch.tanh(x + self.bias)

    def loop(self, step, steps):
        self.bias.zero_()
        outputs = []
        for k in range(steps):
            outputs.append(step(_vector(100 + k)).clone())
            self.bias = outputs[-1] * 0.5  # hazard: GD305
        return torch.stack(outputs)


class LoopCopiedBias(LoopRefreshedBias):
    def loop(self, step, steps):
        self.bias.zero_()
        outputs = []
        for k in range(steps):
            outputs.append(step(_vector(100 + k)).clone())
            self.bias.copy_(outputs[-1] * 0.5)
        return torch.stack(outputs)


def _unit(name: str, runner, **options) -> Unit:
    return Unit(name, runner, getattr(runner, "make_inputs", lambda seed: (_vector(seed),)), **options)


def rebind_units() -> list[Unit]:
    refreshed, copied = LoopRefreshedBias(), LoopCopiedBias()
    return [
        _unit("prepared_bias", PreparedBias()),
        _unit("copied_prepared_bias", CopiedPreparedBias()),
        _unit("persistent_buffers", PersistentInputBuffers()),
        _unit("host_side_info", HostSideBatchInfo()),
        _unit("reshaped_cache", ReshapedCache()),
        _unit("loop_refreshed_bias", refreshed, loop=refreshed.loop),
        _unit("loop_copied_bias", copied, loop=copied.loop),
    ]
