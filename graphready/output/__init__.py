"""Render findings in one of the `--format` choices shared by `lint` and `check`.

Each format lives in its own module and is imported only when asked for, so `graphready lint`
stays cheap (and never imports torch) whatever the format.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from graphready.errors import UsageError
from graphready.findings import Finding
from graphready.output.document import Document

FORMATS = ("text", "json", "sarif", "github", "junit")

_MODULES = {
    "text": "graphready.output.text",
    "json": "graphready.output.json_doc",
    "sarif": "graphready.output.sarif",
    "github": "graphready.output.github",
    "junit": "graphready.output.junit",
}


def render(
    fmt: str,
    findings: list[Finding],
    summary: dict,
    *,
    tool: str,
    units: list[dict] | None = None,
    root: Path | None = None,
    show_chain: bool = False,
    statistics: bool = False,
    color: bool = False,
    run: dict | None = None,
) -> str:
    """The whole output document for `findings` in format `fmt` (newline-terminated, or empty)."""
    if fmt not in _MODULES:
        raise UsageError(f"unknown output format {fmt!r} (expected one of: {', '.join(FORMATS)})")
    module = importlib.import_module(_MODULES[fmt])
    return module.render(Document(findings, summary, tool, units, root, show_chain, statistics, color, run))
