"""`[tool.graphready]` in pyproject.toml: the nearest one above each file, like ruff.

A `profile` (built-in TOML under `graphready/profiles/`) supplies an engine's roots, exclusions
and eager-only predicates; the project's own lists are added to the profile's. `assume-true` /
`assume-false` entries are parsed as expressions (scope/assume.py), never evaluated.
"""

from __future__ import annotations

import difflib
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from graphready.errors import UsageError, read_named_file
from graphready.findings import Severity
from graphready.lint.scope.assume import Assumption, Facts, parse as parse_fact
from graphready.sourcefile import NotRegular, regular_bytes

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
    exclude_roots: list[str] = field(default_factory=list)  # never roots, never entered by the walk
    not_compiled: list[str] = field(default_factory=list)  # functions torch.compile never traces (nor their callees)
    eager_if: list[str] = field(default_factory=list)  # names whose true branch is not captured
    captured_if: list[str] = field(default_factory=list)  # names whose false branch is not captured
    gpu_capability: int | None = None  # SM version x 10 the graphs run on: branches for other GPUs are cold
    warm_up_before_capture: bool = False  # the engine runs each step eagerly before capturing it
    one_gpu_per_process: bool = False  # every process of the engine drives one GPU (its workers)
    profile: str | None = None
    select: list[str] = field(default_factory=list)
    ignore: list[str] = field(default_factory=list)
    severity: dict[str, Severity] = field(default_factory=dict)
    exclude: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    baseline: Path | None = None
    fail_on: Severity = Severity.WARNING
    check_targets: list[str] = field(default_factory=list)
    source: Path | None = None  # the pyproject.toml it came from, if any
    configured: bool = False  # the source has a [tool.graphready] table
    own_hot_paths: list[str] = field(default_factory=list)  # hot-paths written in the table, not by a profile
    assumptions: list[Assumption] = field(default_factory=list)  # assume-true / assume-false, the profile's first
    own_assumptions: list[Assumption] = field(default_factory=list)  # those written in the table

    def fingerprint(self) -> str:
        """The settings that change what the per-file analysis produces (part of cache keys)."""
        return repr((sorted(self.eager_if), sorted(self.captured_if), self.gpu_capability, self.one_gpu_per_process,
                     [a.label for a in self.assumptions]))

    def facts(self) -> Facts:
        """The assume-true / assume-false facts (checked for contradictions when the table was read)."""
        return Facts.of(self.assumptions)


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


def _check_exclude_root(pattern: str, key: str = "exclude-roots") -> str:
    module, sep, qualname = pattern.removeprefix("!").partition(":")
    if not module or (sep and not qualname):
        raise ConfigError(
            f"[tool.graphready] {key} entry {pattern!r} must look like 'module-glob' or"
            " 'module-glob:qualname-glob' (e.g. '*:*Vision*'), optionally after '!' to keep what it matches"
        )
    return pattern


def _check_guard(key: str, name: str) -> str:
    bare = name.replace("*", "x").replace("?", "x")
    if not bare.isidentifier():
        raise ConfigError(f"[tool.graphready] {key} entry {name!r} must be a bare name (a call, attribute or"
                          " variable name such as 'is_extend' or 'VERBOSE'), or a glob of one ('SGLANG_TRACE_*')")
    return name


def _assumption(key: str, entry: object) -> Assumption:
    """A branch test as a hot chain prints it, parsed (never run), or `{test = "...", in = "module-glob"}`
    for one that holds only in those modules."""
    scope = ""
    if isinstance(entry, dict):
        if set(entry) != {"test", "in"} or not all(isinstance(v, str) and v for v in entry.values()) \
                or ":" in entry["in"]:
            raise ConfigError(f"[tool.graphready] {key} entry {entry!r} must be a string or"
                              " {test = \"<branch test>\", in = \"<module glob>\"}")
        entry, scope = entry["test"], entry["in"]
    if not isinstance(entry, str):
        raise ConfigError(f"[tool.graphready] {key} entries must be strings or tables, got {entry!r}")
    try:
        return parse_fact(key, entry, scope)
    except ValueError as exc:
        raise ConfigError(f"[tool.graphready] {exc}") from None


