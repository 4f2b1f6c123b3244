"""Hazard units for `graphready check`: for every GD code a unit that triggers it, and a clean twin.

Each hazard is drawn from a failure in the DeepSeek-V4 engineering log (shared/seeds/004 unless
noted). A line marked `# hazard: GDxxx` is where the harness must point for that code; for codes
that have no better anchor than the step itself, the marker sits on the step's `def` line.
"""

from __future__ import annotations

import functools
import importlib.util
import math
from pathlib import Path

import torch

from graphready.harness import Unit

N = 1024  # elements per input vector
EXPERTS = 16
TOKENS = 64
KV_DIM = 256
KV_SLOTS = 64


def _vector(seed: int) -> tuple[torch.Tensor]:
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(N, device="cuda", generator=generator),)


def _token_ids(seed: int) -> tuple[torch.Tensor]:
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randint(0, EXPERTS, (TOKENS,), device="cuda", generator=generator),)


# -- GD101 / GD201: host syncs -------------------------------------------------------------------


class PeakNormItem:
    """mHC post block: `X.abs().max().item()` cost 122 syncs per token."""

    def __init__(self) -> None:
        self.weight = torch.linspace(0.5, 1.5, N, device="cuda")

    def __call__(self, x):
        peak = x.abs().max().item()  # hazard: GD101, GD201
        return x * self.weight / peak


class PeakNormDevice:
    def __init__(self) -> None:
        self.weight = torch.linspace(0.5, 1.5, N, device="cuda")

    def __call__(self, x):
        peak = x.abs().amax()
        return x * self.weight / peak


class ExpertCountsBincount:
    """MoE routing with `torch.bincount`: a data-dependent size read back to the host (84655d0)."""

    def __call__(self, ids):
        counts = torch.bincount(ids, minlength=EXPERTS)  # hazard: GD101, GD201
        return counts.cumsum(0)


class ExpertCountsScatter:
    def __init__(self) -> None:
        self.counts = torch.zeros(EXPERTS, dtype=torch.int64, device="cuda")
        self.ones = torch.ones(TOKENS, dtype=torch.int64, device="cuda")

    def __call__(self, ids):
        self.counts.zero_()
        self.counts.scatter_add_(0, ids, self.ones)
        return self.counts.cumsum(0)


class PositiveSumMask:
    """A boolean mask: the result's size depends on the data."""

    def __call__(self, x):
        kept = x[x > 0]  # hazard: GD101, GD201
        return kept.sum()


class PositiveSumWhere:
    def __call__(self, x):
        return torch.where(x > 0, x, 0.0).sum()


class PageableBias:
    """Token/position ids written from pageable host memory every step (0ca7bed)."""

    def __init__(self) -> None:
        self.bias_host = torch.linspace(-1.0, 1.0, N)

    def __call__(self, x):
        bias = self.bias_host.to(x.device)  # hazard: GD101, GD201
        return x + bias


class PinnedBias:
    def __init__(self) -> None:
        self.bias_host = torch.linspace(-1.0, 1.0, N).pin_memory()
        self.bias = torch.empty(N, device="cuda")

    def __call__(self, x):
        self.bias.copy_(self.bias_host, non_blocking=True)
        return x + self.bias


# -- GD102: non-blocking copies that block anyway ----------------------------------------------------


class PageableNonBlockingBias:
    """`non_blocking=True` from pageable memory: a sync that set_sync_debug_mode never reports."""

    def __init__(self) -> None:
        self.bias_host = torch.linspace(-1.0, 1.0, N)

    def __call__(self, x):
        bias = self.bias_host.to(x.device, non_blocking=True)  # hazard: GD102
        return x + bias


class PinnedNonBlockingBias:
    def __init__(self) -> None:
        self.bias_host = torch.linspace(-1.0, 1.0, N).pin_memory()

    def __call__(self, x):
        bias = self.bias_host.to(x.device, non_blocking=True)
        return x + bias


