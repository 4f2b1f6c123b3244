"""Which files a run looks at, and the dotted module name of each."""

from __future__ import annotations

import os
from fnmatch import fnmatchcase
from pathlib import Path

from graphready.config import DEFAULT_EXCLUDES, Config
from graphready.errors import UsageError

SOURCE_SUFFIXES = (".py", ".cu", ".cuh")


def relative(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root).as_posix()
    except ValueError:
        return path.resolve().as_posix()


def is_excluded(rel: str, patterns: list[str]) -> bool:
    parts = rel.split("/")
    for pattern in patterns:
        if fnmatchcase(rel, pattern) or any(fnmatchcase(part, pattern) for part in parts):
            return True
        if any(fnmatchcase("/".join(parts[:i]), pattern) for i in range(1, len(parts))):
            return True
    return False


def module_name(rel: str) -> tuple[str, bool]:
    """('pkg.sub.mod', is_package) for 'pkg/sub/mod.py'."""
    stem = rel[: -len(".py")] if rel.endswith(".py") else rel
    parts = stem.split("/")
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    return ".".join(parts), is_package


def _walk(directory: Path, root: Path, patterns: list[str]):
    for current, dirs, files in os.walk(directory):
        here = Path(current)
        dirs[:] = sorted(d for d in dirs if d not in DEFAULT_EXCLUDES and not d.startswith(".")
                         and not is_excluded(relative(here / d, root), patterns))
        for name in sorted(files):
            if name.endswith(SOURCE_SUFFIXES):
                path = here / name
                if not is_excluded(relative(path, root), patterns):
                    yield path


def discover(config: Config, paths: list[Path]) -> tuple[list[Path], set[Path]]:
    """All project sources (for the call graph) and the subset to report on (the given paths)."""
    requested: set[Path] = set()
    for path in paths:
        if not path.exists():
            raise UsageError(f"no such file or directory: {path}")
        if path.is_dir():
            requested.update(p.resolve() for p in _walk(path, config.root, config.exclude))
        elif path.name.endswith(SOURCE_SUFFIXES) and not is_excluded(relative(path, config.root), config.exclude):
            requested.add(path.resolve())
    project = {p.resolve() for p in _walk(config.root, config.root, config.exclude)}
    return sorted(project | requested), requested
