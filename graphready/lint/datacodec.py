"""Dataclasses to JSON-able data and back, checked against their type hints on the way in.

The cache stores module indexes and rule hits as plain JSON rather than pickle: reading a cache
file must never run code, and a file of the wrong shape (planted, truncated, written by another
version) must be recognised and dropped rather than half-used. The field types themselves are
the schema, so a field added to an index class needs no codec change.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from pathlib import Path
from typing import Any


class ShapeError(ValueError):
    """Data that does not have the shape its type hints promise."""


_REQUIRED = object()


@functools.cache
def _defaults(cls: type) -> tuple[tuple[str, Any], ...]:
    """Each field of a dataclass and its default value (`_REQUIRED` if it has none)."""
    return tuple((f.name, f.default if f.default is not dataclasses.MISSING
                  else f.default_factory() if f.default_factory is not dataclasses.MISSING else _REQUIRED)
                 for f in dataclasses.fields(cls))


_PLAIN = frozenset({str, int, float, bool, type(None)})


@functools.cache
def _is_dataclass(kind: type) -> bool:
    return dataclasses.is_dataclass(kind)


def encode(value: Any) -> Any:
    """Fields left at their default are left out (decoding fills them in): most of an index's call sites
    and functions are defaults, and every field written is a field checked on a warm run. The exact types met
    most come first (an index is hundreds of thousands of values: the generic tests were most of encoding it)."""
    kind = type(value)
    if kind in _PLAIN:
        return value
    if kind is list or kind is tuple:
        return [encode(v) for v in value]
    if _is_dataclass(kind):
        encoded = {}
        for name, default in _defaults(kind):
            field = getattr(value, name)
            if default is _REQUIRED or type(field) is not type(default) or field != default:
                encoded[name] = encode(field)
        return encoded
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(encode(v) for v in value)
    if isinstance(value, dict):
        return {key: encode(v) for key, v in value.items()}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    return value


def decode(hint: Any, data: Any) -> Any:
    """`data` as an instance of `hint`, or ShapeError."""
    return _decoder(hint)(data)


@functools.cache
def _decoder(hint: Any):
    """A function checking and building one type, made once per type hint (decoding is hot on warm runs)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return _union([_decoder(a) for a in args if a is not type(None)], type(None) in args, hint)
    if dataclasses.is_dataclass(hint):
        return _dataclass(hint)
    if origin in (list, set, frozenset):
        return _sequence(origin, _decoder(args[0]), hint)
    if origin is tuple:
        return _tuple([_decoder(a) for a in args], hint)
    if origin is dict:
        return _mapping(_decoder(args[0]), _decoder(args[1]), hint)
    if hint in (str, int, float, bool):
        return _scalar(hint)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _enum(hint)
    if hint is Path:
        return lambda data: Path(_scalar(str)(data))
    if hint in (dict, list):  # untyped JSON (a summary's counts): any value JSON holds is data
        return _scalar(hint)
    raise ShapeError(f"no decoder for {hint}")


def _scalar(kind: type):
    def check(data):
        if type(data) is not kind:
            raise ShapeError(f"{data!r:.40} is not {kind.__name__}")
        return data
    check.kind = kind  # lets containers of scalars check their items in one pass
    return check


def _enum(kind: type[enum.Enum]):
    def check(data):
        try:
            return kind(data)
        except ValueError:
            raise ShapeError(f"{data!r:.40} is no {kind.__name__}") from None
    return check


def _union(options, optional: bool, hint):
    def check(data):
        if data is None and optional:
            return None
        for option in options:
            try:
                return option(data)
            except ShapeError:
                continue
        raise ShapeError(f"{data!r:.40} is none of {hint}")
    return check


def _sequence(kind: type, item, hint):
    scalar = getattr(item, "kind", None)

    def check(data):
        if type(data) is not list:
            raise ShapeError(f"{hint} must be a list")
        if scalar is not None and all(type(v) is scalar for v in data):
            return kind(data)
        return kind([item(v) for v in data])
    return check


def _tuple(items, hint):
    kinds = [getattr(item, "kind", None) for item in items]
    scalars = tuple(kinds) if None not in kinds else None

    def check(data):
        if type(data) is not list or len(data) != len(items):
            raise ShapeError(f"{hint} must be a list of {len(items)}")
        if scalars is not None and all(type(v) is k for v, k in zip(data, scalars)):
            return tuple(data)
        return tuple(item(v) for item, v in zip(items, data))
    return check


def _mapping(key, value, hint):
    def check(data):
        if type(data) is not dict:
            raise ShapeError(f"{hint} must be an object")
        return {key(k): value(v) for k, v in data.items()}
    return check


def _dataclass(cls: type):
    decoders: dict[str, Any] = {}  # filled on first use: the class may refer to itself
    required: set[str] = set()

    def check(data):
        if type(data) is not dict:
            raise ShapeError(f"{cls.__name__} must be an object")
        if not decoders:
            hints = typing.get_type_hints(cls)
            for f in dataclasses.fields(cls):
                decoders[f.name] = _decoder(hints[f.name])
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    required.add(f.name)
        values = {}
        for name, raw in data.items():  # only the fields written: the rest keep their defaults
            field_decoder = decoders.get(name)
            if field_decoder is None:
                raise ShapeError(f"{cls.__name__} has unknown field {name!r:.40}")
            values[name] = field_decoder(raw)
        if not required.issubset(values):
            raise ShapeError(f"{cls.__name__}.{sorted(required - set(values))[0]} is missing")
        return cls(**values)
    return check
