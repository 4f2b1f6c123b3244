"""The closing line of a run (`graphready lint: 3 findings (...) in 2 files; ...`), as plain text and a style name:
the text format prints it with rich, the lint command on stderr under machine formats, which import no rich."""

from __future__ import annotations

from graphready.findings import Severity


def counted(number: int, noun: str, plural: str | None = None) -> str:
    return f"{number} {noun if number == 1 else plural or noun + 's'}"


SEVERITY_NOUNS = {Severity.ERROR: ("error", "errors"), Severity.WARNING: ("warning", "warnings"),
                  Severity.INFO: ("info", "info")}


def summary_text(summary: dict, tool: str) -> tuple[str, str]:
    """The closing line and its style. A lint that found nothing only says "all clear" when
    something was hot: with no hot function nothing but capture sites was checked."""
    total = summary.get("total", 0)
    scope = ""
    if "files" in summary:
        scope = (f"{counted(summary['files'], 'file')} read, "
                 f"{counted(summary.get('hot_functions', 0), 'hot function')}")
    if total == 0:
        if scope and not summary.get("hot_functions"):
            return f"graphready {tool}: no findings, but not an all-clear: {scope}.", "bold yellow"
        return f"graphready {tool}: all clear, no findings" + (f" ({scope})." if scope else "."), "bold green"
    by_severity = summary.get("by_severity", {})
    parts = [counted(by_severity[s.label], *SEVERITY_NOUNS[s]) for s in sorted(Severity, reverse=True)
             if by_severity.get(s.label)]
    text = (f"graphready {tool}: {counted(total, 'finding')} ({', '.join(parts)}) "
            f"in {counted(summary.get('files_with_findings', 0), 'file')}")
    if summary.get("baselined"):
        text += f"; {summary['baselined']} in the baseline"
    failing = summary.get("failing", 0)
    fail_on = summary.get("fail_on", "error")
    text += f"; {failing} failing (fail-on: {fail_on})" if failing else f"; none failing (fail-on: {fail_on})"
    text += f"; {scope}" if scope else ""
    if summary.get("internal_errors"):
        text += f"; {_not_analysed(summary)}" if tool == "lint" else f"; {_failed_checks(summary)}"
    return text + ".", "bold red" if failing else "bold yellow"


def _failed_checks(summary: dict) -> str:
    """`check`: graphready's own checks that failed on some unit (GD001); every verdict is still shown."""
    return f"graphready's own checks failed {counted(summary['internal_errors'], 'time')} (GD001)"


def _not_analysed(summary: dict) -> str:
    """What graphready's own failures (GR002) left unchecked: `1 file and 2 functions not analysed`."""
    skipped = summary.get("not_analysed", {})
    parts = [counted(skipped[key], noun) for key, noun in (("files", "file"), ("functions", "function"))
             if skipped.get(key)]
    if not parts:  # only a detail failed (a chain's branch tests): everything was checked
        return f"graphready failed {counted(summary['internal_errors'], 'time')} (GR002)"
    return f"{' and '.join(parts)} not analysed: graphready failed there (GR002)"
