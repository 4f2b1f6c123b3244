"""The one findings model shared by `lint` (GR codes), `check` (GD codes) and `report`.

Every output format (text, JSON, SARIF, GitHub annotations, JUnit, the triage report) renders
a list of `Finding`; the JSON form below is a public, versioned contract.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from graphready import __version__

# graphready's own failures (lint: on one file or function; check: in one of a unit's checks): reported as
# findings so that every other finding still shows, never verdicts on the code, and they make the run exit 3.
INTERNAL_ERROR_CODES = frozenset({"GR002", "GD001"})

JSON_VERSION = 2  # 2: `column` and `end_column` are 1-based, like lines and every other format
READABLE_JSON_VERSIONS = (1, 2)  # version 1 documents had 0-based columns


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
    path: str  # '/'-separated; relative to the directory lint ran in once a command prints it
    line: int
    column: int  # 0-based in memory; 1-based in JSON and every printed format
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
    hot_callers: int | None = None  # `lint` only: hot functions that call the one holding this line

    def __post_init__(self) -> None:
        if self.end_line is None:
            self.end_line = self.line
        if self.end_column is None:
            self.end_column = self.column

    @property
    def internal(self) -> bool:
        """graphready itself failed here: a bug to report, not a verdict on the code."""
        return self.rule in INTERNAL_ERROR_CODES

    @property
    def source(self) -> str:
        return "check" if self.rule.startswith("GD") else "lint"

    def sort_key(self) -> tuple:
        return (self.path, self.line, self.column, self.rule)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "path": self.path,
            "line": self.line,
            "column": self.column + 1,
            "end_line": self.end_line,
            "end_column": self.end_column + 1,
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
        if self.hot_callers is not None:
            data["hot_callers"] = self.hot_callers
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any], version: int = JSON_VERSION) -> "Finding":
        """The finding of a JSON document of `version` (1 had 0-based columns)."""
        evidence = data.get("evidence")
        shift = 1 if version >= 2 else 0
        end_column = data.get("end_column")
        return cls(
            path=data["path"],
            line=int(data["line"]),
            column=int(data.get("column", shift)) - shift,
            end_line=data.get("end_line"),
            end_column=None if end_column is None else int(end_column) - shift,
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
            hot_callers=_count(data.get("hot_callers")),
        )


def _count(value: Any) -> int | None:
    return None if value is None else int(value)


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
    root: Path | None = None,
    run: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The versioned JSON document written by `--format json`.

    `run` says which graphready wrote it, when, and the directory its finding paths are relative
    to, so a report made later (or elsewhere) can show where the findings came from; `check` adds
    its target, shard and workers (the `run` argument).
    """
    record: dict[str, Any] = {
        "graphready": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    if root is not None:
        record["root"] = str(Path(root).resolve())
    record.update(run or {})
    doc: dict[str, Any] = {
        "version": JSON_VERSION,
        "tool": tool,
        "run": record,
        "findings": [f.to_json() for f in sorted(findings, key=Finding.sort_key)],
        "summary": summary,
    }
    if units is not None:
        doc["units"] = units
    return doc

