"""Every tensor a unit's callable can reach, named by the attribute path a user would write.

State discovery (GD306) and the address audit (GD305) both need the tensors a step can touch
without receiving them as inputs: its `self` and closure variables, the globals it names, and
whatever hangs off those (nested modules, lists, dicts, dataclass-like objects). A breadth-first
walk gives each tensor its shortest owner path, e.g. `cache.layers[0].cumulative_length`.

Only object graphs are followed: modules, classes, functions and torch's own handles are leaves.
A weak reference or proxy owns nothing, so it is a leaf too (a dead one cannot even be asked its
type). Types are tested with `type(obj)`, never `isinstance`, and attributes are read with
`object.__getattribute__`, so lazy proxies are not woken up and no `__getattr__` runs; an object
whose members still cannot be listed is a leaf. A container is read up to the walk's budget, so a
huge list costs no more than the budget.
"""

from __future__ import annotations

import functools
import gc
import inspect
import types
import weakref
from collections import deque
from dataclasses import dataclass
from itertools import islice
from typing import Any, Callable, Iterator, Sequence

import torch

MAX_OBJECTS = 200_000  # objects visited per walk, so a huge object graph cannot stall a check
MAX_DEPTH = 16

# A path is a root name followed by steps: ("attr", name) or ("item", key).
Step = tuple[str, Any]

ATOMS = (str, bytes, bytearray, int, float, complex, bool, type(None), range, slice)
_LEAF_TYPES = (
    *ATOMS, type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.CodeType,
    types.FrameType, types.GeneratorType, types.CoroutineType, property, classmethod, staticmethod,
    functools.partial, set, frozenset, weakref.ReferenceType, weakref.ProxyType, weakref.CallableProxyType,
)
# Objects of these modules are bookkeeping, not state (and a logger leads to every logger of the process).
BOOKKEEPING_MODULES = ("weakref", "_weakrefset", "threading", "_thread", "logging", "abc", "enum", "inspect", "typing")
_LEAF_MODULES = ("builtins", *BOOKKEEPING_MODULES)
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


def instance_dict(obj: Any) -> dict:
    """`obj.__dict__` without running its class's `__getattribute__`/`__getattr__`; {} when it has none
    or reading it fails (a dead weak proxy, a property that raises)."""
    try:
        namespace = object.__getattribute__(obj, "__dict__")
    except Exception:
        return {}
    return namespace if issubclass(type(namespace), dict) else {}


def _class_namespace(klass: type) -> Any:
    return type.__dict__["__dict__"].__get__(klass)  # vars(klass), whatever its metaclass defines


def class_attribute(kind: type, name: str) -> Any:
    """`kind.name` as its classes define it (None if none does), without running metaclass code."""
    for klass in kind.__mro__:
        namespace = _class_namespace(klass)
        if name in namespace:
            return namespace[name]
    return None


def attributes(obj: Any) -> Iterator[tuple[str, Any]]:
    """(name, value) of `obj`'s instance attributes and filled slots, read as `instance_dict` reads."""
    namespace = instance_dict(obj)
    for name, value in list(dict.items(namespace)):
        if type(name) is str and not (name.startswith("__") and name.endswith("__")):
            yield name, value
    for klass in type(obj).__mro__[:-1]:
        slots = _class_namespace(klass).get("__slots__", ())
        for name in (slots,) if type(slots) is str else slots if type(slots) in (tuple, list, dict) else ():
            if type(name) is str and name not in namespace and not name.startswith("__"):
                try:
                    yield name, object.__getattribute__(obj, name)
                except Exception:  # an empty slot, or a descriptor that raises
                    continue


def type_module(kind: type) -> str:
    """The module that defines `kind` ("" when it does not say)."""
    try:
        module = type.__dict__["__module__"].__get__(kind)
    except AttributeError:
        return ""
    return module if type(module) is str else ""


def _is_data_global(value: Any) -> bool:
    """A global worth walking: a tensor, a module or a plain data object, not code or a constant."""
    if _is_tensor(value) or issubclass(type(value), torch.nn.Module):
        return True
    return not _is_leaf(type(value)) and not callable(value)


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
        compiled_from = getattr(target, "_torchdynamo_orig_callable", None)
        if compiled_from is not None and compiled_from is not target:  # torch.compile's wrapper: what it compiles
            target = compiled_from
            continue
        if type(target) is functools.partial:
            roots += [(f"args[{i}]", arg) for i, arg in enumerate(target.args)]
            roots += [(name, value) for name, value in target.keywords.items()]
            target = target.func
        elif type(target) is types.MethodType:
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


