"""Every tensor a unit's callable can reach, named by the attribute path a user would write.

State discovery (GD306) and the address audit (GD305) both need the tensors a step can touch
without receiving them as inputs: its `self` and closure variables, the globals it names, and
whatever hangs off those (nested modules, lists, dicts, dataclass-like objects). A breadth-first
walk gives each tensor its shortest owner path, e.g. `cache.layers[0].cumulative_length`.

Only object graphs are followed: modules, classes, functions and torch's own handles are leaves.
Types are tested with `type(obj)`, never `isinstance`, so lazy proxies are not woken up.
"""

from __future__ import annotations

import functools
import gc
import inspect
import types
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

MAX_OBJECTS = 200_000  # objects visited per walk, so a huge object graph cannot stall a check
MAX_DEPTH = 16

# A path is a root name followed by steps: ("attr", name) or ("item", key).
Step = tuple[str, Any]

_LEAF_TYPES = (
    str, bytes, bytearray, int, float, complex, bool, type(None), range, slice, type,
    types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.CodeType,
    types.FrameType, types.GeneratorType, types.CoroutineType, property, classmethod, staticmethod,
    functools.partial, set, frozenset,
)
_LEAF_MODULES = ("builtins", "weakref", "threading", "_thread", "logging", "abc", "enum")
_MODULE_INTERNALS: frozenset[str] | None = None


@dataclass(frozen=True)
class Reached:
    """One tensor and the path it was reached by."""

    root: str
    steps: tuple[Step, ...]
    tensor: torch.Tensor

    @property
    def path(self) -> str:
        return format_path(self.root, self.steps)


def format_path(root: str, steps: tuple[Step, ...]) -> str:
    text = root
    for kind, key in steps:
        text += f".{key}" if kind == "attr" else f"[{key!r}]"
    return text


def _is_tensor(obj: Any) -> bool:
    return issubclass(type(obj), torch.Tensor)


def _is_data_global(value: Any) -> bool:
    """A global worth walking: a tensor, a module or a plain data object, not code or a constant."""
    if _is_tensor(value) or issubclass(type(value), torch.nn.Module):
        return True
    return not _is_leaf(value) and not callable(value)


def _function_roots(function: types.FunctionType, prefix: str = "") -> list[tuple[str, Any]]:
    roots: list[tuple[str, Any]] = []
    code = function.__code__
    for name, cell in zip(code.co_freevars, function.__closure__ or ()):
        try:
            roots.append((prefix + name, cell.cell_contents))
        except ValueError:  # an empty cell: the variable is not bound yet
            continue
    parameters = code.co_varnames[: code.co_argcount]
    for name, value in zip(parameters[len(parameters) - len(function.__defaults__ or ()):], function.__defaults__ or ()):
        roots.append((prefix + name, value))
    roots += [(prefix + name, value) for name, value in (function.__kwdefaults__ or {}).items()]
    names = set(code.co_names)
    for const in code.co_consts:  # names used inside nested functions and comprehensions
        if type(const) is types.CodeType:
            names.update(const.co_names)
    module_globals = function.__globals__
    for name in sorted(names):
        if name in module_globals and _is_data_global(module_globals[name]):
            roots.append((prefix + name, module_globals[name]))
    return roots


def roots_of(fn: Callable[..., Any]) -> list[tuple[str, Any]]:
    """The objects a callable carries with it, by the name its code uses for them."""
    roots: list[tuple[str, Any]] = []
    target: Any = fn
    for _ in range(8):
        if type(target) is functools.partial:
            roots += [(f"args[{i}]", arg) for i, arg in enumerate(target.args)]
            roots += [(name, value) for name, value in target.keywords.items()]
            target = target.func
        elif inspect.ismethod(target):
            roots.append(("self", target.__self__))
            target = target.__func__
        elif type(target) is types.FunctionType:
            wrapped = inspect.unwrap(target)
            roots += _function_roots(target)
            if wrapped is not target:
                roots += _function_roots(wrapped)
            break
        else:  # a callable object (an nn.Module, a class with __call__): its attributes are its state
            roots.append(("self", target))
            break
    return roots


def _module_internals() -> frozenset[str]:
    """Attribute names every nn.Module has (hooks, flags): bookkeeping, not the user's state."""
    global _MODULE_INTERNALS
    if _MODULE_INTERNALS is None:
        _MODULE_INTERNALS = frozenset(vars(torch.nn.Module()))
    return _MODULE_INTERNALS