class StridedPinnedColumn:
    """A column of a pinned host table: not contiguous, so torch stages it through pageable memory."""

    def __init__(self) -> None:
        self.table_host = torch.linspace(-1.0, 1.0, 2 * N).reshape(N, 2).pin_memory()
        self.bias = torch.empty(N, device="cuda")

    def __call__(self, x):
        self.bias.copy_(self.table_host[:, 0], non_blocking=True)  # hazard: GD102
        return x + self.bias


class ContiguousPinnedColumn:
    def __init__(self) -> None:
        table = torch.linspace(-1.0, 1.0, 2 * N).reshape(N, 2)
        self.column_host = table[:, 0].contiguous().pin_memory()
        self.bias = torch.empty(N, device="cuda")

    def __call__(self, x):
        self.bias.copy_(self.column_host, non_blocking=True)
        return x + self.bias


# -- GD301: replay differs from eager --------------------------------------------------------------


class HostStepCounter:
    """A Python step counter: its value at capture is frozen into the graph."""

    def __init__(self) -> None:
        self.step = 0

    def __call__(self, x):
        self.step += 1
        return x * math.cos(0.1 * self.step)  # hazard: GD301


class DeviceStepCounter:
    def __init__(self) -> None:
        self.step = torch.zeros((), device="cuda")

    def __call__(self, x):
        self.step.add_(1)
        return x * torch.cos(0.1 * self.step)


class ReplacedRunningMean:
    """A buffer replaced instead of copied into: the graph keeps the old one."""

    def __init__(self) -> None:
        self.mean = torch.zeros(N, device="cuda")

    def __call__(self, x):
        self.mean = self.mean * 0.9 + x * 0.1  # hazard: GD301
        return self.mean


class InPlaceRunningMean:
    def __init__(self) -> None:
        self.mean = torch.zeros(N, device="cuda")

    def __call__(self, x):
        self.mean.mul_(0.9).add_(x, alpha=0.1)
        return self.mean


# -- GD202: a kernel that escapes the graph -------------------------------------------------------


