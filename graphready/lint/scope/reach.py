"""The code a function can run: its static call graph over the project's lint index (stdlib ast only).

`graphready check --changed-since` uses it to map a unit's callable to every function it reaches,
so a diff selects the units whose code it touched.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path

from graphready.config import Config
from graphready.lint.files import discover, module_name, relative
from graphready.lint.scope.hotpath import Project
from graphready.lint.scope.index import FunctionInfo, index_module
from graphready.lint.scope.guards import Guards


def index_project(config: Config) -> Project:
    """Index every Python file of the project (parse errors leave a file without functions)."""
    files = discover(config, []).files
    guards = Guards.of(config.eager_if, config.captured_if, config.gpu_capability)
    modules = {}
    for path in files:
        if path.suffix != ".py":
            continue
        rel = relative(path, config.root)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        module, is_package = module_name(rel)
        modules[module] = index_module(module, rel, text, guards, is_package)
    return Project(modules)


def function_at(project: Project, path: str, line: int) -> FunctionInfo | None:
    """The innermost function of file `path` (relative to the project root) whose lines hold `line`."""
    best = None
    for index in project.modules.values():
        if index.path != path:
            continue
        for info in index.functions.values():
            if info.first_line <= line <= info.end_lineno and (best is None or info.first_line >= best.first_line):
                best = info
    return best


def reachable(project: Project, roots: list[str]) -> set[str]:
    """Function keys reachable from `roots` through calls the index resolves (roots included)."""
    seen = set(roots)
    queue = deque(roots)
    while queue:
        caller = project.functions[queue.popleft()]
        for site in caller.calls:
            target = project.resolve_call(caller, site)
            if target and target not in seen:
                seen.add(target)
                queue.append(target)
    return seen


def project_path(path: str, cwd: Path, config: Config) -> str:
    """A path relative to `cwd` (as the harness reports units) made relative to the project root."""
    return relative((cwd / path).resolve(), config.root)
