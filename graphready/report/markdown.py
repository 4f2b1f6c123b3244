"""The triage report as GitHub-flavoured Markdown, for a job summary or a pull request comment."""

from __future__ import annotations

from graphready.output.units import UNIT_COLUMNS, unit_cells
from graphready.report.triage import EVIDENCE_LABELS, EVIDENCE_ORDER, Item, RootCause, Triage


def render_markdown(triage: Triage) -> str:
    lines = ["# graphready triage report", ""]
    sources = ", ".join(f"`{s}`" for s in triage.sources)
    lines += [f"From {sources}" + (f"; baseline `{triage.baseline}`" if triage.baseline else "") + ".", ""]
    lines += _overview(triage)
    if triage.units:
        lines += ["## Units", ""] + _units(triage.units)
    lines += ["## Findings by root cause", ""]
    if triage.causes:
        for cause in triage.causes:
            lines += _cause(cause)
    else:
        lines += ["No findings: nothing in the hot path blocks CUDA-graph capture.", ""]
    lines += ["## Changes since the baseline", ""] + _changes(triage)
    return "\n".join(lines).rstrip() + "\n"


def _overview(triage: Triage) -> list[str]:
    evidence = ", ".join(f"{triage.evidence_counts[ev]} {EVIDENCE_LABELS[ev]}" for ev in EVIDENCE_ORDER)
    lines = [f"- **{triage.total}** findings: {evidence}"]
    if triage.baseline is not None:
        lines.append(f"- **{len(triage.new)}** new and **{len(triage.fixed)}** fixed since the baseline")
    if triage.units:
        passed = sum(1 for u in triage.units if u.get("status") == "pass")
        lines.append(f"- **{passed}/{len(triage.units)}** units passing")
    return lines + [""]


def _units(units: list[dict]) -> list[str]:
    numeric = {"eager ms", "replay ms", "speedup", "kernels/step"}
    lines = ["| " + " | ".join(UNIT_COLUMNS) + " |",
             "|" + "|".join("---:" if c in numeric else "---" for c in UNIT_COLUMNS) + "|"]
    for unit in units:
        lines.append("| " + " | ".join(_cell(c) for c in unit_cells(unit)) + " |")
    return lines + [""]


def _cause(cause: RootCause) -> list[str]:
    counts = {ev: sum(1 for i in cause.items if i.evidence is ev) for ev in EVIDENCE_ORDER}
    tally = ", ".join(f"{n} {EVIDENCE_LABELS[ev]}" for ev, n in counts.items() if n)
    lines = [f"### {cause.rule} {cause.name} ({cause.severity.label})", ""]
    if cause.summary:
        lines += [cause.summary, ""]
    lines += [f"{len(cause.items)} finding{'s' * (len(cause.items) != 1)}: {tally}", ""]
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


def _cell(text: str) -> str:
    return text.replace("|", "\\|")
