"""Built-in profiles: an engine's decode roots, never-captured code and eager-only predicates.

Each profile is a TOML file beside this module with the same list keys as `[tool.graphready]`
(`hot-paths`, `exclude-roots`, `not-compiled`, `eager-if`, `captured-if`, and `assume-true` / `assume-false` for
facts every deployment of the engine shares), the `gpu-capability` it assumes,
whether the engine runs each step eagerly before capturing it (`warm-up-before-capture`) and drives one GPU
per process (`one-gpu-per-process`), and a `description`; data only.
"""

from __future__ import annotations

import difflib
import tomllib
from importlib import resources

from graphready.errors import UsageError

PROFILE_KEYS = {"description", "hot-paths", "exclude-roots", "not-compiled", "eager-if", "captured-if",
                "gpu-capability", "warm-up-before-capture", "one-gpu-per-process", "assume-true", "assume-false"}


def available() -> list[str]:
    return sorted(p.name[: -len(".toml")] for p in resources.files(__package__).iterdir() if p.name.endswith(".toml"))


def load_profile(name: str) -> dict:
    if name not in available():
        hint = difflib.get_close_matches(name, available(), n=1)
        suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise UsageError(f"[tool.graphready] unknown profile {name!r}{suggestion}; built-in profiles: "
                         f"{', '.join(available())}")
    data = tomllib.loads(resources.files(__package__).joinpath(f"{name}.toml").read_text(encoding="utf-8"))
    unknown = set(data) - PROFILE_KEYS
    if unknown:
        raise UsageError(f"profile {name!r} has unknown keys: {', '.join(sorted(unknown))}")
    return data
