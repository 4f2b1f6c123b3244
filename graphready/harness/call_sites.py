"""The line of user code behind each call made during a stretch of a step, on the profiler's wall clock.

torch.profiler's Python stacks (with_stack) name each function by the line it starts at, not by the
line that made the call. sys.monitoring (Python 3.12+) sees every call instruction: recording the
calls user code makes, with their thread and time, pins a runtime call of the trace to the user's
line inside the innermost user function that holds it.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from types import CodeType

from graphready.harness.frames import is_user_file


@dataclass(frozen=True)
class CallSite:
    code: CodeType  # the user function that made the call
    offset: int  # its call instruction
    thread: int  # native thread id, as the profiler records it
    time_ns: int  # wall clock

    @property
    def line(self) -> int:
        for start, end, line in self.code.co_lines():
            if start <= self.offset < end and line is not None:
                return line
        return self.code.co_firstlineno


class CallSites:
    """Records the calls made from user code while active; records nothing where sys.monitoring is missing."""

    def __init__(self) -> None:
        self.sites: list[CallSite] = []
        self._user: dict[CodeType, bool] = {}
        self._tool: int | None = None

    def __enter__(self) -> "CallSites":
        monitoring = getattr(sys, "monitoring", None)
        if monitoring is None:
            return self
        tool = next((i for i in range(6) if monitoring.get_tool(i) is None), None)  # ids 0-5 are for tools
        if tool is None:
            return self
        monitoring.use_tool_id(tool, "graphready call sites")
        monitoring.register_callback(tool, monitoring.events.CALL, self._on_call)
        monitoring.set_events(tool, monitoring.events.CALL)
        self._tool = tool
        return self

    def __exit__(self, *exc) -> None:
        if self._tool is not None:
            monitoring = sys.monitoring
            monitoring.set_events(self._tool, 0)
            monitoring.register_callback(self._tool, monitoring.events.CALL, None)
            monitoring.free_tool_id(self._tool)
            self._tool = None

    def _on_call(self, code: CodeType, offset: int, _callable: object, _arg0: object) -> None:
        user = self._user.get(code)
        if user is None:
            user = self._user[code] = is_user_file(code.co_filename)
        if user:
            self.sites.append(CallSite(code, offset, threading.get_native_id(), time.time_ns()))
