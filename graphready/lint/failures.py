"""graphready's own failures on one file or one function, kept apart from the rest of the run.

A bug that one odd file trips must not take every other finding with it (ruff's answer to a panic is
the model): the failure becomes a GR002 finding at that file or function, the run goes on, and the
command still exits 3 so CI fails loudly. Failures are plain data, so they cross the process pool, and
they are never written to the cache, so a fixed graphready analyses the file again.
"""

from __future__ import annotations

import contextlib
import traceback
from dataclasses import dataclass
from typing import Iterator

from graphready.errors import REPORT_HINT
from graphready.lint.analysis.candidate import INTERNAL_ERROR, Candidate
from graphready.lint.scope.index import FunctionInfo


WHOLE_FILE = (1, 1 << 31)


@dataclass
class Failure:
    path: str  # the file, relative to the project root (to the working directory once a command prints it)
    during: str  # what graphready was doing: "indexing", "analysing", ...
    error: str  # "TypeError: 'IndentedBlock' object is not iterable"
    details: str  # the traceback, printed with --verbose
    function: str = ""  # key of the function it failed on; "" when it failed on the whole file
    name: str = ""  # that function as the source names it (`Rope.forward`)
    line: int = 1  # where the finding points: the function's `def`, or the file's first line
    unchecked: tuple[int, int] | None = WHOLE_FILE  # the lines no rule looked at because of it
    lost: str = ""  # what the user misses, when it is not "not checked"

    @classmethod
    def of(cls, exc: BaseException, path: str, during: str, function: FunctionInfo | None = None,
           lost: str = "", checked: bool = False) -> "Failure":
        """`checked`: the code was checked all the same, only a detail (named by `lost`) is missing."""
        details = "".join(traceback.format_exception(exc))
        error = f"{type(exc).__name__}: {exc}"
        if function is None:
            return cls(path, during, error, details, unchecked=None if checked else WHOLE_FILE, lost=lost)
        unchecked = None if checked else (function.first_line, function.end_lineno)
        return cls(path, during, error, details, function.key, function.qualname, function.lineno, unchecked, lost)

    def candidate(self) -> Candidate:
        what = f"`{self.name}`" if self.function else "this file"
        lost = self.lost or ("it was not checked" if self.function else "none of its code was checked")
        message = (f"graphready failed while {self.during} {what} ({self.error}), so {lost}: a bug in"
                   " graphready, not a verdict on the code; run with --verbose for the traceback")
        return Candidate(INTERNAL_ERROR, self.line, 0, self.line, 0, message, self.function)

    def left_unchecked(self, line: int) -> bool:
        return self.unchecked is not None and self.unchecked[0] <= line <= self.unchecked[1]

    def one_line(self) -> str:
        where = f"`{self.name}` in {self.path}:{self.line}" if self.function else self.path
        return f"internal error while {self.during} {where} ({self.error}); {REPORT_HINT}"


@contextlib.contextmanager
def recorded(failures: list[Failure], path: str, during: str, function: FunctionInfo | None = None,
             lost: str = "", checked: bool = False) -> Iterator[None]:
    """Run the block; an exception in it becomes a Failure of `path` (or of `function`) and the run goes on."""
    try:
        yield
    except Exception as exc:  # any bug met on one file is that file's failure, not the whole run's
        failures.append(Failure.of(exc, path, during, function, lost, checked))
