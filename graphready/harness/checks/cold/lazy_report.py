"""GD203 lazy-capture-work: what a capture with no warm-up did that a warmed-up capture does not.

The cold worker (`graphready.harness.checks.cold.lazy`) captures a unit twice in a fresh process: first
with nothing run before (cold), then again (warm). Work seen only in the cold capture is first-call
work: a JIT compile, a module load, host pinning, a buffer that a lazy `if self.buf is None:` made.
This module turns the two observations into findings; it imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from graphready.findings import Severity
from graphready.harness.frames import Location

# What each kind of first-call work is called in a finding; `{}` is the kernel, function or size.
WORK = {
    "triton-compile": "compiles the Triton kernel `{}`",
    "triton-load": "loads the CUDA module of the Triton kernel `{}` (its first launch)",
    "cute-compile": "compiles a CuTeDSL kernel (`cute.compile` of `{}`)",
    "torch-compile": "runs the torch.compile compiler (compile {})",
    "pin-memory": "pins host memory (`pin_memory()` of a {} tensor)",
    "host-register": "registers host memory with CUDA (`cudaHostRegister`, {})",
    "pinned-alloc": "takes pinned host memory from torch's caching host allocator ({})",
    "lazy-alloc": "allocates {} that outlive the step (a buffer or cache created on the first call)",
}


@dataclass(frozen=True)
class Work:
    """One piece of work seen during a capture, at the user line that caused it."""

    kind: str  # a key of WORK
    detail: str
    location: Location | None


@dataclass
class CaptureObservation:
    """What one capture (cold or warm) did."""

    work: list[Work] = field(default_factory=list)
    error: str | None = None  # the capture failed with this
    error_location: Location | None = None


@dataclass(frozen=True)
class LazyFinding:
    severity: Severity
    location: Location | None
    message: str


def describe_bytes(nbytes: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= size:
            return f"{nbytes / size:.1f} {unit}"
    return f"{nbytes} bytes"


def first_call_work(cold: CaptureObservation, warm: CaptureObservation | None) -> list[Work]:
    """Work of the cold capture that the warm one did not repeat at the same line, in order.

    Without a warm capture (the cold one failed and poisoned the process) all cold work counts.
    A Triton module load at a line that also compiled that kernel is part of the compile.
    """
    repeated = {(w.kind, w.location) for w in warm.work} if warm is not None else set()
    compiled = {(w.detail, w.location) for w in cold.work if w.kind == "triton-compile"}
    kept: list[Work] = []
    for work in cold.work:
        if (work.kind, work.location) in repeated:
            continue
        if work.kind == "triton-load" and (work.detail, work.location) in compiled:
            continue
        if work not in kept:
            kept.append(work)
    return kept


def _phrases(items: list[Work]) -> str:
    return "; ".join(WORK[w.kind].format(w.detail) for w in items)


def lazy_findings(cold: CaptureObservation, warm: CaptureObservation | None, fallback: Location) -> list[LazyFinding]:
    """Info per user line with first-call work; a warning where the cold capture failed.

    Work inside a capture that still succeeds leaves a graph that replays correctly today but
    depends on what ran first (compiles, loads and pinning inside the capture window, lazy
    buffers in the graph's private pool): info. A capture that fails without warm-up is a
    warning; the parent drops it when the warmed-up capture fails as well (GD201 covers that).
    """
    work = first_call_work(cold, warm)
    failed_at = None
    if cold.error is not None:
        failed_at = cold.error_location or (work[-1].location if work else None) or fallback
    by_line: dict[Location, list[Work]] = {}
    for item in work:
        by_line.setdefault(item.location or fallback, []).append(item)
    findings = [
        LazyFinding(
            Severity.INFO,
            location,
            f"first-call work inside a capture with no warm-up: this line {_phrases(items)}; "
            "do it once before capturing (a warm-up step, or the unit's setup)",
        )
        for location, items in by_line.items()
        if location != failed_at  # that line's work is told with its failure below
    ]
    if failed_at is not None:
        before = f"; first-call work before it: {_phrases(work)}" if work else ""
        first_line = cold.error.strip().splitlines()[0][:240] if cold.error.strip() else "unknown error"
        findings.append(
            LazyFinding(
                Severity.WARNING,
                failed_at,
                f"the step cannot be captured without a warm-up: capture failed with {first_line}{before}; "
                "run the step once before capturing",
            )
        )
    return findings
