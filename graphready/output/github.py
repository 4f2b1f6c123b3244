"""`--format github`: GitHub Actions workflow commands, shown inline on the pull request diff.

GitHub caps annotations per step, so findings that fail the run come first and baselined debt
comes last, as notices.
"""

from __future__ import annotations


from graphready.findings import Finding, Severity
from graphready.output.document import Document

COMMANDS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def render(doc: Document) -> str:
    ordered = sorted(doc.findings, key=lambda f: (f.baselined, -f.severity, f.sort_key()))
    return "".join(annotation(f, doc.show_chain) + "\n" for f in ordered)


def annotation(finding: Finding, show_chain: bool = False) -> str:
    """One `::error file=...,line=...::message` command; columns become 1-based."""
    command = "notice" if finding.baselined else COMMANDS[finding.severity]
    title = f"{finding.rule} {finding.name}".strip()
    if finding.baselined:
        title += " (baseline)"
    properties = {"file": finding.path, "line": finding.line, "col": finding.column + 1}
    if finding.end_line > finding.line or finding.end_column > finding.column:
        properties["endLine"] = finding.end_line
        properties["endColumn"] = finding.end_column + 1
    properties["title"] = title
    message = finding.message
    if show_chain and finding.hot_chain:
        message += "\nhot chain: " + " -> ".join(finding.hot_chain)
    props = ",".join(f"{key}={escape_property(str(value))}" for key, value in properties.items())
    return f"::{command} {props}::{escape_data(message)}"


def escape_data(text: str) -> str:
    """Escape a command's message: `%` first, then the line breaks that would end the command."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """Escape a property value: as a message, plus the `:` and `,` that delimit properties."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")
