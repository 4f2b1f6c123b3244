"""Map a Python stack to the first frame in user code, so a finding points at the line to fix.

"User code" is everything except torch, the standard library, the harness itself and the
GPU kernel DSL runtimes that sit between a user's call and the CUDA driver.
"""

from __future__ import annotations

import functools
import os
import sys
import sysconfig
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType

_HARNESS_DIR = str(Path(__file__).resolve().parent)
_LIBRARY_PACKAGES = ("torch", "triton", "cutlass", "cuda", "nvidia", "numpy", "_pytest", "pluggy")


@dataclass(frozen=True)
class Location:
    path: str
    line: int

    def describe(self) -> str:
        return f"{self.path}:{self.line}"


def relative_path(filename: str, root: Path | None = None) -> str:
    """`filename` relative to `root` (default: the working directory), '/'-separated."""
    path = Path(filename)
    try:
        path = path.resolve()
        return path.relative_to((root or Path.cwd()).resolve()).as_posix()
    except (ValueError, OSError):
        return path.as_posix()


def _library_dirs() -> tuple[str, ...]:
    dirs = {_HARNESS_DIR}
    for key in ("stdlib", "platstdlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            dirs.add(os.path.realpath(path))
    for name in _LIBRARY_PACKAGES:
        file = getattr(sys.modules.get(name), "__file__", None)
        if file:
            dirs.add(os.path.realpath(os.path.dirname(file)))
    return tuple(sorted(dirs))


@functools.lru_cache(maxsize=4096)
def _is_user_file(filename: str, library_dirs: tuple[str, ...]) -> bool:
    if not filename or filename.startswith("<"):
        return False
    resolved = os.path.realpath(filename)
    return not any(resolved == d or resolved.startswith(d + os.sep) for d in library_dirs)


def is_user_file(filename: str) -> bool:
    return _is_user_file(filename, _library_dirs())


def user_frame(frames: list[traceback.FrameSummary], root: Path | None = None) -> Location | None:
    """The innermost user frame of `frames` (ordered outermost first, as traceback returns them)."""
    library_dirs = _library_dirs()
    for frame in reversed(frames):
        if _is_user_file(frame.filename, library_dirs):
            return Location(relative_path(frame.filename, root), frame.lineno or 0)
    return None


def current_user_frame(root: Path | None = None) -> Location | None:
    """The innermost user frame of the running stack; cheap enough to call once per traced op."""
    library_dirs = _library_dirs()
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if _is_user_file(filename, library_dirs):
            return Location(relative_path(filename, root), frame.f_lineno)
        frame = frame.f_back
    return None


def exception_user_frame(tb: TracebackType | None, root: Path | None = None) -> Location | None:
    return user_frame(traceback.extract_tb(tb), root)
