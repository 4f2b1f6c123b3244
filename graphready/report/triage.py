"""The triage model both renderers draw: units, findings grouped by root cause, and baseline changes.

A "root cause" is one rule: every finding of a rule shares the rule's explanation and fix, so the
reader fixes the pattern once instead of reading the same advice per line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from graphready.catalog import load_catalog
from graphready.findings import Evidence, Finding, Severity
from graphready.merge import mark_evidence
from graphready.output.source import SourceCache
from graphready.report.baseline import BaselineKey, diff_against, finding_key
from graphready.report.inputs import ResultDocument

EVIDENCE_LABELS = {
    Evidence.CONFIRMED: "confirmed",
    Evidence.STATIC: "static only",
    Evidence.DYNAMIC: "dynamic only",
}
EVIDENCE_ORDER = (Evidence.CONFIRMED, Evidence.STATIC, Evidence.DYNAMIC)


@dataclass
class Item:
    finding: Finding
    evidence: Evidence
    state: str  # "new", "baseline", or "" when no baseline is known
    snippet: list[tuple[int, str]]


@dataclass
class RootCause:
    rule: str
    name: str
    severity: Severity
    summary: str
    fix: str
    items: list[Item] = field(default_factory=list)


@dataclass
class Triage:
    sources: list[str]
    units: list[dict]
    causes: list[RootCause]
    evidence_counts: dict[Evidence, int]
    baseline: Path | None
    new: list[Finding]
    fixed: list[dict]

    @property
    def total(self) -> int:
        return sum(len(cause.items) for cause in self.causes)


def build_triage(documents: list[ResultDocument], root: Path | None,
                 baseline: set[BaselineKey] | None = None, baseline_path: Path | None = None) -> Triage:
    findings = _unique(f for doc in documents for f in doc.findings)
    check = [f for f in findings if f.source == "check"]
    lint = [f for f in findings if f.source == "lint"]
    if check and lint:  # both sides ran: pair them up; otherwise keep what each input recorded
        mark_evidence(check, lint)
    sources = SourceCache(root)
    catalog = load_catalog()
    causes: dict[str, RootCause] = {}
    diff = diff_against(findings, baseline, tools_that_ran(documents)) if baseline is not None else None
    new_keys = {finding_key(f) for f in diff.new} if diff else None
    for finding in findings:
        doc = catalog.get(finding.rule)
        cause = causes.get(finding.rule)
        if cause is None:
            cause = causes[finding.rule] = RootCause(
                rule=finding.rule,
                name=doc.name if doc else finding.name,
                severity=doc.severity if doc else finding.severity,
                summary=doc.summary if doc else "",
                fix=" ".join(doc.fix.split()) if doc else "",
            )
        cause.items.append(Item(
            finding=finding,
            evidence=evidence_of(finding),
            state=_state(finding, new_keys),
            snippet=sources.window(finding.path, finding.line, finding.end_line),
        ))
    ordered = sorted(causes.values(), key=lambda c: (-c.severity, -len(c.items), c.rule))
    for cause in ordered:
        cause.items.sort(key=lambda i: (i.state != "new", EVIDENCE_ORDER.index(i.evidence), i.finding.sort_key()))
    counts = {ev: sum(1 for c in ordered for i in c.items if i.evidence is ev) for ev in EVIDENCE_ORDER}
    return Triage(
        sources=[str(doc.path) for doc in documents],
        units=[u for doc in documents for u in doc.units],
        causes=ordered,
        evidence_counts=counts,
        baseline=baseline_path,
        new=diff.new if diff else [],
        fixed=diff.fixed if diff else [],
    )


def tools_that_ran(documents: list[ResultDocument]) -> frozenset[str]:
    """`lint` and/or `check`; a combined (nightly) document always holds lint, and check when it has units."""
    tools = set()
    for doc in documents:
        if doc.tool in ("lint", "check"):
            tools.add(doc.tool)
        else:
            tools.update(["lint", "check"] if doc.units else ["lint"])
    return frozenset(tools)


def evidence_of(finding: Finding) -> Evidence:
    """The merged evidence when known; otherwise what the finding's own tool saw."""
    if finding.evidence is not None:
        return finding.evidence
    return Evidence.DYNAMIC if finding.source == "check" else Evidence.STATIC


def _state(finding: Finding, new_keys: set[BaselineKey] | None) -> str:
    if new_keys is None:
        return "baseline" if finding.baselined else ""
    return "new" if finding_key(finding) in new_keys else "baseline"


def _unique(findings) -> list[Finding]:
    """The same finding read from two documents (say, lint run twice) is reported once."""
    seen: dict[tuple, Finding] = {}
    for f in findings:
        seen.setdefault((f.path, f.line, f.column, f.rule, f.unit, f.message), f)
    return list(seen.values())
