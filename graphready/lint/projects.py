"""One `lint` call over paths that may belong to several projects.

Each path is linted with the configuration of the nearest pyproject.toml above it that has a
[tool.graphready] table (as ruff does), so `lint pkg_a pkg_b` gives the same findings in either
order; a directory below a given path with its own table is linted as its own project. Finding
paths are then made relative to the directory lint runs in (as ruff and mypy print them), so a
terminal, an editor, CI annotations and SARIF viewers all open the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from graphready.config import Config, load_config
from graphready.findings import Finding
from graphready.lint.engine import LintResult, Selection, lint
from graphready.lint.failures import Failure
from graphready.lint.files import absolute, display
from graphready.lint.progress import Progress


@dataclass
class ProjectResult:
    config: Config
    result: LintResult


@dataclass
class Run:
    projects: list[ProjectResult] = field(default_factory=list)

    @property
    def findings(self) -> list[Finding]:
        return sorted((f for p in self.projects for f in p.result.findings), key=Finding.sort_key)

    @property
    def suppressed(self) -> list[Finding]:
        return sorted((f for p in self.projects for f in p.result.suppressed), key=Finding.sort_key)

    @property
    def failures(self) -> list[Failure]:
        """graphready's own failures, each also a GR002 finding: the run exits 3."""
        return sorted((f for p in self.projects for f in p.result.failures), key=lambda f: (f.path, f.line))

    @property
    def skipped(self) -> list[Path]:
        return [path for p in self.projects for path in p.result.skipped]


def shown_path(path: Path, cwd: Path) -> str:
    """Relative to `cwd` when the file is under it, absolute otherwise (as ruff does)."""
    try:
        return display(path.relative_to(cwd).as_posix())
    except ValueError:
        return display(path.as_posix())


def _group(paths: list[Path], config_file: Path | None) -> list[tuple[Config, list[Path]]]:
    groups: dict[Path, tuple[Config, list[Path]]] = {}
    for path in paths:
        config = load_config(path, config_file)
        key = config.source or config.root
        groups.setdefault(key, (config, []))[1].append(path)
    return list(groups.values())


def lint_projects(paths: list[Path], config_file: Path | None, prepare: Callable[[Config], Selection],
                  jobs: int = 1, use_cache: bool = True, statistics: bool = False,
                  progress: Progress | None = None) -> Run:
    """Lint every project the paths touch; `prepare` applies command-line overrides to a project's
    config and returns its rule selection. `statistics`: see `lint`."""
    run = Run()
    cwd = Path.cwd().resolve()
    pending = _group(paths, config_file)
    while pending:
        config, project_paths = pending.pop(0)
        selection = prepare(config)
        result = lint(config, project_paths, selection, jobs=jobs, use_cache=use_cache, split=config_file is None,
                      statistics=statistics, progress=progress)
        for item in result.findings + result.suppressed + result.failures:  # as the user would type the path
            item.path = shown_path(absolute(config.root / item.path), cwd)
        run.projects.append(ProjectResult(config, result))
        pending += _group(result.nested, None)
    return run

