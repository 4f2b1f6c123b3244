"""The per-project cache: file index and rule results keyed by content, so warm runs skip parsing.

One JSON file under `<root>/.graphready_cache/`, read once and written once per run. JSON, not
pickle, because linting untrusted pull requests is a documented use: a planted cache file must
never run code. Plain JSON from the standard library rather than msgpack keeps the install at
libcst and rich. Every entry is checked against the index classes' type hints when it is used;
one of the wrong shape is dropped (and re-made), as is a file that is not a graphready cache.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from graphready import __version__
from graphready.lint.analysis.candidate import Candidate
from graphready.lint.datacodec import ShapeError, decode, encode
from graphready.lint.scope.index import ModuleIndex

CACHE_DIR = ".graphready_cache"
FORMAT = "graphready-lint-cache"


@dataclass
class CacheEntry:
    digest: str  # of the file's bytes and the settings that change its analysis
    index: ModuleIndex
    analysis: dict[str, list[Candidate]] = field(default_factory=dict)  # hot-set key -> rule hits


def _code_stamp() -> str:
    """Changes whenever the linter's own code does, so a cache never outlives the code that wrote it."""
    package = Path(__file__).resolve().parent
    stats = sorted((str(p.relative_to(package)), p.stat().st_size, p.stat().st_mtime_ns) for p in package.rglob("*.py"))
    return hashlib.blake2b(repr((__version__, stats)).encode(), digest_size=8).hexdigest()


def digest(data: bytes, salt: str) -> str:
    return hashlib.blake2b(data + salt.encode(), digest_size=16).hexdigest()


class LintCache:
    def __init__(self, root: Path, enabled: bool):
        self.stamp = _code_stamp()
        self.path = root / CACHE_DIR / f"lint-{self.stamp}.json"
        self.enabled = enabled
        self.raw: dict[str, object] = {}  # entries as read, decoded on first use
        self.entries: dict[str, CacheEntry] = {}
        self.dirty = False
        if enabled:
            self.raw = self._load()

    def _load(self) -> dict[str, object]:
        try:
            with self.path.open("rb") as handle:
                data = json.load(handle)
        except (OSError, ValueError, RecursionError):  # missing, unreadable, not JSON, absurdly nested
            return {}
        if not (isinstance(data, dict) and data.get("format") == FORMAT and data.get("stamp") == self.stamp
                and isinstance(data.get("entries"), dict)):
            return {}
        return data["entries"]

    def get(self, rel: str, file_digest: str) -> CacheEntry | None:
        entry = self.entries.get(rel)
        if entry is None and rel in self.raw:
            raw = self.raw.pop(rel)
            try:
                entry = decode(CacheEntry, raw)
            except (ShapeError, TypeError, ValueError, RecursionError):
                entry = None
                self.dirty = True  # rewrite without it
            if entry is not None:
                self.entries[rel] = entry
        return entry if entry is not None and entry.digest == file_digest else None

    def put(self, rel: str, entry: CacheEntry) -> None:
        self.entries[rel] = entry
        self.raw.pop(rel, None)
        self.dirty = True

    def save(self) -> None:
        if not (self.enabled and self.dirty):
            return
        entries = dict(self.raw)
        entries.update((rel, encode(entry)) for rel, entry in self.entries.items())
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            (self.path.parent / ".gitignore").write_text("*\n")
            for stale in self.path.parent.glob("lint-*"):
                if stale != self.path:
                    stale.unlink()
            temporary = self.path.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_text(json.dumps({"format": FORMAT, "stamp": self.stamp, "entries": entries},
                                            separators=(",", ":")), encoding="utf-8")
            temporary.replace(self.path)
        except (OSError, RecursionError):
            pass  # a read-only checkout still lints, just without a cache
