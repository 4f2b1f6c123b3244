"""`--format text`: ruff-like lines for people, coloured on a terminal and plain in a pipe or a log."""

from __future__ import annotations

import io
import shutil

from rich.console import Console
from rich.table import Table
from rich.text import Text

from graphready.findings import Finding, Severity
from graphready.output.document import Document
from graphready.output.source import SourceCache
from graphready.output.summary import summary_text
from graphready.output.units import UNIT_COLUMNS, unit_cells

SEVERITY_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}
TAB_SIZE = 8


def render(doc: Document) -> str:
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        force_terminal=doc.color,
        no_color=not doc.color,
        width=shutil.get_terminal_size((120, 24)).columns,
        highlight=False,
    )
    sources = SourceCache(doc.root)
    for finding in sorted(doc.findings, key=Finding.sort_key):
        _print_finding(console, finding, sources, doc.show_chain)
    if doc.units:
        console.print(_units_table(doc.units))
    if doc.run and doc.run.get("workers"):
        console.print(_workers_table(doc.run))
    if doc.statistics and doc.findings:
        console.print(_statistics_table(doc.findings))
    if doc.statistics and doc.summary.get("scope"):
        console.print(_scope_table(doc.summary["scope"], doc.summary.get("profile")))
    if doc.statistics and doc.summary.get("assume"):
        console.print(_assume_table(doc.summary["assume"]))
    for note in doc.summary.get("notes", []):
        console.print(Text(f"note: {note}", style="yellow"), soft_wrap=True)
    console.print(summary_line(doc.summary, doc.tool), soft_wrap=True)
    return buffer.getvalue()


def _print_finding(console: Console, finding: Finding, sources: SourceCache, show_chain: bool) -> None:
    dim = "dim" if finding.baselined else ""
    head = Text(style=dim)
    head.append(f"{finding.path}:{finding.line}:{finding.column + 1}: ", style="bold")
    head.append(finding.rule, style="bold magenta")
    head.append(" ")
    head.append(f"[{finding.severity.label}]", style=SEVERITY_STYLE[finding.severity])
    head.append(f" {finding.message}")
    if finding.unit:
        head.append(f" (unit {finding.unit})", style="italic")
    if finding.baselined:
        head.append(" (baseline)", style="italic")
    console.print(head, soft_wrap=True)

    source = sources.line(finding.path, finding.line)
    if source is not None:
        gutter = f"{finding.line:>5} | "
        console.print(Text(gutter + source.expandtabs(TAB_SIZE), style=dim), soft_wrap=True)
        console.print(Text(" " * (len(gutter) - 2) + "| " + _caret(finding, source), style="bold red"),
                      soft_wrap=True)
    if show_chain and finding.hot_chain:
        console.print(Text("      = hot chain: " + " -> ".join(finding.hot_chain), style=dim or "blue"),
                      soft_wrap=True)
    console.print()


def _caret(finding: Finding, source: str) -> str:
    """`^^^` under the finding's span; to the end of the line when it spans several lines, and
    under the line's code (not its indentation) when the finding only names the line."""
    column = finding.column
    if finding.end_line == finding.line and finding.end_column > column:
        stop = len(source[: finding.end_column].expandtabs(TAB_SIZE))
    else:
        if finding.end_line == finding.line:
            column = max(column, len(source) - len(source.lstrip()))
        stop = len(source.rstrip().expandtabs(TAB_SIZE))
    start = len(source[:column].expandtabs(TAB_SIZE))
    return " " * start + "^" * max(1, stop - start)


HARNESS_COLUMNS = (("capture s", "capture_s"), ("replay check s", "replay_check_s"), ("check s", "check_s"),
                   ("worker", "worker"))


def _units_table(units: list[dict]) -> Table:
    """The shared unit columns, then (when measured) what the harness itself spent per unit."""
    table = Table(title="Units", title_justify="left")
    harness = [c for c in HARNESS_COLUMNS if any(c[1] in unit for unit in units)]
    for column in UNIT_COLUMNS:
        text_column = column in ("unit", "status", "capture")
        table.add_column(column, justify="left" if text_column else "right", overflow="fold")
    for title, _ in harness:
        table.add_column(title, justify="right")
    for unit in units:
        extra = ["-" if unit.get(key) is None else str(unit[key]) for _, key in harness]
        table.add_row(*unit_cells(unit), *extra)
    return table


def _workers_table(run: dict) -> Table:
    """One row per worker process: where it ran, its load time, how many units it checked, how it ended."""
    workers = run["workers"]
    loads = sum(1 for w in workers if w.get("load_s") is not None)
    title = f"Workers ({loads} target load{'s' * (loads != 1)}, {run.get('wall_s', 0):.1f}s in all)"
    table = Table(title=title, title_justify="left")
    for column in ("worker", "GPU", "load s", "units", "ended"):
        table.add_column(column, justify="right" if column in ("worker", "load s", "units") else "left")
    for w in workers:
        gpu = "all" if w.get("gpu") is None else str(w["gpu"])
        load = "-" if w.get("load_s") is None else f"{w['load_s']:.1f}"
        table.add_row(str(w["id"]), gpu, load, str(len(w.get("units", []))), str(w.get("end", "")))
    return table


def _statistics_table(findings: list[Finding]) -> Table:
    counts: dict[str, list] = {}
    for finding in findings:
        row = counts.setdefault(finding.rule, [finding.name, finding.severity, 0, 0])
        row[2] += 1
        row[3] += finding.baselined
    table = Table(title="Statistics", title_justify="left")
    for column in ("rule", "name", "severity", "count", "baselined"):
        table.add_column(column, justify="right" if column in ("count", "baselined") else "left")
    for rule, (name, severity, count, baselined) in sorted(counts.items(), key=lambda kv: (-kv[1][2], kv[0])):
        table.add_row(rule, name, Text(severity.label, style=SEVERITY_STYLE[severity]), str(count), str(baselined))
    return table


def _scope_table(scope: dict, profile: str | None) -> Table:
    """What was linted: how many functions were hot and why."""
    title = "Hot scope" + (f" (profile {profile})" if profile else "")
    table = Table(title=title, title_justify="left")
    table.add_column("why hot")
    table.add_column("functions", justify="right")
    for why, count in scope.get("roots", {}).items():
        table.add_row(f"root: {why}", str(count))
    table.add_row("reached by calls from a root", str(scope.get("reached_by_calls", 0)))
    table.add_row("hot in all", str(scope.get("hot_functions", 0)), style="bold")
    table.add_row("left cold by exclude-roots", str(scope.get("excluded_by_exclude_roots", 0)), style="dim")
    table.add_row("left cold: roots of classes never built here", str(scope.get("roots_of_classes_never_built", 0)),
                  style="dim")
    return table


def _assume_table(records: list[dict]) -> Table:
    """Per assume-true/false entry: the branch tests it names and what its ruled-out branches took away."""
    table = Table(title="Assumed facts", title_justify="left")
    table.add_column("entry", overflow="fold")
    for column in ("tests", "calls not followed", "functions left cold", "findings left out"):
        table.add_column(column, justify="right")
    for record in records:
        counts = [record.get(key) for key in ("tests", "call_edges", "functions", "findings")]
        scope = f" in {record['in']}" if record.get("in") else ""
        table.add_row(f"{record['key']} {record['entry']!r}{scope}", *("-" if n is None else str(n) for n in counts))
    return table


def summary_line(summary: dict, tool: str) -> Text:
    text, style = summary_text(summary, tool)
    return Text(text, style=style)
