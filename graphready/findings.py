"""The one findings model shared by `lint` (GR codes), `check` (GD codes) and `report`.

Every output format (text, JSON, SARIF, GitHub annotations, JUnit, the triage report) renders
a list of `Finding`; the JSON form below is a public, versioned contract.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Iterable

JSON_VERSION = 1


class Severity(enum.IntEnum):
    """Ordered so that `severity >= fail_on` decides the exit code."""

    INFO = 1
    WARNING = 2
    ERROR = 3

    @classmethod
    def parse(cls, text: str) -> "Severity":
        try:
            return cls[text.strip().upper()]
        except KeyError:
            choices = ", ".join(s.label for s in cls)
            raise ValueError(f"unknown severity {text!r} (expected one of: {choices})") from None

    @property
    def label(self) -> str:
        return self.name.lower()


class Evidence(str, enum.Enum):
    """How a finding is backed when static and dynamic results are merged."""

    STATIC = "static"  # lint only, not (yet) run under the harness
    DYNAMIC = "dynamic"  # check only: a static blind spot
    CONFIRMED = "confirmed"  # check finding with a matching lint finding at the same line


@dataclass
class Finding:
    path: str  # relative to the project root, '/'-separated
    line: int
    column: int
    rule: str  # GR101, GD201, ...
    name: str  # host-sync, capture-failed, ...
    severity: Severity
    message: str
    end_line: int | None = None
    end_column: int | None = None
    hot_chain: list[str] = field(default_factory=list)
    unit: str | None = None  # `check` only: the unit that produced it
    suppression_reason: str | None = None  # set when an inline suppression carries a reason
    baselined: bool = False  # recorded in the baseline: reported, never fails the run
    evidence: Evidence | None = None
    fingerprint: str | None = None  # stable across line moves; used by baselines and reports

    def __post_init__(self) -> None:
        if self.end_line is None:
            self.end_line = self.line
        if self.end_column is None:
            self.end_column = self.column

    @property
    def source(self) -> str:
        return "check" if self.rule.startswith("GD") else "lint"

    def sort_key(self) -> tuple:
        return (self.path, self.line, self.column, self.rule)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "path": self.path,
            "line": self.line,
            "column": self.column,
            "end_line": self.end_line,
            "end_column": self.end_column,
            "rule": self.rule,
            "name": self.name,
            "severity": self.severity.label,
            "message": self.message,
            "hot_chain": list(self.hot_chain),
        }
        if self.unit is not None:
            data["unit"] = self.unit
        if self.suppression_reason:
            data["suppression_reason"] = self.suppression_reason
        if self.baselined:
            data["baselined"] = True
        if self.evidence is not None:
            data["evidence"] = self.evidence.value
        if self.fingerprint:
            data["fingerprint"] = self.fingerprint
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Finding":
        evidence = data.get("evidence")
        return cls(
            path=data["path"],
            line=int(data["line"]),
            column=int(data.get("column", 0)),
            end_line=data.get("end_line"),
            end_column=data.get("end_column"),
            rule=data["rule"],
            name=data.get("name", ""),
            severity=Severity.parse(data.get("severity", "error")),
            message=data.get("message", ""),
            hot_chain=list(data.get("hot_chain", [])),
            unit=data.get("unit"),
            suppression_reason=data.get("suppression_reason"),
            baselined=bool(data.get("baselined", False)),
            evidence=Evidence(evidence) if evidence else None,
            fingerprint=data.get("fingerprint"),
        )


def summarize(findings: Iterable[Finding], fail_on: Severity) -> dict[str, Any]:
    """Counts used by every format's summary line and by the exit code."""
    by_severity = {s.label: 0 for s in Severity}
    by_rule: dict[str, int] = {}
    failing = 0
    baselined = 0
    files: set[str] = set()
    for f in findings:
        by_severity[f.severity.label] += 1
        by_rule[f.rule] = by_rule.get(f.rule, 0) + 1
        files.add(f.path)
        if f.baselined:
            baselined += 1
        elif f.severity >= fail_on:
            failing += 1
    return {
        "total": sum(by_severity.values()),
        "failing": failing,
        "baselined": baselined,
        "files_with_findings": len(files),
        "by_severity": by_severity,
        "by_rule": dict(sorted(by_rule.items())),
        "fail_on": fail_on.label,
    }


def report_to_json(
    findings: list[Finding],
    summary: dict[str, Any],
    units: list[dict[str, Any]] | None = None,
    tool: str = "lint",
    run: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The versioned JSON document written by `--format json`."""
    doc: dict[str, Any] = {
        "version": JSON_VERSION,
        "tool": tool,
        "findings": [f.to_json() for f in sorted(findings, key=Finding.sort_key)],
        "summary": summary,
    }
    if units is not None:
        doc["units"] = units
    if run is not None:
        doc["run"] = run
    return doc

