"""The tensors a unit can reach: what its callables hold, so the pointer audit knows who owns what.

Walked from the unit's callables: bound `self`, closures, defaults, `functools.partial` arguments,
object attributes (`__dict__`, `__slots__`), containers, and the module globals that project code
names (a module-level table is owned by its module). Methods of project classes are walked too,
since `self.helper()` reads the globals `helper` names. What an unbounded `functools.cache` returned
lives as long as the process, so it counts (a model built once by a cached factory); a bounded
`lru_cache` evicts, so what only it holds does not. Code of the standard library and of torch and
the kernel DSLs contributes its closures only: walking torch's globals would reach every tensor.

A weak reference or proxy keeps nothing alive, so it is a leaf, and so are loggers, locks and
the like (`reach.BOOKKEEPING_MODULES`: a logger leads to every logger of the process). Objects are
read as `graphready.harness.reach` reads them: by `type()`, without running their `__getattr__`,
and an object whose members cannot be listed is a leaf, so a dead proxy held by a kernel DSL's
runtime cannot stop the audit.
"""

from __future__ import annotations

import collections
import functools
import gc
import types
import weakref
from collections import deque
from itertools import islice
from typing import Any, Iterable, Iterator

import torch

from graphready.harness import frames
from graphready.harness.reach import ATOMS, BOOKKEEPING_MODULES, attributes, instance_dict, type_module

BUDGET = 200_000  # objects visited at most; a walk that hits it stops (it is a heuristic, not a proof)
_LEAVES = (type, types.ModuleType, types.CodeType, types.FrameType, weakref.ReferenceType, weakref.ProxyType,
           weakref.CallableProxyType)
_CONTAINERS = (dict, list, tuple, set, frozenset, collections.deque)
_CACHE_WRAPPER = type(functools.lru_cache(maxsize=None)(lambda: None))


def _library_dirs() -> tuple[str, ...]:
    """Where the code lives whose globals are not walked: the harness's own library list, less the
    harness itself (a built-in target such as dsv4 lives under it)."""
    return tuple(d for d in frames._library_dirs() if d != frames._HARNESS_DIR)


def _code_names(code: types.CodeType) -> Iterator[str]:
    yield from code.co_names
    for const in code.co_consts:
        if type(const) is types.CodeType:
            yield from _code_names(const)


def _function_children(fn: types.FunctionType, library: tuple[str, ...]) -> Iterator[Any]:
    for cell in fn.__closure__ or ():
        try:
            yield cell.cell_contents
        except ValueError:  # an empty cell
            continue
    yield from fn.__defaults__ or ()
    yield from (fn.__kwdefaults__ or {}).values()
    if frames._is_user_file(fn.__code__.co_filename, library):
        names = fn.__globals__
        for name in set(_code_names(fn.__code__)):
            if name in names:
                yield names[name]


@functools.lru_cache(maxsize=1024)
def _class_functions(cls: type, library: tuple[str, ...]) -> tuple[Any, ...]:
    """The project functions a class and its bases define (methods, properties, static methods)."""
    functions = []
    for klass in cls.__mro__:
        for value in list(type.__dict__["__dict__"].__get__(klass).values()):
            if type(value) in (staticmethod, classmethod):
                value = value.__func__
            elif type(value) is property:
                value = value.fget
            if type(value) is types.FunctionType and frames._is_user_file(value.__code__.co_filename, library):
                functions.append(value)
    return tuple(functions)


def _items(obj: Any, kind: type, limit: int) -> Iterator[Any]:
    """A container's values through its base type (a subclass's own `__iter__` or `values` is not run)."""
    if issubclass(kind, dict):
        return islice(dict.values(obj), limit)
    base = next(base for base in _CONTAINERS if issubclass(kind, base))
    return islice(base.__iter__(obj), limit)


def _children(obj: Any, kind: type, library: tuple[str, ...], limit: int) -> Iterator[Any]:
    if issubclass(kind, _CONTAINERS):
        yield from _items(obj, kind, limit)
        return
    if kind is _CACHE_WRAPPER:  # functools.cache / lru_cache
        if obj.cache_parameters().get("maxsize") is None:
            namespace = instance_dict(obj)
            for referent in gc.get_referents(obj):  # its cache: what it returned, kept for good
                if type(referent) is dict and referent is not namespace:
                    yield from islice(referent.values(), limit)
        yield instance_dict(obj).get("__wrapped__")
        return
    if kind is types.MethodType:
        yield obj.__self__
        yield obj.__func__
        return
    if kind is types.FunctionType:
        yield from _function_children(obj, library)
        return
    if issubclass(kind, functools.partial):
        yield obj.func
        yield from obj.args
        yield from obj.keywords.values()
    for _, value in attributes(obj):
        yield value
    yield from _class_functions(kind, library)


def _is_leaf(kind: type) -> bool:
    if issubclass(kind, _CONTAINERS):
        return False
    return issubclass(kind, _LEAVES) or type_module(kind) in BOOKKEEPING_MODULES


def reachable_tensors(roots: Iterable[Any], budget: int = BUDGET) -> list[torch.Tensor]:
    """Every tensor reachable from `roots` (breadth-first, each object once, at most `budget` objects).

    Breadth-first, so what the unit holds directly (a model's weights) is reached before whatever a
    long chain of globals leads to, should the budget run out."""
    library = _library_dirs()
    found: list[torch.Tensor] = []
    seen: set[int] = set()
    queue = deque(roots)
    while queue and len(seen) < budget:
        obj = queue.popleft()
        kind = type(obj)
        if issubclass(kind, ATOMS) or id(obj) in seen:
            continue
        seen.add(id(obj))
        if issubclass(kind, torch.Tensor):
            found.append(obj)
            continue
        if _is_leaf(kind):
            continue
        try:
            queue.extend(list(_children(obj, kind, library, budget - len(seen))))
        except Exception:  # an object whose members cannot be listed: a leaf
            continue
    return found
