"""What every output format renders."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from graphready.findings import Finding


@dataclass(frozen=True)
class Document:
    findings: list[Finding]
    summary: dict
    tool: str  # "lint" or "check"
    units: list[dict] | None = None  # `check` only
    root: Path | None = None  # resolves finding paths, for source snippets and SARIF URIs
    show_chain: bool = False
    statistics: bool = False
    color: bool = False  # only the text format colours, and only for a terminal
    run: dict | None = None  # `check` only: target, unit selection, shard, worker processes, wall time
