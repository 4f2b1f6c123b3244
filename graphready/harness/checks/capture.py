"""GD201 capture-failed: capture the step under the op tracer and explain a failure.

The CUDA error alone names neither the op nor the line; the tracer saw the first op that raised
or left the capture invalidated, so the finding points there.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from graphready.harness.blame import raised_by_user
from graphready.harness.frames import Location, exception_extension_frame, exception_user_frame
from graphready.harness.tracer import OpFailure, OpTracer

# cudaGetErrorString texts -> enum names, for messages that carry only the text.
CUDA_ERROR_TEXTS = {
    "operation not permitted when stream is capturing": "cudaErrorStreamCaptureUnsupported",
    "operation failed due to a previous error during capture": "cudaErrorStreamCaptureInvalidated",
    "operation would make the legacy stream depend on a capturing blocking stream": "cudaErrorStreamCaptureImplicit",
    "capture sequence contains a fork that was not joined to the primary stream": "cudaErrorStreamCaptureUnjoined",
    "dependency created on uncaptured work in another stream": "cudaErrorStreamCaptureIsolation",
    "capture was not initiated in this stream": "cudaErrorStreamCaptureUnmatched",
    "operation not permitted on an event last recorded in a capturing stream": "cudaErrorCapturedEvent",
    "attempt to terminate a thread-local capture sequence from another thread": "cudaErrorStreamCaptureWrongThread",
    "the operation is not permitted when the stream is capturing": "cudaErrorStreamCaptureUnsupported",
}
_ERROR_NAME = re.compile(r"\bcuda(?:Error|_ERROR_)\w+")


def cuda_error_name(text: str | None) -> str | None:
    """The CUDA error an exception message refers to, by enum name when it can be told."""
    if not text:
        return None
    match = _ERROR_NAME.search(text)
    if match:
        return match.group(0)
    lowered = text.lower()
    for phrase, name in CUDA_ERROR_TEXTS.items():
        if phrase in lowered:
            return name
    return None


@dataclass
class CaptureOutcome:
    graph: Any = None
    outputs: tuple = ()
    error: str | None = None  # the exception that ended the capture, if any
    failure: OpFailure | None = None  # the first op that broke it, from the tracer
    error_location: Location | None = None  # where the first exception was raised in user code
    error_detail: str | None = None  # the extension-library frame it was raised in (CuPy), if any
    empty_warning: bool = False
    warnings: list[str] = field(default_factory=list)
    internal: BaseException | None = None  # graphready's own code (the op tracer) raised: not a capture failure

    @property
    def location(self) -> Location | None:
        if self.failure is not None and self.failure.location is not None:
            return self.failure.location
        return self.error_location

    @property
    def ok(self) -> bool:
        return self.error is None and self.failure is None and self.internal is None

    def cuda_error(self) -> str | None:
        """The CUDA error by enum name, when the capture got as far as a CUDA call."""
        for text in (self.failure.error if self.failure else None, self.error):
            name = cuda_error_name(text)
            if name:
                return name
        if self.failure is not None and self.failure.error is None:
            return "cudaErrorStreamCaptureInvalidated"
        return None

    def first_error_line(self) -> str:
        text = (self.failure.error if self.failure and self.failure.error else self.error) or "unknown error"
        return text.strip().splitlines()[0][:240]


def new_graph() -> torch.cuda.CUDAGraph:
    """A graph that keeps its cudaGraph_t, so its kernel nodes can be counted after capture."""
    try:
        return torch.cuda.CUDAGraph(keep_graph=True)
    except TypeError:  # torch < 2.7
        return torch.cuda.CUDAGraph()


def _first_exception(exc: BaseException) -> BaseException:
    """capture_end() raising on the way out hides the error that broke the capture: unwrap it."""
    while exc.__context__ is not None and isinstance(exc.__context__, Exception):
        exc = exc.__context__
    return exc


def _raised_by_graphready(exc: BaseException) -> bool:
    """graphready's own code (a hook inside the step) raised, and not with a CUDA error: a capture that
    ends with a CUDA error (at an op or at capture_end) is the unit's failure, whoever's frame saw it."""
    return not raised_by_user(exc) and cuda_error_name(str(exc)) is None


def capture_step(
    step: Callable[[], Any], tracer: OpTracer, stream: torch.cuda.Stream, root: Path | None = None
) -> CaptureOutcome:
    """Capture `step()` on `stream` with `tracer` active. Never raises for capture problems."""
    outcome = CaptureOutcome(graph=new_graph())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torch.cuda.graph(outcome.graph, stream=stream):
                with tracer:
                    outcome.outputs = step()
        except Exception as exc:  # the capture failed; the process's CUDA state is now suspect
            first = _first_exception(exc)
            if _raised_by_graphready(first):
                outcome.internal = first
            else:
                outcome.error = f"{type(first).__name__}: {first}"
                outcome.error_location = exception_user_frame(first.__traceback__, root)
                outcome.error_detail = exception_extension_frame(first.__traceback__)
    outcome.warnings = [str(w.message) for w in caught]
    outcome.empty_warning = any("graph is empty" in text.lower() for text in outcome.warnings)
    outcome.failure = tracer.failure
    return outcome


def failure_message(outcome: CaptureOutcome) -> str:
    """The CUDA error, the op that broke the capture and what torch said, in one line."""
    op = f"aten.{outcome.failure.op}" if outcome.failure else None
    error = outcome.cuda_error()
    if error and op:
        verb = "at" if outcome.failure.error else "after"
        text = f"capture failed with {error} {verb} {op}"
    elif error:
        text = f"capture failed with {error}"
    else:
        text = f"capture failed at {op}" if op else "capture failed"
        text += f": {outcome.first_error_line()}"
    if outcome.error_detail and outcome.failure is None:
        text += f" (raised inside {outcome.error_detail})"
    return text + "; this line cannot run inside a CUDA graph"
