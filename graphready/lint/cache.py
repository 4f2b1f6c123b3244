"""The per-project cache: file index and rule results keyed by content, so warm runs skip parsing.

One pickle under `<root>/.graphready_cache/`, read once and written once per run.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from pathlib import Path

from graphready import __version__

CACHE_DIR = ".graphready_cache"


def _code_stamp() -> str:
    """Changes whenever the linter's own code does, so a cache never outlives the code that wrote it."""
    package = Path(__file__).resolve().parent
    stats = sorted((str(p.relative_to(package)), p.stat().st_size, p.stat().st_mtime_ns) for p in package.rglob("*.py"))
    return hashlib.blake2b(repr((__version__, stats)).encode(), digest_size=8).hexdigest()


def digest(data: bytes, salt: str) -> str:
    return hashlib.blake2b(data + salt.encode(), digest_size=16).hexdigest()


class LintCache:
    def __init__(self, root: Path, enabled: bool):
        self.path = root / CACHE_DIR / f"lint-{_code_stamp()}.pickle"
        self.enabled = enabled
        self.entries: dict[str, dict] = {}
        self.dirty = False
        if enabled and self.path.is_file():
            try:
                with self.path.open("rb") as handle:
                    self.entries = pickle.load(handle)
            except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
                self.entries = {}

    def get(self, rel: str, file_digest: str) -> dict | None:
        entry = self.entries.get(rel)
        return entry if entry is not None and entry["digest"] == file_digest else None

    def put(self, rel: str, entry: dict) -> None:
        self.entries[rel] = entry
        self.dirty = True

    def save(self) -> None:
        if not (self.enabled and self.dirty):
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            (self.path.parent / ".gitignore").write_text("*\n")
            for stale in self.path.parent.glob("lint-*.pickle"):
                stale.unlink()
            temporary = self.path.with_suffix(f".{os.getpid()}.tmp")
            with temporary.open("wb") as handle:
                pickle.dump(self.entries, handle, protocol=pickle.HIGHEST_PROTOCOL)
            temporary.replace(self.path)
        except OSError:
            pass  # a read-only checkout still lints, just without a cache