def _sibling(name: str):
    path = Path(__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"graphready_hazards_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _escaped_kernel_pair():
    """A CuTeDSL kernel (Triton when nvidia-cutlass-dsl cannot load) called with and without a stream."""
    try:
        return _sibling("cute_kernels")
    except Exception:  # nvidia-cutlass-dsl missing or unusable on this machine
        return _sibling("triton_kernels")


class StreamlessKernel:
    """A CuTeDSL kernel launched without its `stream` argument runs on the default stream."""

    def __init__(self, kernels) -> None:
        self.kernels = kernels
        self.out = torch.zeros(N, device="cuda")

    def warm(self) -> None:  # compile before any capture (GD203 is not this unit's point)
        self(torch.zeros(N, device="cuda"))

    def __call__(self, x):  # its GD202 is at the launch, in the kernel module (hazard_expectations.py)
        self.kernels.double_without_stream(x, self.out)
        return self.out


class StreamKernel(StreamlessKernel):
    def __call__(self, x):
        self.kernels.double_on_current_stream(x, self.out)
        return self.out


class CompiledStreamlessKernel:
    """A CuTeDSL kernel compiled with `cute.compile` ahead of the step, held by the step's object, launched
    without a stream (issue 26: the dead weak proxies the compiled kernel holds once killed the worker)."""

    def __init__(self, kernels) -> None:
        self.kernels = kernels
        self.out = torch.zeros(N, device="cuda")
        self.double, self.wrap = kernels.compile_without_stream(self.out)

    def warm(self) -> None:  # loads the compiled kernel before any capture (GD203 is not this unit's point)
        self(torch.zeros(N, device="cuda"))

    def __call__(self, x):
        self.double(self.wrap(x), self.wrap(self.out))  # hazard: GD202
        return self.out


class CompiledStreamKernel(CompiledStreamlessKernel):
    def __init__(self, kernels) -> None:
        self.kernels = kernels
        self.out = torch.zeros(N, device="cuda")
        self.double, self.wrap = kernels.compile_on_stream(self.out)

    def __call__(self, x):
        self.double(self.wrap(x), self.wrap(self.out), self.kernels.current_stream())
        return self.out


# -- GD302: a degenerate replay --------------------------------------------------------------------


class CaptureFallbackScale:
    """f259d63: a capture-only path read a buffer that had been reset to None, and fell through."""

    def __init__(self) -> None:
        self.swizzled = torch.full((N,), 2.0, device="cuda")
        self.swizzled = None  # the bug: allocated, then overwritten

    def __call__(self, x):
        if torch.cuda.is_current_stream_capturing():
            scale = self.swizzled if self.swizzled is not None else torch.zeros_like(x)  # hazard: GD302
        else:
            scale = torch.full_like(x, 2.0)
        return x * scale


class CaptureSameScale:
    def __init__(self) -> None:
        self.swizzled = torch.full((N,), 2.0, device="cuda")

    def __call__(self, x):
        return x * self.swizzled


class EagerVerifiedScale:
    """SGLang 0.5.23's qwen_image norm: outside capture the fast path is also checked against the reference
    (here by a device-side assert, no sync); during capture the check is skipped. The eager step launches
    more kernels than the graph holds, yet nothing escapes the graph."""

    def __call__(self, x):
        out = x * 2
        if not torch.cuda.is_current_stream_capturing():
            torch._assert_async((out - (x + x)).abs().amax() == 0)
        return out


# -- GD303: replays that disagree with each other -------------------------------------------------


class TrainingDropout:
    """Dropout left in training mode: every replay draws a new mask."""

    def __call__(self, x):  # hazard: GD303
        return torch.nn.functional.dropout(x, p=0.25, training=True)


class InferenceDropout:
    def __call__(self, x):
        return torch.nn.functional.dropout(x, p=0.25, training=False) * 1.0


# -- GD304: the graph reads freed memory ----------------------------------------------------------


class PrefetchedWeight:
    """5a98cc6: weights converted for the graph outside it and then dropped: replay read freed memory."""

    def __init__(self) -> None:
        self.weight = torch.linspace(0.5, 1.5, N, device="cuda", dtype=torch.bfloat16)
        self.next_weight = self.weight.float()

    def __call__(self, x):
        weight = self.next_weight
        out = x * weight  # hazard: GD304
        self.next_weight = self.weight.float()  # prefetch for the next step; the one read above is freed
        return out


class KeptWeight:
    def __init__(self) -> None:
        self.weight = torch.linspace(0.5, 1.5, N, device="cuda", dtype=torch.bfloat16)
        self.weight_fp32 = self.weight.float()

    def __call__(self, x):
        return x * self.weight_fp32


# -- GD307: pointers that nothing the unit owns keeps alive ----------------------------------------


class CachedRotaryTable:
    """A table from an lru_cache: the cache, not the layer, keeps it alive; a new length evicts it."""

    @staticmethod
    @functools.lru_cache(maxsize=1)
    def table(n: int, device: torch.device) -> torch.Tensor:
        return torch.cos(torch.arange(n, device=device) * 0.01)  # hazard: GD307

    def __call__(self, x):
        return x * self.table(x.numel(), x.device)


class OwnedRotaryTable:
    def __init__(self) -> None:
        self.table = torch.cos(torch.arange(N, device="cuda") * 0.01)

    def __call__(self, x):
        return x * self.table


class DroppedScratch:
    """A scratch buffer replaced after each step: the graph writes into the one it captured, now freed.

    The graph's own output stays right (it reads back what it wrote), so only the pointer shows it.
    """

    def __init__(self) -> None:
        self.scratch = torch.empty(N, device="cuda")

    def __call__(self, x):
        scratch = self.scratch
        torch.mul(x, 2.0, out=scratch)
        out = scratch + 1.0
        self.scratch = torch.empty(N, device="cuda")  # hazard: GD307
        return out


class KeptScratch:
    def __init__(self) -> None:
        self.scratch = torch.empty(N, device="cuda")

    def __call__(self, x):
        torch.mul(x, 2.0, out=self.scratch)
        return self.scratch + 1.0


ROWS = 16


def _rows(seed: int) -> tuple[torch.Tensor]:
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(ROWS, N, device="cuda", generator=generator),)


