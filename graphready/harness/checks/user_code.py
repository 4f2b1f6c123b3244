"""The user's line for the lazy-work and compiler checks: `frames.is_user_file`, minus the Python
files torch.compile writes to its cache (`/tmp/torchinductor_<user>/...`), which are nobody's
source even though they live outside every library."""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from types import FrameType, TracebackType

from graphready.harness.frames import Location, is_user_file, relative_path

GENERATED = ("torchinductor_",)


def is_user_code(filename: str) -> bool:
    return is_user_file(filename) and not any(tag in filename for tag in GENERATED)


def stack_location(root: Path | None) -> Location | None:
    """The innermost user frame of the running stack."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if is_user_code(frame.f_code.co_filename):
            return Location(relative_path(frame.f_code.co_filename, root), frame.f_lineno)
        frame = frame.f_back
    return None


def traceback_location(tb: TracebackType | None, root: Path | None) -> Location | None:
    """The innermost user frame of an exception's traceback."""
    for frame in reversed(traceback.extract_tb(tb)):
        if is_user_code(frame.filename):
            return Location(relative_path(frame.filename, root), frame.lineno or 0)
    return None
