"""Programmatic entry point for other tools (the harness's confirmed/blind-spot marking, CI)."""

from __future__ import annotations

from pathlib import Path

from graphready.config import load_config
from graphready.findings import Finding
from graphready.lint.engine import lint


def lint_paths(paths: list[Path], use_cache: bool = True) -> list[Finding]:
    """Findings for `paths`, with the configuration of the project holding the first path."""
    if not paths:
        return []
    config = load_config(Path(paths[0]))
    return lint(config, [Path(p) for p in paths], use_cache=use_cache).findings