class LinearThenTriton:
    """cuBLAS (a GEMM with its workspace) then a Triton kernel: every pointer has an owner, none is flagged."""

    def __init__(self, kernels) -> None:
        generator = torch.Generator(device="cuda").manual_seed(7)
        self.kernels = kernels
        self.weight = torch.randn(N, N, device="cuda", generator=generator) / 32
        self.bias = torch.randn(N, device="cuda", generator=generator)
        self.out = torch.empty(ROWS, N, device="cuda")

    def warm(self) -> None:  # creates the cuBLAS handle and compiles the kernel, as an engine's warm-up does
        self(torch.zeros(ROWS, N, device="cuda"))

    def __call__(self, x):
        hidden = torch.nn.functional.linear(x, self.weight, self.bias)
        self.kernels.double_on_current_stream(hidden, self.out)
        return self.out


# -- GD308: a kept output overwritten by the next replay -------------------------------------------


class DriftMonitor:
    """An engine loop that keeps the previous step's output to measure how far each step moves it."""

    def __init__(self) -> None:
        self.scale = torch.linspace(0.5, 1.5, N, device="cuda")

    def __call__(self, x):
        return torch.tanh(x * self.scale)

    @staticmethod
    def loop(step, steps):
        previous = step(*_vector(100))
        drift = torch.zeros((), device="cuda")
        for k in range(1, steps):
            current = step(*_vector(100 + k))
            drift = drift + (current - previous).abs().sum()  # hazard: GD308
            previous = current
        return drift


class CopiedDriftMonitor(DriftMonitor):
    @staticmethod
    def loop(step, steps):
        previous = step(*_vector(100)).clone()
        drift = torch.zeros((), device="cuda")
        for k in range(1, steps):
            current = step(*_vector(100 + k))
            drift = drift + (current - previous).abs().sum()
            previous = current.clone()
        return drift


# -- capture keys: one unit at several batch sizes -------------------------------------------------


def _batch(seed: int, key: int) -> tuple[torch.Tensor]:
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(key, N, device="cuda", generator=generator),)


class BatchCompaction:
    """Decode at several batch sizes; above four sequences the step drops rows with a boolean mask."""

    def __call__(self, x):
        if x.shape[0] > 4:
            x = x[x[:, 0] > -10.0]  # hazard: GD101, GD201
        return x.sum(0)


# -- GD401 / GD402: memory -------------------------------------------------------------------------


class GrowingCache:
    """P3: compressed KV appended with torch.cat every step grew without bound."""

    def __init__(self) -> None:
        self.cache = torch.zeros(0, KV_DIM, device="cuda")

    def __call__(self, x):
        self.cache = torch.cat([self.cache, x[:KV_DIM][None]])  # hazard: GD401
        return self.cache.sum(0)


class RingCache:
    def __init__(self) -> None:
        self.cache = torch.zeros(KV_SLOTS, KV_DIM, device="cuda")
        self.position = torch.zeros(1, dtype=torch.int64, device="cuda")

    def __call__(self, x):
        self.cache.index_copy_(0, self.position, x[:KV_DIM][None])
        self.position.add_(1).remainder_(KV_SLOTS)
        return self.cache.sum(0)


WIDE_ROWS = 16384  # 16384 x 1024 fp32 = 64 MiB


class WideTemporary:
    """e7766254: GEMM outputs allocated per call inside the capture."""

    def __init__(self) -> None:
        self.scales = torch.linspace(0.0, 1.0, WIDE_ROWS, device="cuda")

    def __call__(self, x):
        table = torch.outer(self.scales, x)  # hazard: GD402
        return table[0] + table[-1]


class WidePreallocated:
    def __init__(self) -> None:
        self.scales = torch.linspace(0.0, 1.0, WIDE_ROWS, device="cuda")
        self.table = torch.empty(WIDE_ROWS, N, device="cuda")

    def __call__(self, x):
        torch.outer(self.scales, x, out=self.table)
        return self.table[0] + self.table[-1]