def _assumptions(key: str, value: object) -> list[Assumption]:
    if not isinstance(value, list):
        raise ConfigError(f"[tool.graphready] {key} must be a list of branch tests, got {value!r}")
    return [_assumption(key, entry) for entry in value]


KNOWN_KEYS = ["profile", "hot-paths", "exclude-roots", "not-compiled", "eager-if", "captured-if", "debug-guards",
              "gpu-capability", "warm-up-before-capture", "one-gpu-per-process", "assume-true", "assume-false", "select",
              "ignore", "severity", "exclude", "per-file-ignores", "baseline", "fail-on", "check-targets"]
ASSUME_KEYS = ("assume-true", "assume-false")
LIST_KEYS = {"hot-paths": "hot_paths", "exclude-roots": "exclude_roots", "not-compiled": "not_compiled",
             "eager-if": "eager_if",
             "debug-guards": "eager_if", "captured-if": "captured_if"}
FLAG_KEYS = {"warm-up-before-capture": "warm_up_before_capture", "one-gpu-per-process": "one_gpu_per_process"}


def _apply_profile(config: Config, name: object) -> None:
    from graphready.profiles import load_profile

    if not isinstance(name, str):
        raise ConfigError(f"[tool.graphready] profile must be a string, got {name!r}")
    profile = load_profile(name)
    config.profile = name
    config.hot_paths = [_check_hot_path(p) for p in profile.get("hot-paths", [])]
    config.exclude_roots = [_check_exclude_root(p) for p in profile.get("exclude-roots", [])]
    config.not_compiled = [_check_exclude_root(p, "not-compiled") for p in profile.get("not-compiled", [])]
    config.eager_if = list(profile.get("eager-if", []))
    config.captured_if = list(profile.get("captured-if", []))
    if "gpu-capability" in profile:
        config.gpu_capability = _capability(profile["gpu-capability"])
    for key in FLAG_KEYS.keys() & profile.keys():
        setattr(config, FLAG_KEYS[key], _flag(key, profile[key]))
    for key in ASSUME_KEYS:
        config.assumptions += _assumptions(key, profile.get(key, []))


def _flag(key: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"[tool.graphready] {key} must be true or false, got {value!r}")
    return value


def _capability(value: object) -> int:
    """`gpu-capability = 90` (H100), 80 (A100), 100 (B200): the compute capability times ten."""
    if isinstance(value, bool) or not isinstance(value, int) or not 30 <= value <= 200:
        raise ConfigError(f"[tool.graphready] gpu-capability must be the compute capability times ten "
                          f"(80 for A100, 90 for H100, 100 for B200), got {value!r}")
    return value


def _codes(key: str, value: object, prefix: bool = True) -> list[str]:
    from graphready.catalog import check_code

    return [check_code(code, f"[tool.graphready] {key}", prefix) for code in _str_list(key, value)]


def parse_table(table: dict, root: Path, source: Path | None) -> Config:
    config = Config(root=root, source=source, configured=True)
    if "profile" in table:
        _apply_profile(config, table["profile"])
    for key, value in table.items():
        if key == "profile":
            continue
        if key in LIST_KEYS:
            entries = _str_list(key, value)
            if key == "hot-paths":
                entries = [_check_hot_path(p) for p in entries]
                config.own_hot_paths = list(entries)
            elif key in ("exclude-roots", "not-compiled"):
                entries = [_check_exclude_root(p, key) for p in entries]
            else:
                entries = [_check_guard(key, name) for name in entries]
            getattr(config, LIST_KEYS[key]).extend(entries)
        elif key in ("select", "ignore"):
            setattr(config, key, _codes(key, value))
        elif key == "severity":
            if not isinstance(value, dict):
                raise ConfigError("[tool.graphready] severity must be a table of CODE = \"level\"")
            config.severity = {_codes("severity", [code], prefix=False)[0]: _severity(f"severity.{code}", level)
                               for code, level in value.items()}
        elif key == "exclude":
            config.exclude = _str_list(key, value)
        elif key == "per-file-ignores":
            if not isinstance(value, dict):
                raise ConfigError("[tool.graphready] per-file-ignores must be a table of \"glob\" = [codes]")
            config.per_file_ignores = {glob: _codes(f"per-file-ignores.{glob!r}", codes) for glob, codes in value.items()}
        elif key == "baseline":
            if not isinstance(value, str):
                raise ConfigError(f"[tool.graphready] baseline must be a path string, got {value!r}")
            config.baseline = root / value
        elif key == "fail-on":
            config.fail_on = _severity(key, value)
        elif key == "check-targets":
            config.check_targets = _str_list(key, value)
        elif key == "gpu-capability":
            config.gpu_capability = _capability(value)
        elif key in FLAG_KEYS:
            setattr(config, FLAG_KEYS[key], _flag(key, value))
        elif key in ASSUME_KEYS:
            config.own_assumptions += _assumptions(key, value)
        else:
            hint = difflib.get_close_matches(key, KNOWN_KEYS, n=1)
            suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise ConfigError(f"unknown key {key!r} in [tool.graphready]{suggestion}")
    config.assumptions += config.own_assumptions
    try:
        config.facts()
    except ValueError as exc:
        raise ConfigError(f"[tool.graphready] {exc}") from None
    return config


