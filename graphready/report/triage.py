"""The triage model both renderers draw: units, findings grouped by root cause, and baseline changes.

A "root cause" is one rule: every finding of a rule shares the rule's explanation and fix, so the
reader fixes the pattern once instead of reading the same advice per line. Causes are ranked to
answer "what do I fix first" (see `RANKING`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from graphready import __version__
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
EVIDENCE_HELP = {
    Evidence.CONFIRMED: "`lint` flagged the line and `check` saw it break on the GPU: a real failure, fix these first.",
    Evidence.STATIC: "`lint` flagged the line; no `check` result covers it (not run, or no unit reached it).",
    Evidence.DYNAMIC: "`check` saw it break on the GPU at a line `lint` did not flag: a static blind spot.",
}
INTERNAL_HELP = ("graphready itself failed on these (a bug to report with the run's `--verbose` output): what "
                 "they name was not fully checked, and they are not ranked with the findings; every other finding stands.")
RANKING = ("Ranked by severity, then findings `check` saw on the GPU (confirmed or dynamic only), then "
           "hot-path fan-in (hot callers of the code to change: one fix covers them all), then number of findings.")


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
    severity: Severity  # the most severe of its findings, as the run configured them
    summary: str
    fix: str
    items: list[Item] = field(default_factory=list)

    @property
    def seen_by_check(self) -> int:
        """Findings `check` observed on the GPU (confirmed or dynamic only)."""
        return sum(1 for item in self.items if item.evidence is not Evidence.STATIC)

    @property
    def fan_in(self) -> int | None:
        """Hot callers of the functions holding its findings, each function counted once; None when no
        finding recorded them (`check` findings, older lint results)."""
        callers: dict[str, int] = {}
        for item in self.items:
            f = item.finding
            if f.hot_callers is not None:
                callers[f"{f.path}|{f.hot_chain[-1] if f.hot_chain else f.line}"] = f.hot_callers
        return sum(callers.values()) if callers else None

    def rank_key(self) -> tuple:
        return (-self.severity, -self.seen_by_check, -(self.fan_in or 0), -len(self.items), self.rule)


@dataclass
class RunInfo:
    """One results file: which tool and graphready wrote it, when, where, and with which settings."""

    source: str
    tool: str
    version: str | None
    created: str | None
    root: str | None
    config: dict | None


@dataclass
class Triage:
    sources: list[str]
    units: list[dict]
    causes: list[RootCause]  # most urgent first
    evidence_counts: dict[Evidence, int]
    severity_counts: dict[Severity, int]  # most severe first
    baseline: Path | None
    new: list[Finding]
    fixed: list[dict]
    runs: list[RunInfo]
    created: str  # when the report was made, ISO 8601 (UTC)
    internal: list[Finding] = field(default_factory=list)  # graphready's own failures (GR002, GD001): not causes
    version: str = __version__  # the graphready that made it

    @property
    def total(self) -> int:
        return sum(len(cause.items) for cause in self.causes)


def build_triage(documents: list[ResultDocument], root: Path | None = None,
                 baseline: set[BaselineKey] | None = None, baseline_path: Path | None = None) -> Triage:
    """`root` overrides where snippets are read from; by default each document's recorded root is used
    (falling back to the current directory), so a report needs no flag where lint ran."""
    rooted = _unique((f, snippet_root(doc, root)) for doc in documents for f in doc.findings)
    internal = [f for f, _ in rooted if f.internal]  # bugs of graphready's: reported apart, never ranked as causes
    rooted = [(f, directory) for f, directory in rooted if not f.internal]
    findings = [f for f, _ in rooted]
    check = [f for f in findings if f.source == "check"]
    lint = [f for f in findings if f.source == "lint"]
    if check and lint:  # both sides ran: pair them up; otherwise keep what each input recorded
        mark_evidence(check, lint)
    sources: dict[Path, SourceCache] = {}
    catalog = load_catalog()
    causes: dict[str, RootCause] = {}
    diff = diff_against(findings, baseline, tools_that_ran(documents)) if baseline is not None else None
    new_keys = {finding_key(f) for f in diff.new} if diff else None
    for finding, directory in rooted:
        doc = catalog.get(finding.rule)
        cause = causes.get(finding.rule)
        if cause is None:
            cause = causes[finding.rule] = RootCause(
                rule=finding.rule,
                name=doc.name if doc else finding.name,
                severity=finding.severity,
                summary=doc.summary if doc else "",
                fix=" ".join(doc.fix.split()) if doc else "",
            )
        cause.severity = max(cause.severity, finding.severity)
        cache = sources.setdefault(directory, SourceCache(directory))
        cause.items.append(Item(
            finding=finding,
            evidence=evidence_of(finding),
            state=_state(finding, new_keys),
            snippet=cache.window(finding.path, finding.line, finding.end_line),
        ))
    ordered = sorted(causes.values(), key=RootCause.rank_key)
    for cause in ordered:
        cause.items.sort(key=lambda i: (i.state != "new", EVIDENCE_ORDER.index(i.evidence),
                                        -(i.finding.hot_callers or 0), i.finding.sort_key()))
    counts = {ev: sum(1 for c in ordered for i in c.items if i.evidence is ev) for ev in EVIDENCE_ORDER}
    severities = {sev: sum(1 for f in findings if f.severity is sev) for sev in sorted(Severity, reverse=True)}
    return Triage(
        sources=[str(doc.path) for doc in documents],
        units=[u for doc in documents for u in doc.units],
        causes=ordered,
        evidence_counts=counts,
        severity_counts=severities,
        baseline=baseline_path,
        new=diff.new if diff else [],
        fixed=diff.fixed if diff else [],
        runs=[RunInfo(source=str(doc.path), tool=doc.tool, version=doc.version, created=doc.created,
                      root=str(doc.root) if doc.root else None, config=doc.config) for doc in documents],
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        internal=sorted(internal, key=Finding.sort_key),
    )


def snippet_root(doc: ResultDocument, override: Path | None) -> Path:
    """Where `doc`'s finding paths are read from: the override, else its recorded root if present here."""
    if override is not None:
        return override
    if doc.root is not None and doc.root.is_dir():
        return doc.root
    return Path.cwd()


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


def _unique(rooted) -> list[tuple[Finding, Path]]:
    """The same finding read from two documents (say, lint run twice) is reported once."""
    seen: dict[tuple, tuple[Finding, Path]] = {}
    for f, directory in rooted:
        seen.setdefault((f.path, f.line, f.column, f.rule, f.unit, f.message), (f, directory))
    return list(seen.values())
