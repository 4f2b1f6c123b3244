"""An aten-level op tracer: runs every op of a step and records what the checks need to explain it.

During a capture it finds the first op that raised or invalidated the capture (the CUDA error
names neither), which lines took memory from the graph pool, which ops ran on the default stream
or another device, and which memory each op read. During an eager step it records the same op
sequence so a replay mismatch can be traced to the op whose Python scalars or buffers changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from graphready.harness.blame import call_user
from graphready.harness.frames import Location, current_user_frame


@dataclass
class OpRecord:
    op: str
    location: Location | None
    tokens: tuple  # what the op consumed: ("scalar", v) | ("ext", key) | ("int", producer index)
    reads: tuple[tuple[int, int], ...]  # (storage address, nbytes) of tensors made outside the step


@dataclass
class OpFailure:
    op: str
    location: Location | None
    error: str | None  # exception text; None when the op silently invalidated the capture


@dataclass
class Issue:
    location: Location | None
    message: str


def storage_key(t: torch.Tensor) -> tuple[int, int] | None:
    try:
        storage = t.untyped_storage()
        return (storage.data_ptr(), storage.nbytes())
    except (RuntimeError, NotImplementedError):  # sparse, nested and other storage-less tensors
        return None


def tensors_in(value: Any) -> list[torch.Tensor]:
    return [leaf for leaf in tree_leaves(value) if isinstance(leaf, torch.Tensor)]


def allocated_bytes(device: torch.device) -> tuple[int, int]:
    """(current, peak) bytes allocated on `device`, in one read of the allocator's nested statistics:
    `memory_allocated` flattens every statistic first (~0.4 ms), and the tracer asks twice per op."""
    stats = torch.cuda.memory_stats_as_nested_dict(device).get("allocated_bytes", {}).get("all", {})
    return stats.get("current", 0), stats.get("peak", 0)


def written_tensors(func, args: tuple, kwargs: dict) -> Iterator[torch.Tensor]:
    """The tensors an aten op writes into: its schema's mutable arguments (lists included)."""
    schema = getattr(func, "_schema", None)
    for position, argument in enumerate(schema.arguments if schema is not None else ()):
        if argument.alias_info is None or not argument.alias_info.is_write:
            continue
        value = kwargs.get(argument.name) if argument.kwarg_only or position >= len(args) else args[position]
        yield from tensors_in(value)


