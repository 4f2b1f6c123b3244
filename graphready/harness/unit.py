"""The public unit contract: what a user hands to `graphready check` for one step of work."""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable


@dataclass
class Unit:
    """One graph-capturable step: a layer, a decode step, a sampler.

    `fn(*inputs)` runs the step and returns a tensor or a tuple of tensors. `make_inputs(seed)`
    returns fresh tensors of fixed shapes (different seeds, different values); it runs again after
    capture, as an engine prepares every step's inputs, so what it re-binds is seen (GD305).
    `state()` returns the tensors `fn` mutates (KV cache, counters) so eager and replay start from
    the same state; left out (None), it is discovered: every tensor `fn` can reach that a step
    changes in place.
    `device` pins the unit to one GPU (`"cuda:1"`); None means the GPU the harness assigns.
    `atol`/`rtol` bound the replay-vs-eager difference (0 means bitwise equal).
    `setup()` builds what `fn` needs (a model): a worker calls the setup of every unit it will
    check once, before the first check, and reports that time as its load; cache the build so
    units of one target share it. `reaches` lists code `fn` runs that a static call graph cannot
    follow (callables dispatched through a table), for `graphready check --changed-since`.
    `keys` lists capture keys (batch sizes, padded lengths): each key is checked as a unit of its
    own, named `name[key]`, with inputs from `make_inputs(seed, key=key)`. `loop(step, steps)` runs
    `steps` consecutive steps the way the caller's engine loop does, calling `step(*inputs)` for
    each, and returns tensors to compare: the harness runs it eager and graphed (GD308).
    With integer `keys` (captured batch sizes), each graph captured for K is also replayed for a
    real batch of b < K rows padded to K and compared with `fn` run eager on those b rows (GD309);
    `make_inputs(seed, key=b)` makes that real batch (a unit whose make_inputs cannot is noted, unless
    it declares `pad_inputs`, which makes it a contract). `pad_inputs(inputs, key)` is the
    engine's replay preparation: given `make_inputs(seed, key=b)` (a real batch), it returns what
    the graph captured for `key` replays with (the structure and shapes of `make_inputs(seed,
    key=key)`), padded as the engine pads, typically views of its persistent buffers, which keep
    what earlier calls wrote. With it, the state the padded replay leaves is compared too; declare a
    `state()` without the reserved slot padded rows write to (`kv[1:]` when padding writes slot 0).
    Without it, the harness writes the b real rows over the head of the graph's inputs and leaves
    the rest as the previous replay (a full batch of K rows) left them; only outputs are compared.
    `key` is set by `expand()`: the capture key a per-key unit stands for.
    `host_state()` returns objects whose plain Python attributes (numbers, flags, None) the step
    advances outside any tensor (a cache layer's position counter): every restore of the state puts
    them back as they were when the state was taken. Declare it for a unit whose calls are right
    with the counter advancing (torch.compile guards the Python value), so that two calls from the
    same state are compared; a unit the harness captures leaves it out, since the value the graph
    froze at capture is the hazard its replay check reports (GD301).
    """

    name: str
    fn: Callable[..., Any]
    make_inputs: Callable[[int], tuple]
    state: Callable[[], Any] | None = None
    device: Any = None
    atol: float = 0.0
    rtol: float = 0.0
    setup: Callable[[], Any] | None = None
    reaches: tuple[Callable[..., Any], ...] = ()
    keys: tuple[Any, ...] = ()
    loop: Callable[[Callable[..., Any], int], Any] | None = None
    pad_inputs: Callable[[tuple, Any], Any] | None = None
    key: Any = None
    host_state: Callable[[], Any] | None = None
    origin: str | None = field(default=None, compare=False)  # target spec that built it, if any

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError("Unit name must be a non-empty string")
        if not callable(self.fn):
            raise TypeError(f"unit {self.name!r}: fn must be callable")
        if not callable(self.make_inputs):
            raise TypeError(f"unit {self.name!r}: make_inputs must be callable")
        if self.state is not None and not callable(self.state):
            raise TypeError(f"unit {self.name!r}: state must be callable or None")
        if self.setup is not None and not callable(self.setup):
            raise TypeError(f"unit {self.name!r}: setup must be callable or None")
        if self.host_state is not None and not callable(self.host_state):
            raise TypeError(f"unit {self.name!r}: host_state must be callable or None")
        self.reaches = tuple(self.reaches)
        if not all(callable(code) for code in self.reaches):
            raise TypeError(f"unit {self.name!r}: reaches must hold callables")
        if self.atol < 0 or self.rtol < 0:
            raise ValueError(f"unit {self.name!r}: atol and rtol must be >= 0")
        if self.loop is not None and not callable(self.loop):
            raise TypeError(f"unit {self.name!r}: loop must be callable or None")
        self.keys = tuple(self.keys)
        if self.pad_inputs is not None:
            _check_pad_inputs(self)
        labels = [str(key) for key in self.keys]
        if len(set(labels)) != len(labels) or any(not label or set(label) & set("[]") for label in labels):
            raise ValueError(f"unit {self.name!r}: keys must print distinct, non-empty and without brackets")

    def expand(self) -> list["Unit"]:
        """One unit per capture key (`name[key]`), or this unit alone when it declares none."""
        return [
            replace(self, name=f"{self.name}[{key}]", make_inputs=functools.partial(self.make_inputs, key=key),
                    keys=(), key=key)
            for key in self.keys
        ] or [self]

    def device_label(self) -> str | None:
        return None if self.device is None else str(self.device)


def padded_key(key: Any) -> bool:
    """A capture key a graph can be replayed padded for: an integer batch size of at least 2."""
    return type(key) is int and key >= 2


def _check_pad_inputs(unit: Unit) -> None:
    if not callable(unit.pad_inputs):
        raise TypeError(f"unit {unit.name!r}: pad_inputs must be callable or None")
    keys = unit.keys or ((unit.key,) if unit.key is not None else ())
    if not keys:
        raise ValueError(f"unit {unit.name!r}: pad_inputs needs capture keys (the batch sizes graphs are captured for)")
    if not all(type(key) is int and key >= 1 for key in keys):
        raise ValueError(f"unit {unit.name!r}: pad_inputs needs integer keys >= 1 (captured batch sizes), "
                         f"got {keys!r}")


def callable_location(fn: Callable[..., Any]) -> tuple[str, int]:
    """(file, first line) of the code behind `fn`: plain functions, methods, partials, modules.

    Findings with no better anchor (a crash, an escaped kernel) point here.
    """
    target = fn
    for _ in range(8):
        if isinstance(target, functools.partial):
            target = target.func
            continue
        if inspect.ismethod(target) or inspect.isfunction(target):
            break
        forward = getattr(target, "forward", None)  # torch.nn.Module instances
        target = forward if forward is not None else type(target).__call__
    target = inspect.unwrap(getattr(target, "__func__", target))
    code = getattr(target, "__code__", None)
    if code is None:
        return ("<unknown>", 0)
    return (str(Path(code.co_filename)), code.co_firstlineno)