def _children(obj: Any, limit: int) -> Iterator[tuple[Step, Any]]:
    """The members of `obj` with the step that reaches each; at most `limit` items of a container."""
    kind = type(obj)
    if issubclass(kind, torch.nn.Module):
        namespace = instance_dict(obj)
        for table in ("_parameters", "_buffers", "_modules"):
            members = namespace.get(table)
            for name, value in islice(dict.items(members) if issubclass(type(members), dict) else (), limit):
                if value is not None and type(name) is str:
                    yield (("item", int(name)) if name.isdigit() else ("attr", name)), value
        internals = _module_internals()
        for name, value in attributes(obj):
            if name not in internals:
                yield ("attr", name), value
    elif issubclass(kind, dict):
        for key, value in list(islice(dict.items(obj), limit)):
            if type(key) in (str, int):
                yield ("item", key), value
    elif issubclass(kind, (list, tuple)):
        fields = class_attribute(kind, "_fields")  # a namedtuple: its field names read better
        fields = fields if type(fields) is tuple else None
        items = list.__iter__(obj) if issubclass(kind, list) else tuple.__iter__(obj)
        for i, value in enumerate(list(islice(items, limit))):
            yield (("attr", fields[i]) if fields and i < len(fields) else ("item", i)), value
    elif not type_module(kind).startswith("torch"):
        for name, value in attributes(obj):
            yield ("attr", name), value


def _is_leaf(kind: type) -> bool:
    if issubclass(kind, (dict, list, tuple)):
        return False
    return issubclass(kind, _LEAF_TYPES) or type_module(kind) in _LEAF_MODULES


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
        if len(steps) >= MAX_DEPTH or _is_leaf(type(obj)):
            continue
        try:
            children = list(_children(obj, max_objects - len(seen)))
        except Exception:  # members that cannot be listed (a container changed under us, a raising property)
            continue
        for step, child in children:
            if id(child) not in seen and not issubclass(type(child), ATOMS):
                queue.append((root, steps + (step,), child))
    return found


def reachable_tensors(fn: Callable[..., Any]) -> list[Reached]:
    return walk(roots_of(fn))


def resolve(fn: Callable[..., Any], root: str, steps: tuple[Step, ...]) -> Any:
    """The object at `root` + `steps` now (None when the path no longer leads anywhere)."""
    for name, obj in roots_of(fn):
        if name == root:
            return follow(obj, steps)
    return None


def follow(obj: Any, steps: tuple[Step, ...]) -> Any:
    """The object `steps` lead to from `obj` now (None when the path no longer leads anywhere)."""
    for kind, key in steps:
        try:
            obj = _member(obj, key) if kind == "attr" else _item(obj, key)
        except Exception:  # the path is gone, or the object no longer answers (a dead proxy)
            return None
    return obj


def _member(obj: Any, name: str) -> Any:
    namespace = instance_dict(obj)
    if name in namespace:
        return namespace[name]
    if issubclass(type(obj), torch.nn.Module):
        for table in ("_parameters", "_buffers", "_modules"):
            members = namespace.get(table, {})
            if name in members:
                return members[name]
    if issubclass(type(obj), tuple):  # a namedtuple field
        return tuple.__getitem__(obj, class_attribute(type(obj), "_fields").index(name))
    return object.__getattribute__(obj, name)


def _item(obj: Any, key: Any) -> Any:
    kind = type(obj)
    if issubclass(kind, torch.nn.Module):
        return instance_dict(obj)["_modules"][str(key)]
    for base in (dict, list, tuple):
        if issubclass(kind, base):
            return base.__getitem__(obj, key)
    raise TypeError(f"{kind.__name__} is not a container the walk steps into")


def live_tensors(device: torch.device | None = None) -> list[torch.Tensor]:
    """Every tensor the garbage collector tracks (on `device`, if given): the fallback when nothing
    reachable explains a change. One pass over the heap."""
    tensors = [obj for obj in gc.get_objects() if issubclass(type(obj), torch.Tensor)]
    return tensors if device is None else [t for t in tensors if t.device == device]


def owner_names(tensors: Sequence[torch.Tensor]) -> list[str]:
    """A name for each tensor found without a path: the attribute or container slot that holds it.

    Two passes over the heap whatever the number of tensors (a pass per tensor made naming a
    process's every tensor quadratic in its heap). Records of this module (`Reached`) are no owners.
    """
    if not tensors:
        return []
    wanted = {id(t): t for t in tensors}
    slots: dict[int, list[tuple[dict, str]]] = {}  # tensor id -> (dict holding it, key)
    names: dict[int, str] = {}
    for referrer in gc.get_referrers(*tensors):
        kind = type(referrer)
        if kind is dict:
            if referrer is wanted:
                continue
            for key, value in list(referrer.items()):
                if id(value) in wanted and wanted[id(value)] is value:
                    slots.setdefault(id(value), []).append((referrer, key))
        elif kind not in (list, tuple, Reached) and not issubclass(kind, torch.Tensor):
            for name, value in attributes(referrer):  # a slot
                if id(value) in wanted and wanted[id(value)] is value:
                    names.setdefault(id(value), f"{kind.__name__}.{name}")
    dicts = {id(holder): holder for pairs in slots.values() for holder, _ in pairs}
    owners: dict[int, Any] = {}
    for referrer in gc.get_referrers(*dicts.values()) if dicts else ():
        namespace = instance_dict(referrer)
        if id(namespace) in dicts and namespace is dicts[id(namespace)]:
            owners.setdefault(id(namespace), referrer)
    for tensor_id, pairs in slots.items():
        for holder, key in pairs:
            owner = owners.get(id(holder))
            if type(owner) is Reached:
                continue
            name = f"{type(owner).__name__}.{key}" if owner is not None else f"<dict>[{key!r}]"
            names.setdefault(tensor_id, name)
            break
    return [names.get(id(t)) or f"<tensor {tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}>" for t in tensors]