def is_project_dir(directory: Path) -> bool:
    """`directory` holds a pyproject.toml with a [tool.graphready] table (one that cannot be read
    counts, so that loading it reports the problem). One that is no regular file (a directory, a FIFO)
    does not: `find_pyproject` passes it over, and a project it cannot find the config of is no project."""
    pyproject = directory / "pyproject.toml"
    try:
        data = tomllib.loads(regular_bytes(pyproject).decode("utf-8"))
    except (FileNotFoundError, NotRegular):
        return False
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return True
    tool = data.get("tool")
    return isinstance(tool, dict) and "graphready" in tool


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml above `start` with a [tool.graphready] table, else the nearest
    pyproject.toml (it still marks the project root that module names are dotted from)."""
    start = start.resolve()
    directory = start if start.is_dir() else start.parent
    candidates = [d / "pyproject.toml" for d in (directory, *directory.parents) if (d / "pyproject.toml").is_file()]
    return next((c for c in candidates if is_project_dir(c.parent)), candidates[0] if candidates else None)


def load_config(start: Path, config_file: Path | None = None) -> Config:
    """Config for the project holding `start` (or from an explicit pyproject/TOML file)."""
    pyproject = config_file or find_pyproject(start)
    if pyproject is None:
        root = start.resolve() if start.is_dir() else start.resolve().parent
        return Config(root=root)
    text = read_named_file(pyproject, "config file", ConfigError, " (give its pyproject.toml)")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{pyproject}: invalid TOML: {exc}") from None
    tool = data.get("tool", {})
    table = tool.get("graphready", {}) if isinstance(tool, dict) else {}
    if not isinstance(table, dict):
        raise ConfigError(f"{pyproject}: [tool.graphready] must be a table")
    config = parse_table(table, pyproject.parent.resolve(), pyproject)
    config.configured = isinstance(tool, dict) and "graphready" in tool
    return config


def config_record(config: Config, select: list[str], ignore: list[str]) -> dict:
    """The settings a run used, under their pyproject names, for the JSON summary and the report.

    `select`/`ignore` are the effective lists (command line over pyproject). Empty settings are left
    out; `file` is None when no pyproject.toml was found and the defaults applied.
    """
    record: dict = {"file": str(config.source) if config.source else None, "fail-on": config.fail_on.label}
    values = {
        "profile": config.profile, "hot-paths": config.hot_paths, "exclude-roots": config.exclude_roots,
        "not-compiled": config.not_compiled, "warm-up-before-capture": config.warm_up_before_capture,
        "one-gpu-per-process": config.one_gpu_per_process,
        "eager-if": config.eager_if, "captured-if": config.captured_if,
        **{key: [{"test": a.entry, "in": a.scope} if a.scope else a.entry for a in config.assumptions if a.key == key]
           for key in ASSUME_KEYS},
        "select": select, "ignore": ignore,
        "severity": {code: level.label for code, level in config.severity.items()},
        "exclude": config.exclude, "per-file-ignores": config.per_file_ignores,
        "baseline": str(config.baseline) if config.baseline else None,
    }
    record.update((key, value) for key, value in values.items() if value)
    return record
