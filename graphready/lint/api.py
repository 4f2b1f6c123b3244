"""Programmatic entry point for other tools (the harness's confirmed/blind-spot marking, CI)."""

from __future__ import annotations

from pathlib import Path

from graphready.config import Config
from graphready.findings import Finding
from graphready.lint.engine import Selection
from graphready.lint.projects import lint_projects


def lint_paths(paths: list[Path], use_cache: bool = True) -> list[Finding]:
    """Findings for `paths`, each file with its own project's configuration; paths relative to
    the working directory, as `graphready lint` prints them."""
    if not paths:
        return []

    def selection(config: Config) -> Selection:
        return Selection(config.select, config.ignore)

    return lint_projects([Path(p) for p in paths], None, selection, use_cache=use_cache).findings
