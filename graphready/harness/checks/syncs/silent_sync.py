"""GD102 silent-sync: `non_blocking=True` copies between host and GPU that still block the CPU.

`cudaMemcpyAsync` from or to pageable host memory is synchronous with respect to the host, and
torch stages a copy whose host side is not contiguous (or must be broadcast) through a fresh
pageable tensor. Torch issues no explicit synchronize for a `non_blocking` copy, so
`set_sync_debug_mode` never reports either case. This check watches every copy at the dispatcher
(`aten._to_copy`, `aten.copy_`) during the sync step, where `.to()`, `.cuda()`, `copy_()` and copies
issued from C++ code all arrive with their final arguments and the host tensor can be inspected.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from graphready.harness.blame import call_user
from graphready.harness.frames import Location, current_user_frame


@dataclass(frozen=True)
class Side:
    """What decides whether one side of a host/GPU copy can be asynchronous."""

    device_type: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    dtype: Any
    pinned: bool

    @property
    def contiguous(self) -> bool:
        expected = 1
        for size, stride in reversed(list(zip(self.shape, self.strides))):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True

    @property
    def dense(self) -> bool:
        """Non-overlapping and dense: a permutation of a contiguous layout."""
        dims = sorted((stride, size) for size, stride in zip(self.shape, self.strides) if size != 1)
        expected = 1
        for stride, size in dims:
            if stride != expected:
                return False
            expected *= size
        return True


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, expected = [], 1
    for size in reversed(shape):
        strides.append(expected)
        expected *= max(size, 1)
    return tuple(reversed(strides))


def _direct(src: Side, dst: Side) -> bool:
    """Torch copies these with one cudaMemcpyAsync between the two tensors' own memory."""
    return src.dtype == dst.dtype and src.shape == dst.shape and src.strides == dst.strides and src.dense


def silent_sync_reason(src: Side, dst: Side) -> str | None:
    """Why a `non_blocking=True` copy from `src` to `dst` blocks the CPU, or None when it does not."""
    if src.device_type == "cpu" and dst.device_type == "cuda":
        host_used_as_is = _direct(src, dst) or (src.contiguous and src.shape == dst.shape)
        if not host_used_as_is:
            return "the host tensor is not contiguous (or is broadcast), so torch stages it through a pageable copy"
        return None if src.pinned else "the host tensor is pageable (not pinned)"
    if src.device_type == "cuda" and dst.device_type == "cpu":
        if not (_direct(src, dst) or dst.contiguous):
            return "the host destination is not contiguous, so torch copies through a pageable temporary"
        return None if dst.pinned else "the host destination is pageable (not pinned)"
    return None


def _side(t: torch.Tensor) -> Side:
    pinned = t.device.type == "cpu" and t.is_pinned()
    return Side(t.device.type, tuple(t.shape), tuple(t.stride()), t.dtype, pinned)


def _to_copy_destination(src: torch.Tensor, kwargs: dict) -> Side | None:
    device = kwargs.get("device")
    if device is None:
        return None
    device = torch.device(device)
    keeps_strides = kwargs.get("memory_format") in (None, torch.preserve_format) and _side(src).dense
    strides = tuple(src.stride()) if keeps_strides else contiguous_strides(tuple(src.shape))
    pinned = device.type == "cpu" and src.device.type == "cuda"  # torch pins a non-blocking GPU->CPU result itself
    return Side(device.type, tuple(src.shape), strides, kwargs.get("dtype") or src.dtype, pinned)


def copy_reason(op: str, args: tuple, kwargs: dict) -> str | None:
    """The silent sync a dispatched copy op causes, or None (also for every op that is not a copy)."""
    if op == "_to_copy":
        if not kwargs.get("non_blocking") or not args or not isinstance(args[0], torch.Tensor):
            return None
        destination = _to_copy_destination(args[0], kwargs)
        return None if destination is None else silent_sync_reason(_side(args[0]), destination)
    if op == "copy_":
        non_blocking = args[2] if len(args) > 2 else kwargs.get("non_blocking", False)
        if not non_blocking or len(args) < 2 or not all(isinstance(a, torch.Tensor) for a in args[:2]):
            return None
        return silent_sync_reason(_side(args[1]), _side(args[0]))
    return None


class SilentCopyWatch(TorchDispatchMode):
    """Records, per user line, each non-blocking copy that blocks the CPU."""

    def __init__(self, root: Path | None = None) -> None:
        super().__init__()
        self.root = root
        self.found: dict[Location | None, list[str]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        op = getattr(getattr(func, "overloadpacket", None), "__name__", "")
        if op in ("_to_copy", "copy_"):
            reason = copy_reason(op, tuple(args), kwargs)
            if reason is not None:
                self.found.setdefault(current_user_frame(self.root), []).append(reason)
        return call_user(func, *args, **kwargs)

    def run(self, step: Callable[[], Any]) -> Any:
        with self:
            return step()


def silent_sync_message(reasons: list[str]) -> str:
    times = "once" if len(reasons) == 1 else f"{len(reasons)} times"
    return (
        f"a non_blocking=True copy blocks the CPU ({times} per step at this line): {reasons[0]}; "
        "set_sync_debug_mode does not report it. Copy from a pinned, contiguous host buffer "
        "(`pin_memory()` once, outside the step)"
    )
