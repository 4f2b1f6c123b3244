"""The Python-level state a step advances outside any tensor, put back with the state tensors.

A unit's `host_state()` names objects (HF's cache layers) whose plain attributes (numbers, flags,
strings, None) a step changes: a sliding-window layer counts its tokens in a Python int. Restoring
the state tensors alone leaves such a counter where the last call left it, so two calls "from the
same state" run different code. Only attributes that are still plain are put back: a tensor made
since the snapshot belongs to the tensor state, not to this one.
"""

from __future__ import annotations

from typing import Any, Iterable

PLAIN = (int, float, bool, str, type(None))

Snapshot = list[tuple[Any, dict[str, Any]]]


def snapshot(objects: Iterable[Any]) -> Snapshot:
    """Each object with its plain attributes as they are now (objects without a `__dict__` hold none)."""
    return [(obj, {name: value for name, value in vars(obj).items() if type(value) in PLAIN})
            for obj in objects if hasattr(obj, "__dict__")]


def put_back(saved: Snapshot) -> None:
    for obj, fields in saved:
        now = vars(obj)
        for name, value in fields.items():
            if type(now.get(name)) in PLAIN:
                setattr(obj, name, value)
