"""Hooks that see first-call work while a capture runs, each located at the user line.

- Triton: the JIT cache-miss hook (`triton.knobs.runtime.jit_cache_hook`, or
  `JITFunction.cache_hook` before Triton 3.4) fires on every compile of a `@triton.jit` kernel;
  `CompiledKernel._init_handles` loads a compiled kernel's CUDA module on its first launch.
- CuTeDSL: `cutlass.cute.compile`, wrapped while the window is open (only when the target already
  imported `cutlass.cute`; importing it here would cost seconds for nothing).
- torch.compile: Dynamo's compile-start callback (`torch._dynamo.callback_handler`).
- Host memory: `Tensor.pin_memory`, `cudaHostRegister` through `torch.cuda.cudart()`, and the
  caching host allocator's handout counter for pinning that has no Python call (`pin_memory=True`
  factories), located at the unit's callable.

Each hook records and then calls what it replaced; everything is restored on exit.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable

import torch

from graphready.harness.blame import call_user
from graphready.harness.checks.cold.lazy_report import Work, describe_bytes
from graphready.harness.checks.user_code import stack_location
from graphready.harness.frames import Location


class _RecordingCall:
    """Stands in for a callable (also one indexed like `cute.compile[options]`), recording each call."""

    def __init__(self, original: Any, record: Callable[[Any], None]) -> None:
        self._original = original
        self._record = record

    def __call__(self, *args, **kwargs):
        self._record(args[0] if args else None)
        return call_user(self._original, *args, **kwargs)

    def __getitem__(self, key):
        return _RecordingCall(self._original[key], self._record)

    def __getattr__(self, name: str):
        return getattr(self._original, name)


def _name(obj: Any) -> str:
    return str(getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or getattr(obj, "name", None) or obj)


def _pinned_handouts() -> int | None:
    stats = getattr(torch.cuda, "host_memory_stats", None)
    if stats is None:
        return None
    try:
        values = stats()
    except Exception:  # an older torch, or no CUDA context yet
        return None
    for key in ("active_requests.allocated", "allocations.allocated", "num_host_alloc"):
        if key in values:
            return int(values[key])
    return None


class FirstCallHooks:
    """`with FirstCallHooks(root, fallback) as hooks:` ... `hooks.work` lists what ran, in order."""

    def __init__(self, root: Path | None, fallback: Location) -> None:
        self.root = root
        self.fallback = fallback
        self.work: list[Work] = []
        self._undo: list[Callable[[], None]] = []
        self._pins_seen = 0
        self._handouts: int | None = None

    def record(self, kind: str, detail: str) -> None:
        self.work.append(Work(kind, detail, stack_location(self.root)))

    def __enter__(self) -> "FirstCallHooks":
        for install in (self._triton_compile, self._triton_load, self._cute, self._dynamo, self._pinning):
            try:
                install()
            except Exception:  # a runtime laid out differently: that hook stays off, the others work
                continue
        self._handouts = _pinned_handouts()
        return self

    def __exit__(self, *exc) -> None:
        after = _pinned_handouts()
        if self._handouts is not None and after is not None and after - self._handouts > self._pins_seen:
            blocks = after - self._handouts - self._pins_seen
            self.work.append(Work("pinned-alloc", f"{blocks} block(s)", self.fallback))
        while self._undo:
            self._undo.pop()()

    def _set(self, owner: Any, name: str, value: Any) -> None:
        had_own = name in vars(owner)
        previous = vars(owner).get(name)
        setattr(owner, name, value)
        self._undo.append(lambda: setattr(owner, name, previous) if had_own else delattr(owner, name))

    # -- Triton ------------------------------------------------------------------------------------
    def _triton_compile(self) -> None:
        triton = sys.modules.get("triton")
        if triton is None:
            return  # a process that never imported Triton launches no Triton kernel
        knobs = getattr(triton, "knobs", None)
        owner, name = (knobs.runtime, "jit_cache_hook") if knobs is not None else (None, "cache_hook")
        if owner is None:
            from triton.runtime.jit import JITFunction

            owner = JITFunction
        previous = getattr(owner, name, None)

        def hook(*args, **kwargs):
            self.record("triton-compile", _name(kwargs.get("fn")))
            return previous(*args, **kwargs) if previous is not None else False

        setattr(owner, name, hook)
        self._undo.append(lambda: setattr(owner, name, previous))

    def _triton_load(self) -> None:
        compiler = sys.modules.get("triton.compiler.compiler")
        kernel_class = getattr(compiler, "CompiledKernel", None)
        original = getattr(kernel_class, "_init_handles", None)
        if original is None:
            return

        def init_handles(kernel, *args, **kwargs):
            state = vars(kernel)
            if state.get("module", state.get("cu_module")) is None:
                self.record("triton-load", _name(state.get("name") or getattr(kernel, "fn", None)))
            return original(kernel, *args, **kwargs)

        self._set(kernel_class, "_init_handles", init_handles)

    # -- CuTeDSL and torch.compile ------------------------------------------------------------------
    def _cute(self) -> None:
        cute = sys.modules.get("cutlass.cute")
        if cute is None or not callable(getattr(cute, "compile", None)):
            return
        original = cute.compile
        cute.compile = _RecordingCall(original, lambda fn: self.record("cute-compile", _name(fn)))
        self._undo.append(lambda: setattr(cute, "compile", original))

    def _dynamo(self) -> None:
        dynamo = sys.modules.get("torch._dynamo")
        handler = getattr(dynamo, "callback_handler", None)
        if handler is None:
            return

        def on_start(args) -> None:
            self.record("torch-compile", str(getattr(args, "compile_id", "")) or "of a frame")

        handler.register_start_callback(on_start)
        self._undo.append(lambda: handler.remove_start_callback(on_start))  # registered: its pair exists too

    # -- host memory ---------------------------------------------------------------------------------
    def _pinning(self) -> None:
        original = torch.Tensor.pin_memory

        def pin_memory(tensor, *args, **kwargs):
            self._pins_seen += 1
            self.record("pin-memory", f"{tuple(tensor.shape)} {str(tensor.dtype).replace('torch.', '')}")
            return original(tensor, *args, **kwargs)

        self._set(torch.Tensor, "pin_memory", pin_memory)
        cudart = torch.cuda.cudart()
        register = getattr(cudart, "cudaHostRegister", None)
        if register is not None:

            def host_register(pointer, size, flags, *rest):
                self.record("host-register", describe_bytes(int(size)))
                return register(pointer, size, flags, *rest)

            self._set(cudart, "cudaHostRegister", host_register)

