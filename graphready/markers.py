"""Source markers that `graphready lint` reads; they do nothing at run time."""

from __future__ import annotations

from typing import Callable, TypeVar

F = TypeVar("F", bound=Callable)


def hot_path(fn: F) -> F:
    """Mark `fn` as a hot-path root: it runs every decode step or inside a graph capture.

    The linter checks it and everything it calls. At run time the function is returned unchanged.
    """
    return fn