def _attributes(obj: Any) -> Iterator[tuple[str, Any]]:
    try:
        namespace = vars(obj)
    except TypeError:
        namespace = {}
    for name, value in list(namespace.items()):
        if type(name) is str and not (name.startswith("__") and name.endswith("__")):
            yield name, value
    for klass in type(obj).__mro__[:-1]:
        slots = vars(klass).get("__slots__", ())
        for name in (slots,) if type(slots) is str else slots:
            if type(name) is str and name not in namespace and not name.startswith("__"):
                try:
                    yield name, object.__getattribute__(obj, name)
                except AttributeError:
                    continue


def _children(obj: Any) -> Iterator[tuple[Step, Any]]:
    kind = type(obj)
    if issubclass(kind, torch.nn.Module):
        for table in ("_parameters", "_buffers", "_modules"):
            for name, value in vars(obj).get(table, {}).items():
                if value is not None:
                    yield (("item", int(name)) if name.isdigit() else ("attr", name)), value
        internals = _module_internals()
        for name, value in _attributes(obj):
            if name not in internals:
                yield ("attr", name), value
    elif issubclass(kind, dict):
        for key, value in list(obj.items()):
            if type(key) in (str, int):
                yield ("item", key), value
    elif issubclass(kind, (list, tuple)):
        fields = getattr(kind, "_fields", None)  # a namedtuple: its field names read better
        for i, value in enumerate(list(obj)):
            yield (("attr", fields[i]) if fields and i < len(fields) else ("item", i)), value
    elif not kind.__module__.startswith("torch") or issubclass(kind, torch.nn.Module):
        for name, value in _attributes(obj):
            yield ("attr", name), value


def _is_leaf(obj: Any) -> bool:
    kind = type(obj)
    if issubclass(kind, (dict, list, tuple)):
        return False
    return issubclass(kind, _LEAF_TYPES) or kind.__module__ in _LEAF_MODULES


def walk(roots: list[tuple[str, Any]], max_objects: int = MAX_OBJECTS) -> list[Reached]:
    """Breadth-first over the roots' object graph: each tensor once, by its shortest path."""
    found: list[Reached] = []
    seen: set[int] = set()
    queue: deque[tuple[str, tuple[Step, ...], Any]] = deque((name, (), obj) for name, obj in roots)
    while queue and len(seen) < max_objects:
        root, steps, obj = queue.popleft()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if _is_tensor(obj):
            found.append(Reached(root, steps, obj))
            continue
        if len(steps) >= MAX_DEPTH or _is_leaf(obj):
            continue
        for step, child in _children(obj):
            if id(child) not in seen:
                queue.append((root, steps + (step,), child))
    return found


def reachable_tensors(fn: Callable[..., Any]) -> list[Reached]:
    return walk(roots_of(fn))


def resolve(fn: Callable[..., Any], root: str, steps: tuple[Step, ...]) -> Any:
    """The object at `root` + `steps` now (None when the path no longer leads anywhere)."""
    for name, obj in roots_of(fn):
        if name == root:
            break
    else:
        return None
    for kind, key in steps:
        try:
            if kind == "attr":
                obj = vars(obj)[key] if key in getattr(obj, "__dict__", {}) else _module_member(obj, key)
            else:
                obj = obj[key] if not issubclass(type(obj), torch.nn.Module) else vars(obj)["_modules"][str(key)]
        except (KeyError, IndexError, TypeError, AttributeError):
            return None
    return obj


def _module_member(obj: Any, name: str) -> Any:
    if issubclass(type(obj), torch.nn.Module):
        for table in ("_parameters", "_buffers", "_modules"):
            members = vars(obj).get(table, {})
            if name in members:
                return members[name]
    if type(obj) is tuple or issubclass(type(obj), tuple):  # a namedtuple field
        return obj[type(obj)._fields.index(name)]
    return object.__getattribute__(obj, name)


def live_tensors() -> list[torch.Tensor]:
    """Every tensor the garbage collector tracks: the fallback when nothing reachable explains a change."""
    return [obj for obj in gc.get_objects() if issubclass(type(obj), torch.Tensor)]


def owner_name(tensor: torch.Tensor) -> str:
    """A name for a tensor found without a path: the attribute or container slot that holds it."""
    for referrer in gc.get_referrers(tensor):
        if type(referrer) is dict:
            key = next((k for k, v in referrer.items() if v is tensor), None)
            if key is None:
                continue
            owner = next((o for o in gc.get_referrers(referrer) if getattr(o, "__dict__", None) is referrer), None)
            return f"{type(owner).__name__}.{key}" if owner is not None else f"<dict>[{key!r}]"
        if type(referrer) in (list, tuple):
            continue
        if hasattr(referrer, "__dict__"):
            for name, value in _attributes(referrer):
                if value is tensor:
                    return f"{type(referrer).__name__}.{name}"
    return f"<tensor {tuple(tensor.shape)} {str(tensor.dtype).removeprefix('torch.')}>"