class OpTracer(TorchDispatchMode):
    """Trace one step. `capture_stream` set means the step is being captured on that stream."""

    def __init__(
        self,
        device: torch.device,
        *,
        named_storages: dict[int, str] | None = None,
        capture_stream: torch.cuda.Stream | None = None,
        root: Path | None = None,
    ) -> None:
        super().__init__()
        self.device = device
        self.capture_stream = capture_stream
        self.root = root
        self.named = dict(named_storages or {})  # storage address -> "input0" / "state1"
        self.records: list[OpRecord] = []
        self.producers: dict[int, int] = {}  # storage address -> index of the op that made it
        self.failure: OpFailure | None = None
        self.alloc_by_line: dict[Location | None, int] = {}  # bytes each line's ops took at their peak
        self.peak_allocated = 0  # the highest allocated bytes seen while tracing (GPU only)
        self.device_issues: list[Issue] = []
        self.replaced_state: list[tuple[int, int]] = []  # (state index, new address), set after capture
        self._seen_issue_lines: set[tuple[Location | None, str]] = set()

    # -- helpers -------------------------------------------------------------------------------
    def _capturing(self) -> bool:
        current = torch.cuda.current_stream(self.device)
        if current == self.capture_stream:
            return torch.cuda.is_current_stream_capturing()
        with torch.cuda.stream(self.capture_stream):
            return torch.cuda.is_current_stream_capturing()

    def _issue(self, location: Location | None, kind: str, message: str) -> None:
        key = (location, kind)
        if key not in self._seen_issue_lines:
            self._seen_issue_lines.add(key)
            self.device_issues.append(Issue(location, message))

    def _check_device_and_stream(self, op: str, tensors: list[torch.Tensor], loc: Location | None) -> None:
        for t in tensors:
            if t.device.type == "cuda" and t.device.index != self.device.index:
                self._issue(loc, "device", f"{op} uses a tensor on {t.device} while the unit runs on {self.device}")
                break
        if self.capture_stream is None:
            return
        if torch.cuda.current_device() != self.device.index:
            self._issue(
                loc,
                "current-device",
                f"{op} was issued while cuda:{torch.cuda.current_device()} is the current device; "
                f"the capture stream belongs to {self.device}",
            )
        elif torch.cuda.current_stream(self.device) == torch.cuda.default_stream(self.device):
            self._issue(loc, "default-stream", f"{op} was issued on the default stream during capture")

    def _tokens(self, values: list[Any]) -> tuple[tuple, tuple[tuple[int, int], ...]]:
        tokens: list[tuple] = []
        reads: list[tuple[int, int]] = []
        for value in values:
            if isinstance(value, torch.Tensor):
                if value.device.type == "cpu" and value.numel() == 1:
                    tokens.append(("scalar", value.item()))
                    continue
                key = storage_key(value)
                if key is None:
                    continue
                address, nbytes = key
                if address in self.producers:
                    tokens.append(("int", self.producers[address]))
                else:
                    tokens.append(("ext", self.named.get(address, address)))
                    reads.append((address, nbytes))
            elif isinstance(value, (bool, int, float)):
                tokens.append(("scalar", value))
        return tuple(tokens), tuple(reads)

    # -- the dispatch hook -----------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        op = str(func.overloadpacket.__name__) if hasattr(func, "overloadpacket") else str(func)
        loc = current_user_frame(self.root)
        leaves = tree_leaves((args, kwargs))
        inputs = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
        self._check_device_and_stream(op, inputs, loc)
        target = kwargs.get("device")  # a copy to another GPU fails inside capture before it has outputs
        if isinstance(target, torch.device) and target.type == "cuda" and target.index not in (None, self.device.index):
            self._issue(loc, "device", f"{op} copies to {target} while the unit runs on {self.device}")
        tokens, reads = self._tokens(leaves)
        on_gpu = self.device.type == "cuda"
        if on_gpu:  # the op's own peak, temporaries and workspaces included
            torch.cuda.reset_peak_memory_stats(self.device)
            before = allocated_bytes(self.device)[0]
        try:
            out = call_user(func, *args, **kwargs)  # the user's op: what it raises is the unit's
        except Exception as exc:
            if self.failure is None:
                self.failure = OpFailure(op, loc, f"{type(exc).__name__}: {exc}")
            raise
        if self.capture_stream is not None and self.failure is None and not self._capturing():
            self.failure = OpFailure(op, loc, None)
        if on_gpu:
            peak = allocated_bytes(self.device)[1]
            self.peak_allocated = max(self.peak_allocated, peak)
            if peak > before:
                self.alloc_by_line[loc] = self.alloc_by_line.get(loc, 0) + peak - before
        index = len(self.records)
        self.records.append(OpRecord(op, loc, tokens, reads))
        outputs = tensors_in(out)
        self._check_device_and_stream(op, outputs, loc)
        for t in outputs:
            key = storage_key(t)
            if key is not None and key[0] not in self.named:
                self.producers[key[0]] = index  # the latest producer: the allocator reuses addresses
        return out

    def producer_location(self, address: int) -> Location | None:
        index = self.producers.get(address)
        return None if index is None else self.records[index].location


def first_divergence(captured: list[OpRecord], eager: list[OpRecord]) -> tuple[OpRecord, str] | None:
    """The first op whose inputs differ between the captured trace and a later eager trace.

    A Python scalar that changed is frozen into the graph; a buffer from outside the step that
    changed is one the graph keeps reading at its captured address.
    """
    for cap, now in zip(captured, eager):
        if cap.op != now.op:
            return cap, f"the captured step ran {cap.op} where the eager step runs {now.op} (host control flow)"
        if cap.tokens == now.tokens:
            continue
        for old, new in zip(cap.tokens, now.tokens):
            if old == new:
                continue
            if old[0] == "scalar" and new[0] == "scalar":
                return cap, f"{cap.op} got the Python value {new[1]!r} now; the graph froze {old[1]!r} at capture"
            return cap, f"{cap.op} reads a different buffer than when captured; the graph keeps the old one"
        return cap, f"{cap.op} was called with different arguments than at capture"
    return None
