"""Whose exception is it: the unit's code (a verdict on the unit) or graphready's own check (GD001).

The harness calls the user's code (the step, `make_inputs`, `state`, `loop`) only through
`call_user`. Walking an exception's traceback from where it was raised outward, the first frame of
the harness's own code decides: `call_user` means the user's code, or a library it called, raised;
any other harness frame means one of graphready's checks raised, possibly in a hook it runs inside
the user's step (the op tracer, a line tracer). The CUDA runtime failing is the unit's: the GPU
runs the unit's work, and an asynchronous error surfaces at whichever call synchronises next.
No torch import: the CPU tests and the parent use it.
"""

from __future__ import annotations

import os
import re
import traceback
from dataclasses import dataclass
from typing import Any, Callable

_HARNESS = os.path.realpath(os.path.dirname(__file__))
_TARGETS = os.path.join(_HARNESS, "targets")  # built-in targets are the user's code in this sense
_CUDA_FAILURE = re.compile(r"CUDA error|CUDA out of memory|cudaError|CUBLAS_STATUS|CUDNN_STATUS")
_CUDA_FAILURE_TYPES = ("OutOfMemoryError", "AcceleratorError")


class UnitContractError(TypeError):
    """The unit broke its contract (its step returned no tensor, say): the user's to fix, raised by the harness."""


def call_user(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call the user's code: an exception that passes through this frame came from there."""
    return fn(*args, **kwargs)


def _is_harness(filename: str) -> bool:
    path = os.path.realpath(filename)
    return path.startswith(_HARNESS + os.sep) and not path.startswith(_TARGETS + os.sep)


def is_cuda_failure(exc: BaseException) -> bool:
    """A CUDA runtime error or an out-of-memory: the GPU failed running the work, whoever queued it."""
    if any(cls.__name__ in _CUDA_FAILURE_TYPES for cls in type(exc).__mro__):
        return True
    return bool(_CUDA_FAILURE.search(str(exc)))


def raised_by_user(exc: BaseException) -> bool:
    """True when the unit's code (or the GPU running it) raised `exc`; False when graphready's check did."""
    if isinstance(exc, UnitContractError) or is_cuda_failure(exc):
        return True
    for frame, _ in reversed(list(traceback.walk_tb(exc.__traceback__))):
        if frame.f_code is call_user.__code__:
            return True
        if _is_harness(frame.f_code.co_filename):
            return False
    return True  # no harness frame: it never reached graphready's code


def _where(exc: BaseException) -> str:
    """The innermost frame of graphready's code in the traceback, as `path:line` (relative to the package)."""
    package = os.path.dirname(_HARNESS)
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        path = os.path.realpath(frame.filename)
        if path.startswith(_HARNESS + os.sep):
            return f"{os.path.relpath(path, os.path.dirname(package)).replace(os.sep, '/')}:{frame.lineno}"
    return ""


@dataclass
class InternalFailure:
    """graphready's own check raised: which checks it hit, the exception, where in graphready, the traceback."""

    checks: list[str]
    error: str  # "ReferenceError: weakly-referenced object no longer exists"
    where: str  # "graphready/harness/reach.py:120", or "" when no frame of ours is in the traceback
    traceback: str

    @classmethod
    def of(cls, check: str, exc: BaseException) -> "InternalFailure":
        error = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:300]
        return cls([check], error, _where(exc), "".join(traceback.format_exception(exc)))

    def same_failure(self, other: "InternalFailure") -> bool:
        return (self.error, self.where) == (other.error, other.where)

    def message(self) -> str:
        """The GD001 text: which of graphready's checks failed, how, and that the other verdicts stand."""
        checks = ", ".join(self.checks)
        noun = "check" if len(self.checks) == 1 else "checks"
        at = f" at {self.where}" if self.where else ""
        return (f"graphready's own {checks} {noun} failed here ({self.error}{at}); this is a bug in graphready, "
                f"not a verdict on the unit: the {noun} did not finish, every other check's verdict stands. "
                "Please report it with the traceback (`graphready check --verbose`)")

    def to_json(self) -> dict[str, Any]:
        return {"checks": list(self.checks), "error": self.error, "where": self.where, "traceback": self.traceback}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "InternalFailure":
        return cls(list(data.get("checks", [])), str(data.get("error", "")), str(data.get("where", "")),
                   str(data.get("traceback", "")))