# -- GD501: streams and devices --------------------------------------------------------------------


class DefaultStreamNorm:
    """Work pinned to the default stream (where the log's eager attention ran) escapes the capture stream."""

    def __call__(self, x):
        with torch.cuda.stream(torch.cuda.default_stream(x.device)):
            y = torch.nn.functional.layer_norm(x, (N,))  # hazard: GD501
        return y


class CurrentStreamNorm:
    def __call__(self, x):
        return torch.nn.functional.layer_norm(x, (N,))


# -- GD305: state re-bound instead of written in place (issue 11) ----------------------------------


class ReboundBias:
    """A bias refreshed by re-binding the attribute: the graph keeps reading the storage it captured."""

    def __init__(self) -> None:
        self.bias = torch.zeros(N, device="cuda")

    def __call__(self, x):
        out = x + self.bias
        self.bias = torch.tanh(out) * 0.5  # hazard: GD305
        return out


class CopiedBias:
    def __init__(self) -> None:
        self.bias = torch.zeros(N, device="cuda")

    def __call__(self, x):
        out = x + self.bias
        self.bias.copy_(torch.tanh(out) * 0.5)
        return out


# -- GD306: state the unit does not declare (issue 11: HF StaticCache's counter) --------------------


class UndeclaredCounter:
    """A ring cache whose write position is state too; the unit declares only the cache."""

    def __init__(self) -> None:
        self.cache = torch.zeros(KV_SLOTS, KV_DIM, device="cuda")
        self.position = torch.zeros(1, dtype=torch.int64, device="cuda")
        self.slot_weights = torch.linspace(1.0, 2.0, KV_SLOTS, device="cuda")

    def __call__(self, x):
        self.cache.index_copy_(0, self.position, x[:KV_DIM][None])
        self.position.add_(1).remainder_(KV_SLOTS)  # hazard: GD306
        return (self.cache * self.slot_weights[:, None]).sum(0)


# -- GD101 / GD201 in an extension library: CuPy (issue 11) ------------------------------------------


def cupy_available() -> bool:
    return importlib.util.find_spec("cupy") is not None


class CupyDeviceSync:
    """A device-wide sync through CuPy: torch's sync debug mode never hears of it."""

    def __init__(self) -> None:
        import cupy

        self.cupy = cupy

    def __call__(self, x):
        y = x * 2.0
        self.cupy.cuda.runtime.deviceSynchronize()  # hazard: GD101, GD201
        return y + 1.0


class CupyDeviceQuery:
    def __init__(self) -> None:
        import cupy

        self.cupy = cupy

    def __call__(self, x):
        y = x * 2.0
        self.cupy.cuda.runtime.getDevice()  # a host-side query: nothing waits for the GPU
        return y + 1.0


# -- GD203: first-call work inside a capture with no warm-up --------------------------------------


class LazyScratch:
    """A scratch buffer made on the first call (`if self.buf is None`): with no warm-up, inside the capture."""

    def __init__(self) -> None:
        self.scratch = None

    def __call__(self, x):
        if self.scratch is None:
            self.scratch = torch.empty_like(x)  # hazard: GD203
        torch.mul(x, 2.0, out=self.scratch)
        return self.scratch + 1.0


TRITON_BLOCK = 128


