"""The triage report as GitHub-flavoured Markdown, for a job summary or a pull request comment."""

from __future__ import annotations

from graphready.report.chart import panel_text, unit_panels
from graphready.report.describe import (cause_stats, config_items, first_location, run_line,
                                       settings_missing, when)
from graphready.findings import Finding
from graphready.output.summary import SEVERITY_NOUNS, counted
from graphready.report.triage import (EVIDENCE_HELP, EVIDENCE_LABELS, EVIDENCE_ORDER, INTERNAL_HELP, RANKING, Item,
                                      RootCause, RunInfo, Triage)
from graphready.report.units import NUMERIC_COLUMNS, UNIT_COLUMNS, unit_row


def render_markdown(triage: Triage) -> str:
    lines = ["# graphready triage report", ""]
    sources = ", ".join(f"`{s}`" for s in triage.sources)
    baseline = f"; baseline `{triage.baseline}`" if triage.baseline else ""
    lines += [f"Made {when(triage.created)} by graphready {triage.version} from {sources}{baseline}.", ""]
    lines += ["## Summary", ""] + _overview(triage)
    if triage.internal:
        lines += ["## graphready's own failures", "", INTERNAL_HELP, ""]
        lines += [_internal(f) for f in triage.internal] + [""]
    lines += ["## Fix first", ""]
    if triage.causes:
        lines += [RANKING, ""] + _ranking(triage.causes)
    else:
        lines += ["Nothing to fix: no findings.", ""]
    if triage.units:
        lines += ["## Units", ""] + _units(triage.units) + _charts(triage.units)
    lines += ["## Findings by root cause", ""]
    if triage.causes:
        for rank, cause in enumerate(triage.causes, 1):
            lines += _cause(rank, cause)
    else:
        lines += ["No findings: nothing in the hot path blocks CUDA-graph capture.", ""]
    lines += ["## Changes since the baseline", ""] + _changes(triage) + [""]
    lines += ["## Runs and settings", ""]
    for run in triage.runs:
        lines += _run(run)
    return "\n".join(lines).rstrip() + "\n"


def _overview(triage: Triage) -> list[str]:
    severities = ", ".join(counted(n, *SEVERITY_NOUNS[sev]) for sev, n in triage.severity_counts.items())
    lines = [f"- **{triage.total}** findings: {severities}"]
    if triage.internal:
        lines.append(f"- **{len(triage.internal)}** internal errors: graphready's own failures, not findings (below)")
    evidence = ", ".join(f"{triage.evidence_counts[ev]} {EVIDENCE_LABELS[ev]}" for ev in EVIDENCE_ORDER)
    lines.append(f"- evidence: {evidence}")
    if triage.baseline is not None:
        lines.append(f"- **{len(triage.new)}** new and **{len(triage.fixed)}** fixed since the baseline")
    if triage.units:
        passed = sum(1 for u in triage.units if u.get("status") == "pass")
        lines.append(f"- **{passed}/{len(triage.units)}** units passing")
    lines.append("")
    lines += [f"- **{EVIDENCE_LABELS[ev]}**: {EVIDENCE_HELP[ev]}" for ev in EVIDENCE_ORDER]
    return lines + [""]


def _internal(f: Finding) -> str:
    unit = f" (unit `{f.unit}`)" if f.unit else ""
    return f"- `{f.path}:{f.line}` {f.rule}{unit}: {f.message}"


def _ranking(causes: list[RootCause]) -> list[str]:
    lines = ["| # | root cause | severity | findings | seen by check | hot callers | start at |",
             "|---:|---|---|---:|---:|---:|---|"]
    for rank, cause in enumerate(causes, 1):
        lines.append(f"| {rank} | [{cause.rule} {cause.name}](#{_anchor(rank, cause)}) | {cause.severity.label} | "
                     f"{len(cause.items)} | {cause.seen_by_check} | {'-' if cause.fan_in is None else cause.fan_in} | "
                     f"`{_cell(first_location(cause))}` |")
    return lines + [""]


def _units(units: list[dict]) -> list[str]:
    lines = ["| " + " | ".join(UNIT_COLUMNS) + " |",
             "|" + "|".join("---:" if c in NUMERIC_COLUMNS else "---" for c in UNIT_COLUMNS) + "|"]
    for unit in units:
        lines.append("| " + " | ".join(_cell(c) for c in unit_row(unit)) + " |")
    return lines + [""]


def _charts(units: list[dict]) -> list[str]:
    lines = []
    for panel in unit_panels(units):
        lines += ["```text", *panel_text(panel), "```", ""]
    return lines


def _cause(rank: int, cause: RootCause) -> list[str]:
    counts = {ev: sum(1 for i in cause.items if i.evidence is ev) for ev in EVIDENCE_ORDER}
    tally = ", ".join(f"{n} {EVIDENCE_LABELS[ev]}" for ev, n in counts.items() if n)
    lines = [f"### {rank}. {cause.rule} {cause.name} ({cause.severity.label})", ""]
    if cause.summary:
        lines += [cause.summary, ""]
    lines += [f"{cause_stats(cause)}: {tally}", ""]
    if cause.fix:
        lines += [f"> **Fix:** {cause.fix}", ""]
    for item in cause.items:
        lines += _item(item)
    return lines


def _item(item: Item) -> list[str]:
    f = item.finding
    tags = [EVIDENCE_LABELS[item.evidence]] + ([item.state] if item.state else [])
    unit = f" (unit `{f.unit}`)" if f.unit else ""
    lines = [f"- `{f.path}:{f.line}:{f.column + 1}` **{' · '.join(tags)}**{unit}: {f.message}"]
    if f.hot_chain:
        lines.append("  - hot chain: " + " → ".join(f"`{step}`" for step in f.hot_chain))
    if item.snippet:
        width = len(str(item.snippet[-1][0]))
        lines += ["", "  ```"]
        for number, text in item.snippet:
            marker = ">" if f.line <= number <= f.end_line else " "
            lines.append(f"  {marker}{number:>{width}} | {text}")
        lines += ["  ```", ""]
    return lines + ([""] if not item.snippet else [])


def _changes(triage: Triage) -> list[str]:
    if triage.baseline is None:
        return ["No baseline given (pass `--baseline FILE` to compare)."]
    lines = [f"### New ({len(triage.new)})", ""]
    lines += [f"- `{f.path}:{f.line}` {f.rule} {f.name}: {f.message}" for f in triage.new] or \
        ["Nothing new: every finding is already in the baseline."]
    lines += ["", f"### Fixed ({len(triage.fixed)})", ""]
    lines += [f"- `{e['path']}` {e['rule']} (fingerprint `{e['fingerprint']}`)" for e in triage.fixed] or \
        ["Nothing fixed since the baseline."]
    return lines


def _run(run: RunInfo) -> list[str]:
    lines = [f"### {run.tool}: `{run.source}`", "", run_line(run) + ".", ""]
    items = config_items(run.config)
    if not items:
        return lines + [settings_missing(run), ""]
    lines += ["| setting | value |", "|---|---|"]
    lines += [f"| `{key}` | `{_cell(value)}` |" if value else f"| `{key}` | |" for key, value in items]
    return lines + [""]


def _anchor(rank: int, cause: RootCause) -> str:
    """GitHub's anchor for the heading `### {rank}. {rule} {name} ({severity})`."""
    heading = f"{rank}. {cause.rule} {cause.name} ({cause.severity.label})".lower()
    return "".join(c for c in heading.replace(" ", "-") if c.isalnum() or c in "-_")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")
