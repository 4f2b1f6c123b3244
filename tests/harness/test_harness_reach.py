"""The object walks (state discovery's `reach`, the pointer audit's `reachable`) on hostile objects.

A unit's objects are whatever its libraries made: kernel DSL runtimes holding weak proxies to
arguments long gone, lazy configs whose `__getattr__` raises, C-extension handles, tables of a
million entries. Each walk must skip what it cannot read, keep what it can, and never raise.
"""

from __future__ import annotations

import array
import itertools
import re
import threading
import time
import weakref

import torch

from graphready.harness import reach
from graphready.harness.checks.pointers import reachable


class Holder:
    def __init__(self) -> None:
        self.weight = torch.ones(3)


class CompiledKernel:
    """The CuTe DSL idiom: a compiled function keeps weak proxies to the arguments it was compiled
    with (`dynamic_args`) and a weak proxy to itself for its default executor."""

    def __init__(self, *args: Holder) -> None:
        self.dynamic_args = [weakref.proxy(arg) for arg in args]
        self.executor = weakref.proxy(self)
        self.workspace = torch.zeros(2)


class LazyConfig:
    """Every attribute it does not have raises something other than AttributeError."""

    def __init__(self) -> None:
        self.scale = torch.full((2,), 2.0)

    def __getattr__(self, name):
        raise RuntimeError(f"{name} is not loaded yet")


class Guarded:
    """Reading anything at all raises (a remote handle, a closed session)."""

    def __getattribute__(self, name):
        raise ConnectionError("closed")


class BadDict:
    """`__dict__` itself raises, and so does `__class__` (isinstance asks it)."""

    @property
    def __dict__(self):
        raise RuntimeError("no namespace")

    @property
    def __class__(self):
        raise RuntimeError("no class")


class LazyMapping(dict):
    """A dict subclass whose views run code (transformers' lazy auto-mappings import on access)."""

    def items(self):
        raise ImportError("lazy module")

    def values(self):
        raise ImportError("lazy module")

    def __iter__(self):
        raise ImportError("lazy module")


def _dead_proxy() -> weakref.ProxyType:
    gone = Holder()
    proxy = weakref.proxy(gone)
    del gone
    return proxy


def _walks(fn) -> tuple[set[int], set[int]]:
    """Ids of the tensors each walk finds from `fn`: (reach, pointer audit's reachable)."""
    return {id(r.tensor) for r in reach.reachable_tensors(fn)}, {id(t) for t in reachable.reachable_tensors([fn])}


class Step(torch.nn.Module):
    def __init__(self, *extra) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(2, 2)
        self.extra = list(extra)

    def forward(self, x):
        return self.proj(x)


def test_dead_weak_proxies_are_skipped_and_the_rest_is_found():
    kernel = CompiledKernel(Holder())  # the argument dies at once: dynamic_args holds a dead proxy
    step = Step(kernel, _dead_proxy())
    for found in _walks(step.forward):
        assert {id(step.proj.weight), id(step.proj.bias), id(kernel.workspace)} <= found


def test_a_weak_reference_owns_nothing_so_the_walk_does_not_follow_it():
    holder = Holder()
    step = Step(weakref.proxy(holder), weakref.ref(holder))
    for found in _walks(step.forward):
        assert id(holder.weight) not in found and id(step.proj.weight) in found


def test_objects_whose_attribute_access_raises_are_leaves_or_read_directly():
    config = LazyConfig()
    guarded = Guarded()
    bad = BadDict()
    table = LazyMapping(bias=torch.zeros(2))

    def step(x):
        return x * config.scale + table["bias"] + len([guarded, bad])

    assert "scale" not in dir(type(config))  # only its instance dict knows `scale`
    for found in _walks(step):
        assert {id(config.scale), id(dict.__getitem__(table, "bias"))} <= found


def test_c_extension_objects_are_leaves():
    weight = torch.ones(2)
    handles = [re.compile("x+"), array.array("f", [1.0]), memoryview(b"ab"), torch.Generator(), itertools.count(),
               threading.Lock(), weakref.WeakValueDictionary(), weight]

    def step(x):
        return x + handles[-1]

    for found in _walks(step):
        assert found == {id(weight)}


def test_huge_containers_cost_no_more_than_the_budget():
    weight = torch.ones(2)
    numbers = list(range(3_000_000))
    table = {i: float(i) for i in range(500_000)}
    many = [torch.zeros(1) for _ in range(5_000)]

    def step(x):
        return x + weight + len(numbers) + len(table) + len(many)

    started = time.perf_counter()
    found_reach, found_audit = _walks(step)
    assert time.perf_counter() - started < 10
    assert id(weight) in found_reach and id(weight) in found_audit
    assert len(reach.walk([("many", many)], max_objects=100)) < 100
    assert len(reachable.reachable_tensors([many], budget=100)) < 100


def test_a_path_through_a_proxy_that_died_resolves_to_nothing():
    step = Step(_dead_proxy())
    assert reach.resolve(step.forward, "self", (("attr", "extra"), ("item", 0), ("attr", "weight"))) is None
    assert reach.resolve(step.forward, "self", (("attr", "proj"), ("attr", "weight"))) is step.proj.weight


class RecurrentCache:
    """A recurrent layer's state kept in dicts, as HF's linear-attention cache layers keep theirs."""

    def __init__(self) -> None:
        self.conv_states = {0: torch.zeros(1, 4, 3)}
        self.recurrent_states = {0: torch.zeros(1, 2, 2)}

    def step(self, x: torch.Tensor) -> torch.Tensor:
        self.conv_states[0].add_(x.sum())
        return x + self.conv_states[0].sum()


def test_a_torch_compiled_step_reaches_the_state_of_the_code_it_compiles():
    """torch.compile's wrapper is a function of its own: the walk goes through it to the original, so a
    compiled unit's state is discovered (and restored between its calls) like the plain step's. Before, it
    reached nothing, and recurrent state nobody restored made two compiled calls differ (HF's hybrids)."""
    cache = RecurrentCache()
    compiled = torch.compile(cache.step, backend="eager")
    plain = {(item.path, id(item.tensor)) for item in reach.reachable_tensors(cache.step)}
    assert len(plain) == 2 and {(item.path, id(item.tensor)) for item in reach.reachable_tensors(compiled)} == plain
