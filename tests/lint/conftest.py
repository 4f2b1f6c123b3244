"""Helpers to lint small in-memory projects."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphready.config import parse_table
from graphready.lint.engine import Selection, lint


@pytest.fixture
def lint_project(tmp_path: Path):
    """lint_project({"pkg/mod.py": "..."}, {"hot-paths": [...]}) -> LintResult for the whole tree."""

    def run(files: dict[str, str], table: dict | None = None, select: list[str] | None = None, paths=None):
        for rel, text in files.items():
            target = tmp_path / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        config = parse_table(table or {}, tmp_path.resolve(), None)
        selection = Selection(select or config.select, config.ignore)
        return lint(config, [tmp_path / p for p in paths] if paths else [tmp_path], selection, use_cache=False)

    return run


@pytest.fixture
def project_tree(tmp_path: Path):
    """project_tree({"pkg/mod.py": "..."}) -> configure(table_text) -> the project root, whose
    pyproject.toml holds `[tool.graphready]` + table_text (for tests that run the CLI)."""

    def make(files: dict[str, str]):
        for rel, text in files.items():
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / rel).write_text(text)

        def configure(table: str) -> Path:
            (tmp_path / "pyproject.toml").write_text("[tool.graphready]\n" + table)
            return tmp_path
        return configure

    return make
