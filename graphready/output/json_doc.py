"""`--format json`: the versioned findings document (see `graphready.findings.report_to_json`)."""

from __future__ import annotations

import json
from pathlib import Path

from graphready.findings import Finding, report_to_json


def render(
    findings: list[Finding],
    summary: dict,
    *,
    tool: str,
    units: list[dict] | None = None,
    root: Path | None = None,
    show_chain: bool = False,
    statistics: bool = False,
) -> str:
    doc = report_to_json(findings, summary, units=units, tool=tool)
    return json.dumps(doc, indent=2, sort_keys=False) + "\n"
