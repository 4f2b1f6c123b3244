"""`graphready check --changed-since REF`: only the units whose code a diff touched.

A unit's code is its callable and what it declares in `reaches`, plus every function those reach
through the lint index's call graph. The diff is `git diff REF` against the working tree (commits
and uncommitted edits) plus untracked files. A touched line inside a function touches that function;
a touched line outside every function (imports, constants, class bodies) touches every function of
its module. A unit whose callable lies outside the indexed project cannot be traced and is always
selected. Changes to non-Python files are not traced.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from graphready.config import load_config
from graphready.errors import UsageError
from graphready.harness.isolation import UnitInfo
from graphready.lint.scope.hotpath import Project
from graphready.lint.scope.reach import function_at, index_project, project_path, reachable

HUNK = re.compile(r"@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")
WHOLE_FILE = None


@dataclass
class Selection:
    units: list[UnitInfo]
    why: dict[str, str] = field(default_factory=dict)  # unit -> the touched code that selected it
    untraced: list[str] = field(default_factory=list)  # units selected because their code is not indexed


def _git(root: Path, *args: str) -> str:
    try:
        proc = subprocess.run(["git", "-c", "core.quotePath=false", "-C", str(root), *args], capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise UsageError("--changed-since needs git on the PATH") from None
    if proc.returncode != 0:
        message = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit code {proc.returncode}"
        raise UsageError(f"--changed-since: `git {' '.join(args)}` failed: {message}")
    return proc.stdout


def _unquote(name: str) -> str:
    """git quotes a path holding a tab, newline, quote or backslash (non-ASCII stays raw: core.quotePath=false)."""
    if len(name) > 1 and name.startswith('"') and name.endswith('"'):
        escapes = {"t": "\t", "n": "\n"}
        name = re.sub(r"\\(.)", lambda m: escapes.get(m.group(1), m.group(1)), name[1:-1])
    return name


def touched_lines(ref: str, root: Path) -> dict[str, set[int] | None]:
    """Project-relative path -> the new file's touched line numbers (WHOLE_FILE for untracked files)."""
    diff = _git(root, "diff", "--no-color", "--no-ext-diff", "--unified=0", "--relative", ref, "--")
    touched: dict[str, set[int] | None] = {}
    current: str | None = None
    for line in diff.splitlines():
        if line.startswith("+++ "):
            name = _unquote(line[4:].strip())
            current = None if name == "/dev/null" else name.removeprefix("b/")
            if current is not None:
                touched.setdefault(current, set())
        elif line.startswith("@@") and current is not None:
            found = HUNK.match(line)
            if found is None:
                continue
            start, count = int(found.group(1)), int(found.group(2) or 1)
            lines = touched[current]
            # A pure deletion (count 0) sits between lines `start` and `start + 1`: both count as touched.
            lines.update(range(start, start + count) if count else (start, start + 1))
    for name in _git(root, "ls-files", "--others", "--exclude-standard").splitlines():
        touched[_unquote(name)] = WHOLE_FILE
    return touched


def _touched_code(project: Project, touched: dict[str, set[int] | None]) -> tuple[set[str], set[str]]:
    """(function keys touched, modules touched outside any function)."""
    functions: set[str] = set()
    modules: set[str] = set()
    for index in project.modules.values():
        if index.path not in touched:
            continue
        lines = touched[index.path]
        infos = list(index.functions.values())
        if lines is WHOLE_FILE:
            functions.update(info.key for info in infos)
            modules.add(index.module)
            continue
        for line in lines:
            inside = [info for info in infos if info.first_line <= line <= info.end_lineno]
            functions.update(info.key for info in inside)
            if not inside:
                modules.add(index.module)
    return functions, modules


def select_changed(units: list[UnitInfo], ref: str, cwd: Path) -> Selection:
    config = load_config(cwd)
    touched = touched_lines(ref, config.root)
    project = index_project(config)
    functions, modules = _touched_code(project, touched)
    selection = Selection([])
    for unit in units:
        located = [function_at(project, project_path(path, cwd, config), line) for path, line in unit.code()]
        if located[0] is None:
            selection.units.append(unit)
            selection.untraced.append(unit.name)
            continue
        reached = reachable(project, [info.key for info in located if info is not None])
        hit = sorted(k for k in reached if k in functions or k.split(":", 1)[0] in modules)
        if hit:
            selection.units.append(unit)
            selection.why[unit.name] = hit[0]
    return selection
