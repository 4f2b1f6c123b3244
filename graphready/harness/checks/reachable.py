"""The tensors a unit can reach: what its callables hold, so the pointer audit knows who owns what.

Walked from the unit's callables: bound `self`, closures, defaults, `functools.partial` arguments,
object attributes (`__dict__`, `__slots__`), containers, and the module globals that project code
names (a module-level table is owned by its module). Methods of project classes are walked too,
since `self.helper()` reads the globals `helper` names. What an unbounded `functools.cache` returned
lives as long as the process, so it counts (a model built once by a cached factory); a bounded
`lru_cache` evicts, so what only it holds does not. Code of the standard library and of torch and
the kernel DSLs contributes its closures only: walking torch's globals would reach every tensor.
"""

from __future__ import annotations

import collections
import functools
import gc
import types
from typing import Any, Iterable, Iterator

import torch

from graphready.harness import frames

BUDGET = 200_000  # objects visited at most; a walk that hits it stops (it is a heuristic, not a proof)
_ATOMS = (str, bytes, bytearray, int, float, complex, bool, type(None), range, slice)


def _library_dirs() -> tuple[str, ...]:
    """Where the code lives whose globals are not walked: the harness's own library list, less the
    harness itself (a built-in target such as dsv4 lives under it)."""
    return tuple(d for d in frames._library_dirs() if d != frames._HARNESS_DIR)


def _code_names(code: types.CodeType) -> Iterator[str]:
    yield from code.co_names
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
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
        for value in vars(klass).values():
            value = getattr(value, "__func__", value)  # staticmethod / classmethod
            if isinstance(value, property):
                value = value.fget
            code = getattr(value, "__code__", None)
            if code is not None and frames._is_user_file(code.co_filename, library):
                functions.append(value)
    return tuple(functions)


def _children(obj: Any, library: tuple[str, ...]) -> Iterator[Any]:
    if isinstance(obj, dict):
        yield from obj.values()
        return
    if isinstance(obj, (list, tuple, set, frozenset, collections.deque)):
        yield from obj
        return
    if callable(getattr(obj, "cache_parameters", None)):  # a functools.cache / lru_cache wrapper
        if obj.cache_parameters().get("maxsize") is None:
            yield from gc.get_referents(obj)  # its cache: what it returned, kept for good
        yield getattr(obj, "__wrapped__", None)
        return
    if isinstance(obj, types.MethodType):
        yield obj.__self__
        yield obj.__func__
        return
    if isinstance(obj, types.FunctionType):
        yield from _function_children(obj, library)
        return
    if hasattr(obj, "func") and hasattr(obj, "args") and hasattr(obj, "keywords"):  # functools.partial
        yield obj.func
        yield from obj.args
        yield from obj.keywords.values()
    attributes = getattr(obj, "__dict__", None)
    if isinstance(attributes, dict):
        yield from attributes.values()
    for name in getattr(type(obj), "__slots__", ()):
        try:
            yield object.__getattribute__(obj, name)
        except (AttributeError, TypeError):
            continue
    yield from _class_functions(type(obj), library)


def reachable_tensors(roots: Iterable[Any], budget: int = BUDGET) -> list[torch.Tensor]:
    """Every tensor reachable from `roots` (depth-first, each object once, at most `budget` objects)."""
    library = _library_dirs()
    found: list[torch.Tensor] = []
    seen: set[int] = set()
    stack = list(roots)
    while stack and len(seen) < budget:
        obj = stack.pop()
        if isinstance(obj, _ATOMS) or id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            found.append(obj)
            continue
        if isinstance(obj, (types.ModuleType, type)):
            continue
        try:
            stack.extend(_children(obj, library))
        except Exception:  # an object whose attributes cannot be listed: a leaf
            continue
    return found
