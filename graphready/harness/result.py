"""What checking one unit produced, in a form that crosses the worker-process boundary as JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from graphready.findings import Finding, Severity
from graphready.harness.blame import InternalFailure

# The check codes and their names: a public contract shared with the rule catalog (rules/GD*.toml).
CHECK_NAMES = {
    "GD001": "internal-error",
    "GD101": "sync",
    "GD102": "silent-sync",
    "GD201": "capture-failed",
    "GD202": "escaped-kernels",
    "GD203": "lazy-capture-work",
    "GD301": "replay-mismatch",
    "GD302": "replay-degenerate",
    "GD303": "replay-unstable",
    "GD304": "freed-input",
    "GD305": "rebound-state",
    "GD306": "undeclared-state",
    "GD307": "unknown-pointer",
    "GD308": "stale-output",
    "GD309": "padded-replay",
    "GD401": "memory-growth",
    "GD402": "capture-alloc",
    "GD501": "device-stream",
    "GD601": "compile-skipped-cudagraphs",
    "GD602": "compile-graph-break",
}

INTERNAL_ERROR = "GD001"  # graphready's own check failed: not a verdict on the unit (graphready.harness.blame)
PASS, FAIL, ERROR, INTERNAL = "pass", "fail", "error", "internal-error"

# The session's phases (graphready.harness.session), grouped into what the report shows per unit.
PHASE_GROUPS = {
    "eager_check_s": ("inputs", "warm-up", "state", "sync", "kernels", "eager timing", "memory growth"),
    "capture_s": ("capture", "capture analysis", "pointer audit", "cold capture"),
    "replay_check_s": ("replay", "freed memory", "eager reference", "loop", "padded replay", "replay timing",
                       "rebound state"),
}


def make_finding(
    rule: str,
    message: str,
    *,
    unit: str,
    path: str,
    line: int,
    severity: Severity = Severity.ERROR,
) -> Finding:
    return Finding(
        path=path,
        line=max(int(line), 0),
        column=0,
        rule=rule,
        name=CHECK_NAMES[rule],
        severity=severity,
        message=message,
        unit=unit,
    )


@dataclass
class UnitResult:
    """A unit's verdict, its findings and its measurements (None where a phase did not run)."""

    name: str
    device: str | None = None
    findings: list[Finding] = field(default_factory=list)
    error: str | None = None  # the unit could not be checked to the end (crash, hang, eager failure)
    capture: str | None = None  # "ok", "failed", or None when capture was never attempted
    eager_ms: float | None = None
    replay_ms: float | None = None
    kernels: int | None = None  # kernels per eager step
    graph_kernels: int | None = None
    capture_alloc_bytes: int | None = None
    memory_growth_bytes: int | None = None
    notes: list[str] = field(default_factory=list)
    phase_seconds: dict[str, float] = field(default_factory=dict)  # wall time per check phase
    worker: int | None = None  # which worker process checked it (see the report's `run.workers`)
    internal_failures: list[InternalFailure] = field(default_factory=list)  # graphready's own checks that raised

    def status(self, fail_on: Severity = Severity.WARNING) -> str:
        """error: not checked to the end; fail: a verdict at or above `fail_on`; internal-error: no such
        verdict, but one of graphready's own checks failed, so a pass cannot be given; else pass."""
        if self.error is not None:
            return ERROR
        if any(f.severity >= fail_on and not f.internal for f in self.findings):
            return FAIL
        if self.internal_errors():
            return INTERNAL
        return PASS

    def internal_errors(self) -> list[Finding]:
        return [f for f in self.findings if f.internal]

    def add_internal_failure(self, failure: InternalFailure, path: str, line: int) -> None:
        """One GD001 per distinct failure, at `path:line` (the unit's callable), naming every check it hit."""
        for known in self.internal_failures:
            if known.same_failure(failure):
                known.checks += [check for check in failure.checks if check not in known.checks]
                break
        else:
            self.internal_failures.append(failure)
        self.findings = [f for f in self.findings if f.rule != INTERNAL_ERROR] + [
            make_finding(INTERNAL_ERROR, known.message(), unit=self.name, path=path, line=line)
            for known in self.internal_failures
        ]

    def poisons_worker(self) -> bool:
        """A failed capture poisons the CUDA context; a unit that could not be checked may have too."""
        return self.capture == "failed" or self.error is not None

    @property
    def speedup(self) -> float | None:
        if self.eager_ms is None or not self.replay_ms:
            return None
        return self.eager_ms / self.replay_ms

    def unit_row(self, fail_on: Severity = Severity.WARNING) -> dict[str, Any]:
        """The `units` entry of the JSON report."""
        row = {
            "name": self.name,
            "status": self.status(fail_on),
            "device": self.device,
            "capture": self.capture,
            "eager_ms": _round(self.eager_ms),
            "replay_ms": _round(self.replay_ms),
            "speedup": _round(self.speedup),
            "kernels": self.kernels,
            "graph_kernels": self.graph_kernels,
            "capture_alloc_bytes": self.capture_alloc_bytes,
            "findings": len(self.findings),
        }
        if self.phase_seconds:
            for group, phases in PHASE_GROUPS.items():
                row[group] = _round(sum(self.phase_seconds.get(p, 0.0) for p in phases))
            row["check_s"] = _round(sum(self.phase_seconds.values()))
        if self.worker is not None:
            row["worker"] = self.worker
        if self.error is not None:
            row["error"] = self.error
        if self.internal_failures:
            row["internal_errors"] = [{"checks": f.checks, "error": f.error, "where": f.where}
                                      for f in self.internal_failures]
        if self.notes:
            row["notes"] = list(self.notes)
        return row

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["findings"] = [f.to_json() for f in self.findings]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "UnitResult":
        data = dict(data)
        findings = [Finding.from_json(f) for f in data.pop("findings", [])]
        failures = [InternalFailure.from_json(f) for f in data.pop("internal_failures", [])]
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(findings=findings, internal_failures=failures, **known)


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 4)
