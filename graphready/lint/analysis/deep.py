"""Room for deep but valid Python: a few thousand `a + a + ...` terms, a long `elif` ladder or
method chain nest the trees that the analysis walks recursively (`ast` visitors, libcst's code
generation, tensor inference) far past Python's default recursion limit of 1000.

CPython refuses to parse nesting deeper than about 3000 levels (such a file is GR001), so each
file's analysis runs on a thread with a large stack and a recursion limit sized for that depth;
the limit is put back afterwards so the rest of the process keeps the default.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sys
import threading
from concurrent.futures import Future
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
    if threading.current_thread() is _runner.thread:  # a deep call within one: it has the room already
        return function(*args)
    with _lock:  # the limit is per interpreter: one deep call at a time changes it
        previous_limit = sys.getrecursionlimit()
        _caller_limit.append(previous_limit)
        try:
            sys.setrecursionlimit(max(previous_limit, RECURSION_LIMIT))
            return _runner.run(function, args)
        finally:
            _caller_limit.pop()
            sys.setrecursionlimit(previous_limit)


class _Runner:
    """One thread with the large stack, started at the first deep call and kept for the next: a thread started per
    call (one or two per file in a cold run) mapped a fresh stack each time, 0.4-0.6 s more system time over 432k
    lines, the same user time."""

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None
        self.calls: queue.SimpleQueue = queue.SimpleQueue()

    def run(self, function: Callable[..., Result], args: tuple) -> Result:
        """`function(*args)` on the runner's thread: its value, or its exception raised here."""
        if self.thread is None:
            previous_stack = threading.stack_size(STACK_BYTES)
            try:
                self.thread = threading.Thread(target=self._serve, name="graphready-deep", daemon=True)
                self.thread.start()
            finally:
                threading.stack_size(previous_stack)
        outcome: Future = Future()  # each call its own: a caller interrupted while waiting leaves nothing behind
        self.calls.put((function, args, outcome))
        return outcome.result()

    def _serve(self) -> None:
        while True:
            function, args, outcome = self.calls.get()
            try:
                outcome.set_result(function(*args))
            except BaseException as exc:  # handed to the caller's thread
                outcome.set_exception(exc)
            del function, args, outcome  # nothing of the call outlives it here


def _new_runner() -> None:
    """In a forked child: no thread survives a fork, the parent's runner among them."""
    global _runner
    _runner = _Runner()


_runner = _Runner()
os.register_at_fork(after_in_child=_new_runner)