class ColdTritonScale:
    """A Triton kernel whose first launch is inside the capture: it compiles and loads there."""

    def __init__(self, kernels) -> None:
        self.kernels = kernels
        self.out = torch.empty(N, device="cuda")

    def __call__(self, x):
        self.kernels.scale_cold[(N // TRITON_BLOCK,)](x, self.out, BLOCK=TRITON_BLOCK)  # hazard: GD203
        return self.out


class WarmTritonScale:
    def __init__(self, kernels) -> None:
        self.kernels = kernels
        self.out = torch.empty(N, device="cuda")

    def warm(self) -> None:
        self(torch.zeros(N, device="cuda"))

    def __call__(self, x):
        self.kernels.scale_warm[(N // TRITON_BLOCK,)](x, self.out, BLOCK=TRITON_BLOCK)
        return self.out


class LazyPinnedBias:
    """A host staging buffer pinned on the first call: with no warm-up, inside the capture."""

    def __init__(self) -> None:
        self.bias_source = torch.linspace(-1.0, 1.0, N)
        self.bias_host = None
        self.bias = torch.empty(N, device="cuda")

    def __call__(self, x):
        if self.bias_host is None:
            self.bias_host = self.bias_source.pin_memory()  # hazard: GD203
        self.bias.copy_(self.bias_host, non_blocking=True)
        return x + self.bias


class ColdCompiledActivation:
    """A torch.compile'd module first called inside the capture: Dynamo and Inductor compile there."""

    def __init__(self, activation=torch.nn.GELU) -> None:
        self.act = torch.compile(activation())

    def __call__(self, x):
        return self.act(x) * 2.0  # hazard: GD203


class WarmCompiledActivation(ColdCompiledActivation):
    def __init__(self) -> None:
        super().__init__(torch.nn.SiLU)  # code of its own: Dynamo caches compiles per code object

    def warm(self) -> None:
        self(torch.zeros(N, device="cuda"))


# -- GD601 / GD602: torch.compile(mode="reduce-overhead") units ---------------------------------


class RunningTotal:
    """A compiled step that updates a tensor it was not handed as a buffer: the compiler skips CUDA graphs."""

    def __init__(self) -> None:
        self.total = torch.zeros(N, device="cuda")

    def step(self, x):
        self.total.add_(x)  # hazard: GD601
        return self.total * 2.0


@torch.compiler.disable
def _record_norm(y):
    """A helper hidden from the compiler (what engines do with an op it cannot trace)."""
    return y


class BrokenScale:
    """A compiled step that calls a compiler-disabled helper: the graph breaks there."""

    def __init__(self) -> None:
        self.weight = torch.linspace(0.5, 1.5, N, device="cuda")

    def step(self, x):
        y = x * self.weight
        y = _record_norm(y)  # hazard: GD602
        return y + 1.0


class CompiledScale:
    def __init__(self) -> None:
        self.weight = torch.linspace(0.5, 1.5, N, device="cuda")

    def step(self, x):
        return x * self.weight


def _reduce_overhead(step):
    return torch.compile(step, mode="reduce-overhead")


# -- the targets -----------------------------------------------------------------------------------


def _unit(name: str, fn, make_inputs=_vector, state=None, **options) -> Unit:
    return Unit(name, fn, make_inputs, state=state, **options)


def hazard_units() -> list[Unit]:
    kernels = _escaped_kernel_pair()
    counter, mean, cache, ring = HostStepCounter(), ReplacedRunningMean(), GrowingCache(), RingCache()
    device_counter, inplace_mean = DeviceStepCounter(), InPlaceRunningMean()
    hidden, declared = UndeclaredCounter(), UndeclaredCounter()
    streamless, stream = StreamlessKernel(kernels), StreamKernel(kernels)
    compiled_streamless, compiled_stream = CompiledStreamlessKernel(kernels), CompiledStreamKernel(kernels)
    triton_kernels = _sibling("triton_kernels")
    warm_triton, warm_compiled = WarmTritonScale(triton_kernels), WarmCompiledActivation()
    total = RunningTotal()
    gemm_triton = LinearThenTriton(triton_kernels)
    return [
        _unit("sync_item", PeakNormItem()),
        _unit("clean_sync_item", PeakNormDevice()),
        _unit("sync_bincount", ExpertCountsBincount(), _token_ids),
        _unit("clean_sync_bincount", ExpertCountsScatter(), _token_ids),
        _unit("sync_bool_mask", PositiveSumMask()),
        _unit("clean_sync_bool_mask", PositiveSumWhere()),
        _unit("sync_pageable_copy", PageableBias()),
        _unit("clean_sync_pageable_copy", PinnedBias()),
        _unit("frozen_step_counter", counter),
        _unit("clean_frozen_step_counter", device_counter, state=lambda: (device_counter.step,)),
        _unit("replaced_buffer", mean, state=lambda: (mean.mean,)),
        _unit("clean_replaced_buffer", inplace_mean, state=lambda: (inplace_mean.mean,)),
        _unit("escaped_kernel", streamless, setup=streamless.warm),
        _unit("clean_escaped_kernel", stream, setup=stream.warm),
        _unit("escaped_compiled_kernel", compiled_streamless, setup=compiled_streamless.warm),
        _unit("clean_escaped_compiled_kernel", compiled_stream, setup=compiled_stream.warm),
        _unit("degenerate_capture_path", CaptureFallbackScale()),
        _unit("clean_degenerate_capture_path", CaptureSameScale()),
        _unit("eager_only_check", EagerVerifiedScale()),
        _unit("unstable_dropout", TrainingDropout()),
        _unit("clean_unstable_dropout", InferenceDropout()),
        _unit("freed_prefetch", PrefetchedWeight()),
        _unit("clean_freed_prefetch", KeptWeight()),
        _unit("growing_cache", cache),
        _unit("clean_growing_cache", ring, state=lambda: (ring.cache, ring.position)),
        _unit("capture_alloc", WideTemporary()),
        _unit("clean_capture_alloc", WidePreallocated()),
        _unit("default_stream", DefaultStreamNorm()),
        _unit("clean_default_stream", CurrentStreamNorm()),
        _unit("rebound_attribute", ReboundBias()),
        _unit("clean_rebound_attribute", CopiedBias()),
        _unit("undeclared_counter", hidden, state=lambda: (hidden.cache,)),
        _unit("clean_undeclared_counter", declared, state=lambda: (declared.cache, declared.position)),
        _unit("discovered_counter", UndeclaredCounter()),  # state left out: discovered
        _unit("cached_table", CachedRotaryTable()),
        _unit("clean_cached_table", OwnedRotaryTable()),
        _unit("dropped_scratch", DroppedScratch()),
        _unit("clean_dropped_scratch", KeptScratch()),
        _unit("clean_cublas_triton", gemm_triton, _rows, setup=gemm_triton.warm, atol=1e-4, rtol=1e-4),
        _unit("stale_output", DriftMonitor(), loop=DriftMonitor.loop),
        _unit("clean_stale_output", CopiedDriftMonitor(), loop=CopiedDriftMonitor.loop),
        _unit("keyed_batch", BatchCompaction(), _batch, keys=(1, 8)),
        _unit("silent_sync_pageable", PageableNonBlockingBias()),
        _unit("clean_silent_sync_pageable", PinnedNonBlockingBias()),
        _unit("silent_sync_strided", StridedPinnedColumn()),
        _unit("clean_silent_sync_strided", ContiguousPinnedColumn()),
        _unit("lazy_scratch", LazyScratch()),
        _unit("clean_lazy_scratch", KeptScratch()),  # its scratch is built in __init__, not at the first call
        _unit("lazy_triton", ColdTritonScale(triton_kernels)),
        _unit("clean_lazy_triton", warm_triton, setup=warm_triton.warm),
        _unit("lazy_pinned", LazyPinnedBias()),
        _unit("clean_lazy_pinned", PinnedBias()),
        _unit("lazy_compile", ColdCompiledActivation()),
        _unit("clean_lazy_compile", warm_compiled, setup=warm_compiled.warm),
        _unit("compile_skipped_cudagraphs", _reduce_overhead(total.step), state=lambda: (total.total,)),
        _unit("clean_compile_skipped_cudagraphs", _reduce_overhead(CompiledScale().step)),
        _unit("compile_graph_break", _reduce_overhead(BrokenScale().step)),
        _unit("clean_compile_graph_break", _reduce_overhead(CompiledScale().step)),
    ] + (
        [_unit("cupy_sync", CupyDeviceSync()), _unit("clean_cupy_sync", CupyDeviceQuery())] if cupy_available() else []
    )


def kernel_backend() -> str:
    """Which DSL the GD202 case uses on this machine: 'cutedsl' or 'triton'."""
    return _escaped_kernel_pair().BACKEND
