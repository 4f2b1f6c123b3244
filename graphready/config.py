"""`[tool.graphready]` in pyproject.toml: found upward from the first path, like ruff."""

from __future__ import annotations

import difflib
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from graphready.errors import UsageError
from graphready.findings import Severity

DEFAULT_EXCLUDES = (
    ".git", ".hg", ".venv", "venv", ".tox", ".nox", ".eggs", "build", "dist", "node_modules",
    "__pycache__", "site-packages", ".graphready_cache", ".mypy_cache", ".pytest_cache", ".ruff_cache",
)


class ConfigError(UsageError):
    pass


@dataclass
class Config:
    root: Path
    hot_paths: list[str] = field(default_factory=list)
    debug_guards: list[str] = field(default_factory=list)
    select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    severity: dict[str, Severity] = field(default_factory=dict)
    exclude: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    baseline: Path | None = None
    fail_on: Severity = Severity.WARNING
    check_targets: list[str] = field(default_factory=list)
    source: Path | None = None  # the pyproject.toml it came from, if any

    def fingerprint(self) -> str:
        """The settings that change what the per-file analysis produces (part of cache keys)."""
        return repr((sorted(self.debug_guards),))


def _str_list(key: str, value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"[tool.graphready] {key} must be a list of strings, got {value!r}")
    return list(value)


def _severity(key: str, value: object) -> Severity:
    if not isinstance(value, str):
        raise ConfigError(f"[tool.graphready] {key} must be a string, got {value!r}")
    try:
        return Severity.parse(value)
    except ValueError as exc:
        raise ConfigError(f"[tool.graphready] {key}: {exc}") from None


def _check_hot_path(pattern: str) -> str:
    module, sep, qualname = pattern.partition(":")
    if not sep or not module or not qualname:
        raise ConfigError(
            f"[tool.graphready] hot-paths entry {pattern!r} must look like 'module-glob:qualname-glob'"
            " (e.g. 'pkg.layers.*:*.forward')"
        )
    return pattern


def parse_table(table: dict, root: Path, source: Path | None) -> Config:
    config = Config(root=root, source=source)
    for key, value in table.items():
        if key == "hot-paths":
            config.hot_paths = [_check_hot_path(p) for p in _str_list(key, value)]
        elif key == "debug-guards":
            config.debug_guards = _str_list(key, value)
        elif key in ("select", "ignore"):
            setattr(config, key, _str_list(key, value))
        elif key == "severity":
            if not isinstance(value, dict):
                raise ConfigError("[tool.graphready] severity must be a table of CODE = \"level\"")
            config.severity = {code: _severity(f"severity.{code}", level) for code, level in value.items()}
        elif key == "exclude":
            config.exclude = _str_list(key, value)
        elif key == "per-file-ignores":
            if not isinstance(value, dict):
                raise ConfigError("[tool.graphready] per-file-ignores must be a table of \"glob\" = [codes]")
            config.per_file_ignores = {glob: _str_list(f"per-file-ignores.{glob}", codes) for glob, codes in value.items()}
        elif key == "baseline":
            if not isinstance(value, str):
                raise ConfigError(f"[tool.graphready] baseline must be a path string, got {value!r}")
            config.baseline = root / value
        elif key == "fail-on":
            config.fail_on = _severity(key, value)
        elif key == "check-targets":
            config.check_targets = _str_list(key, value)
        else:
            known = ["hot-paths", "debug-guards", "select", "ignore", "severity", "exclude",
                     "per-file-ignores", "baseline", "fail-on", "check-targets"]
            hint = difflib.get_close_matches(key, known, n=1)
            suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise ConfigError(f"unknown key {key!r} in [tool.graphready]{suggestion}")
    return config


def find_pyproject(start: Path) -> Path | None:
    start = start.resolve()
    directory = start if start.is_dir() else start.parent
    for candidate in (directory, *directory.parents):
        pyproject = candidate / "pyproject.toml"
        if pyproject.is_file():
            return pyproject
    return None


def load_config(start: Path, config_file: Path | None = None) -> Config:
    """Config for the project holding `start` (or from an explicit pyproject/TOML file)."""
    pyproject = config_file or find_pyproject(start)
    if pyproject is None:
        root = start.resolve() if start.is_dir() else start.resolve().parent
        return Config(root=root)
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {pyproject}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{pyproject}: invalid TOML: {exc}") from None
    table = data.get("tool", {}).get("graphready", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{pyproject}: [tool.graphready] must be a table")
    return parse_table(table, pyproject.parent.resolve(), pyproject)
