"""Resolve a target spec (`pkg.mod:factory` or `path/to/file.py:factory`) into its units.

Built-in targets (`dsv4`, `hf`) are factories under `graphready.harness.targets`. A factory that takes a
`gpus` argument places one model over that many GPUs (`check --gpus N` hands it N, and one worker
sees them all); any other factory's units each fit one GPU, and `--gpus N` runs N workers side by side.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from typing import Any, Callable

from graphready.errors import UsageError
from graphready.harness.unit import Unit

BUILTIN_TARGETS = {"dsv4": "graphready.harness.targets.dsv4:factory", "hf": "graphready.harness.targets.hf:factory"}


class TargetError(UsageError):
    """The target cannot be imported, is not a factory, or returns something other than units."""


def split_spec(spec: str) -> tuple[str, str]:
    spec = BUILTIN_TARGETS.get(spec, spec)
    module_part, sep, attr = spec.rpartition(":")
    if not sep or not module_part or not attr:
        raise TargetError(f"target {spec!r} must look like 'pkg.module:factory' or 'file.py:factory'")
    return module_part, attr


def _import_file(path: Path):
    if not path.is_file():
        raise TargetError(f"target file {path} does not exist")
    name = "graphready_target_" + "_".join(path.resolve().with_suffix("").parts[-3:])
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_factory(spec: str) -> Callable[..., Any]:
    module_part, attr = split_spec(spec)
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        if module_part.endswith(".py") or "/" in module_part:
            module = _import_file(Path(module_part))
        else:
            module = importlib.import_module(module_part)
    except TargetError:
        raise
    except ImportError as exc:
        raise TargetError(f"cannot import target module {module_part!r}: {exc}") from None
    factory = getattr(module, attr, None)
    if factory is None:
        raise TargetError(f"target module {module_part!r} has no attribute {attr!r}")
    if not callable(factory):
        raise TargetError(f"target {spec!r} is not callable")
    return factory


def _takes(factory: Callable[..., Any], argument: str) -> bool:
    try:
        return argument in inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False


def spans_gpus(factory: Callable[..., Any]) -> bool:
    """The factory places its model over several GPUs: it takes a `gpus` argument."""
    return _takes(factory, "gpus")


def load_units(spec: str, factory_kwargs: dict[str, Any] | None = None, gpus: int | None = None,
               only: list[str] | None = None) -> list[Unit]:
    """Call the target's factory and validate what it returns: a non-empty list of uniquely named units.

    `gpus` reaches the factory only when it takes that argument (see `spans_gpus`); so does `only`, the
    names of the units a worker will check, so that a factory of many models builds just theirs.
    """
    factory = load_factory(spec)
    kwargs = dict(factory_kwargs or {})
    if gpus is not None and spans_gpus(factory):
        kwargs["gpus"] = gpus
    if only is not None and _takes(factory, "only"):
        kwargs["only"] = list(only)
    units = factory(**kwargs)
    if isinstance(units, Unit):
        units = [units]
    if not isinstance(units, (list, tuple)) or not units:
        raise TargetError(f"target {spec!r} must return a non-empty list of graphready.harness.Unit")
    for unit in units:
        if not isinstance(unit, Unit):
            raise TargetError(f"target {spec!r} returned {type(unit).__name__}, expected Unit")
    units = [keyed for unit in units for keyed in unit.expand()]  # one unit per capture key
    seen: set[str] = set()
    for unit in units:
        if unit.name in seen:
            raise TargetError(f"target {spec!r} returned two units named {unit.name!r}")
        seen.add(unit.name)
        unit.origin = spec
    return list(units)


def select_unit(units: list[Unit], name: str) -> Unit:
    for unit in units:
        if unit.name == name:
            return unit
    names = ", ".join(u.name for u in units)
    raise TargetError(f"no unit named {name!r} (available: {names})")
