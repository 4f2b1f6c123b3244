"""What GD309 watches while the unit's own code runs: a replay preparation's writes, a step's indices.

`PrepTrace` records one `pad_inputs` call: every tensor an op wrote (a mutable argument of the op's
schema: `copy_`, `fill_`, `_foreach_copy_`, `out=`) and every tensor an op returned (a slice is a
view op), each with the user line that ran it. A graph input whose padded rows keep another batch's
values is then traced to the write that refreshed its head and the slice that chose those rows.

`IndexUse` runs one eager step on tagged inputs, carrying the tags to every tensor computed from
them; a tagged tensor handed to an op as its `index`/`indices` argument marks the input it came
from as an index: its rows pick memory to read or write, so a stale row reads or writes somewhere
else, not just a padded row's own result.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

from graphready.harness.blame import call_user
from graphready.harness.frames import Location, current_user_frame
from graphready.harness.tracer import storage_key, tensors_in, written_tensors

_TAG = "_graphready_input"
_INDEX_ARGUMENTS = ("index", "indices")

Geometry = tuple[int, int, tuple[int, ...], tuple[int, ...]]  # storage address, offset, shape, strides


@dataclass(frozen=True)
class Span:
    """The bytes of one storage a tensor view covers, first to last element."""

    storage: int
    start: int
    end: int

    def overlaps(self, other: "Span") -> bool:
        return self.storage == other.storage and self.start < other.end and other.start < self.end

    def covers(self, other: "Span") -> bool:
        return self.storage == other.storage and self.start <= other.start and other.end <= self.end


def span(t: torch.Tensor) -> Span | None:
    key = storage_key(t)
    if key is None or t.numel() == 0:
        return None
    size = t.element_size()
    last = sum((n - 1) * stride for n, stride in zip(t.shape, t.stride()))
    start = t.storage_offset() * size
    return Span(key[0], start, start + (last + 1) * size)


def geometry(t: torch.Tensor) -> Geometry | None:
    key = storage_key(t)
    return None if key is None else (key[0], t.storage_offset(), tuple(t.shape), tuple(t.stride()))


@dataclass(frozen=True)
class Write:
    span: Span
    geometry: Geometry
    location: Location | None


class PrepTrace(TorchDispatchMode):
    """Writes and results of one replay preparation, each at the user line that made it."""

    def __init__(self, root: Path | None = None) -> None:
        super().__init__()
        self.root = root
        self.writes: list[Write] = []
        self.made: dict[Geometry, Location | None] = {}  # a tensor's geometry -> the line of the last op returning it

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = call_user(func, *args, **kwargs)
        location = current_user_frame(self.root)
        targets = set()
        for tensor in written_tensors(func, args, kwargs):
            where, shape = span(tensor), geometry(tensor)
            if where is not None and shape is not None:
                self.writes.append(Write(where, shape, location))
                targets.add(shape)
        for tensor in tensors_in(out):
            shape = geometry(tensor)
            if shape is not None and shape not in targets:  # an in-place op returns what it wrote: no new view
                self.made[shape] = location
        return out

    def made_at(self, t: torch.Tensor) -> Location | None:
        """The line whose op returned exactly this view (a slice, a `torch.cat`), if one did."""
        shape = geometry(t)
        return None if shape is None else self.made.get(shape)

    def refresh(self, head: Span) -> Location | None:
        """Where the last write into `head` chose its rows: the slice that made the written view, else the write."""
        for write in reversed(self.writes):
            if write.span.overlaps(head):
                return self.made.get(write.geometry) or write.location
        return None

    def resets(self, pads: list[Span]) -> list[Location]:
        """The lines whose writes covered one of `pads` (the padded rows of another input): the pad branch."""
        lines: list[Location] = []
        for write in self.writes:
            if write.location is not None and write.location not in lines and any(write.span.covers(p) for p in pads):
                lines.append(write.location)
        return lines


class IndexUse(TorchDispatchMode):
    """Which of a step's input tensors (by position among its tensors) reach an op's index argument."""

    def __init__(self, root: Path | None = None) -> None:
        super().__init__()
        self.root = root
        self.used: dict[int, Location | None] = {}  # input position -> the first line that indexes with it

    @staticmethod
    def tagged(inputs: Any) -> Any:
        """`inputs` with every tensor replaced by an alias tagged with its position among the tensors."""
        position = iter(range(len(tensors_in(inputs))))

        def tag(leaf: Any) -> Any:
            if not isinstance(leaf, torch.Tensor):
                return leaf
            alias = leaf.detach()
            setattr(alias, _TAG, frozenset((next(position),)))
            return alias

        return tree_map(tag, inputs)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        leaves = [leaf for leaf in tree_leaves((args, kwargs)) if isinstance(leaf, torch.Tensor)]
        tags = frozenset().union(*(getattr(leaf, _TAG, frozenset()) for leaf in leaves))
        if tags:
            for position, argument in enumerate(func._schema.arguments):
                if argument.name not in _INDEX_ARGUMENTS:
                    continue
                value = kwargs.get(argument.name) if argument.kwarg_only or position >= len(args) else args[position]
                for tensor in tensors_in(value):
                    for index in getattr(tensor, _TAG, ()):
                        self.used.setdefault(index, current_user_frame(self.root))
        out = call_user(func, *args, **kwargs)
        if tags:
            for tensor in tensors_in(out):
                if not any(tensor is leaf for leaf in leaves):  # an in-place op returns its input: leave it untagged
                    setattr(tensor, _TAG, tags | getattr(tensor, _TAG, frozenset()))
        return out


def index_inputs(step: Callable[..., Any], inputs: tuple, root: Path | None = None) -> dict[int, Location | None]:
    """Run `step` once on tagged aliases of `inputs`: which inputs it indexes with, and where first."""
    use = IndexUse(root)
    aliases = IndexUse.tagged(inputs)
    with use:
        step(aliases)
    return use.used
