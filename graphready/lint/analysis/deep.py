"""Room for deep but valid Python: a few thousand `a + a + ...` terms, a long `elif` ladder or
method chain nest the trees that the analysis walks recursively (`ast` visitors, libcst's code
generation, tensor inference) far past Python's default recursion limit of 1000.

CPython refuses to parse nesting deeper than about 3000 levels (such a file is GR001), so each
file's analysis runs on a thread with a large stack and a recursion limit sized for that depth;
the limit is put back afterwards so the rest of the process keeps the default.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from typing import Callable, Iterator, TypeVar

STACK_BYTES = 512 << 20  # reserved, not committed: only the pages a deep file touches are used
RECURSION_LIMIT = 50_000  # ~3000 levels x the frames one level costs in the deepest walk, with room
Result = TypeVar("Result")
_lock = threading.Lock()
_caller_limit: list[int] = []  # the limit in force before call_deep raised it


@contextlib.contextmanager
def python_limits() -> Iterator[None]:
    """Parse under the limit Python itself compiles with, so that what CPython rejects as too
    deep is a GR001 here too, not something the raised limit lets through."""
    if not _caller_limit:
        yield
        return
    raised = sys.getrecursionlimit()
    sys.setrecursionlimit(_caller_limit[-1])
    try:
        yield
    finally:
        sys.setrecursionlimit(raised)


def call_deep(function: Callable[..., Result], *args) -> Result:
    outcome: dict[str, object] = {}

    def target() -> None:
        try:
            outcome["value"] = function(*args)
        except BaseException as exc:  # handed to the caller's thread below
            outcome["error"] = exc

    with _lock:  # the limit is per interpreter: one deep call at a time changes it
        previous_limit = sys.getrecursionlimit()
        previous_stack = threading.stack_size(STACK_BYTES)
        _caller_limit.append(previous_limit)
        try:
            sys.setrecursionlimit(max(previous_limit, RECURSION_LIMIT))
            thread = threading.Thread(target=target, name="graphready-deep", daemon=True)
            thread.start()
            thread.join()
        finally:
            _caller_limit.pop()
            threading.stack_size(previous_stack)
            sys.setrecursionlimit(previous_limit)
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]
