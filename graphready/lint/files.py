"""Which files a run looks at, and the dotted module name of each.

Paths are kept as the user's (a symlinked file keeps its own name); a directory below the
project root that holds its own `[tool.graphready]` pyproject.toml is another project and is
linted with its own configuration, as ruff does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path

from graphready.config import DEFAULT_EXCLUDES, Config, is_project_dir
from graphready.errors import UsageError

SOURCE_SUFFIXES = (".py", ".cu", ".cuh")


def absolute(path: Path) -> Path:
    """The absolute path, directories resolved but the file's own name kept (symlinks included)."""
    path = Path(os.path.abspath(path))
    return path.parent.resolve() / path.name if path.name else path.resolve()


def display(path: str) -> str:
    """A file name that is not valid UTF-8 as readable text (`caf\\xe9.py`), so every format can
    print and fingerprint it."""
    try:
        path.encode("utf-8")
        return path
    except UnicodeEncodeError:
        return os.fsencode(path).decode("utf-8", "backslashreplace")


def relative(path: Path, root: Path, resolved: bool = False) -> str:
    """`path` relative to `root`, '/'-separated; `resolved`: the path is one `absolute` gave (a discovered file)."""
    return _relative_absolute(path if resolved else absolute(path), root)


def _relative_absolute(path: Path, root: Path) -> str:
    text, prefix = str(path), str(root).rstrip(os.sep) + os.sep
    if os.sep == "/" and text.startswith(prefix):  # `relative_to` without its parsing: a warm run asks ~2,500 times
        return display(text[len(prefix):])
    try:
        return display(path.relative_to(root).as_posix())
    except ValueError:
        return display(path.as_posix())


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


@dataclass
class Discovery:
    files: list[Path]  # every project source (for the call graph), the requested ones included
    requested: set[Path]  # the sources to report on (under the given paths)
    nested: list[Path] = field(default_factory=list)  # projects of their own under the given paths
    skipped: list[Path] = field(default_factory=list)  # named files that are not sources


def _walk(directory: Path, root: Path, patterns: list[str], nested: list[Path] | None):
    """Sources under `directory`, as `absolute` gives them; with `nested`, stops at (and lists there) other
    projects. Each directory is resolved once, not each of its files (`absolute` resolves the parent)."""
    for current, dirs, files in os.walk(directory):
        here = Path(current)
        if nested is not None and here != root and "pyproject.toml" in files and is_project_dir(here):
            nested.append(here)
            dirs[:] = []
            continue
        real = here.resolve()
        dirs[:] = sorted(d for d in dirs if d not in DEFAULT_EXCLUDES and not d.startswith(".")
                         and not is_excluded(_relative_absolute(real / d, root), patterns))
        for name in sorted(files):
            if name.endswith(SOURCE_SUFFIXES):
                path = real / name
                if not is_excluded(_relative_absolute(path, root), patterns):
                    yield path


def discover(config: Config, paths: list[Path], split: bool = True) -> Discovery:
    """All project sources (for the call graph) and the subset to report on (the given paths).

    With `split`, directories holding their own `[tool.graphready]` are left to their own run."""
    found = Discovery([], set())
    project: set[Path] | None = None  # the project's sources, when a path given is its root (walked once)
    for path in paths:
        if not os.path.lexists(path):
            raise UsageError(f"no such file or directory: {path}")
        if path.is_dir():
            walked = set(_walk(absolute(path), config.root, config.exclude, found.nested if split else None))
            found.requested.update(walked)
            if absolute(path) == config.root:
                project = walked
        elif not path.name.endswith(SOURCE_SUFFIXES):
            found.skipped.append(path)
        elif not is_excluded(relative(path, config.root), config.exclude):
            found.requested.add(absolute(path))
    if project is None:
        elsewhere: list[Path] = []  # other projects met by the project walk: linted only when asked for
        project = set(_walk(config.root, config.root, config.exclude, elsewhere if split else None))
    found.files = sorted(project | found.requested)
    return found
