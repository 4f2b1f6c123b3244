"""Split one step into stretches of user code and report each as it ends, with the line it ran.

Some effects can only be seen from outside the interpreter (an attribute now holds another
tensor, the GPU went idle): checking for them at every boundary between user lines says which
line caused them, whatever the line called underneath (torch, CuPy, Cython code with no Python
frames). `sys.settrace` gives those boundaries: a line event, a call into or a return from a user
frame. Library frames are not line-traced, so their own lines cost nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import FrameType
from typing import Any, Callable

from graphready.harness.frames import Location, is_user_file, relative_path

# on_boundary(location of the stretch that just ended, the last library function it called)
Boundary = Callable[[Location | None, str | None], None]


class SegmentTracer:
    """`with SegmentTracer(on_boundary, root): step()` calls `on_boundary` between user lines."""

    def __init__(self, on_boundary: Boundary, root: Path | None = None) -> None:
        self.on_boundary = on_boundary
        self.root = root
        self.current: Location | None = None
        self.library: str | None = None
        self._paths: dict[str, str] = {}
        self._user: dict[str, bool] = {}  # filename -> is_user_file, asked at every call of the traced step
        self._previous: Any = None

    def _location(self, frame: FrameType) -> Location:
        filename = frame.f_code.co_filename
        path = self._paths.get(filename)
        if path is None:
            path = self._paths[filename] = relative_path(filename, self.root)
        return Location(path, frame.f_lineno)

    def _is_user(self, filename: str) -> bool:
        user = self._user.get(filename)
        if user is None:
            user = self._user[filename] = is_user_file(filename)
        return user

    def _boundary(self, starts: Location | None) -> None:
        self.on_boundary(self.current, self.library)
        self.current, self.library = starts, None

    def _caller_line(self, frame: FrameType) -> Location | None:
        caller = frame.f_back
        while caller is not None and not self._is_user(caller.f_code.co_filename):
            caller = caller.f_back
        return None if caller is None else self._location(caller)

    def _global(self, frame: FrameType, event: str, arg: Any):
        if event != "call":
            return None
        if self._is_user(frame.f_code.co_filename):
            self._boundary(self._location(frame))
            return self._local
        if frame.f_back is not None and self._is_user(frame.f_back.f_code.co_filename):
            self.library = f"{frame.f_code.co_qualname} ({self._location(frame).path})"
        return None

    def _local(self, frame: FrameType, event: str, arg: Any):
        if event == "line":
            self._boundary(self._location(frame))
        elif event == "return":
            self._boundary(self._caller_line(frame))
        return self._local

    def __enter__(self) -> "SegmentTracer":
        self._previous = sys.gettrace()
        sys.settrace(self._global)
        return self

    def __exit__(self, *exc) -> None:
        sys.settrace(self._previous)
        self._boundary(None)
