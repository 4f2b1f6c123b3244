"""The per-project cache: file index and rule results keyed by content, so warm runs skip parsing.

Under `<root>/.graphready_cache/`: one JSON file read once and written once per run, each file's entry in it holding
its digests and whole-file hits; beside it one JSON file per source file holding its index and hits per function,
read only when used (a run that reuses the hot path reads few) and written only when they changed (a run after an
edit writes one: rewriting them all in one file was a fifth of such a run on 432k lines); a small second one
holding the last run's whole result under a key of every file's digest and every setting: a run where nothing
changed reads only that (pre-commit on an untouched tree); and a third holding its hot path under a key of every
file's index, used again while the files changed since read the same to the walk (lint/engine.py). JSON, not
pickle, because linting untrusted pull requests is a documented use: a planted cache file must
never run code. Plain JSON from the standard library rather than msgpack keeps the install at
libcst and rich. Every entry is checked against the index classes' type hints when it is used;
one of the wrong shape is dropped (and re-made), as is a file that is not a graphready cache.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from graphready import __version__
from graphready.lint.analysis.candidate import Candidate
from graphready.lint.datacodec import ShapeError, decode, encode
from graphready.lint.scope.index import ModuleIndex
from graphready.sourcefile import regular_bytes

CACHE_DIR = ".graphready_cache"
FORMAT = "graphready-lint-cache"
RUN_FORMAT = "graphready-lint-run"
PROJECT_FORMAT = "graphready-lint-project"
BODY = ("index", "functions")  # the fields of an entry kept in a file of its own: what only a file analysed again reads
Result = TypeVar("Result")


@dataclass
class CacheEntry:
    digest: str  # of the file's bytes and the settings that change its analysis
    index: ModuleIndex
    index_digest: str = ""  # of the index as first made (lazy): files indexed alike give one hot path
    analysis: dict[str, list[Candidate]] = field(default_factory=dict)  # hot-set key -> rule hits
    functions: dict[str, list[Candidate]] = field(default_factory=dict)  # function key (functionkeys.py) -> its hits


def _code_stamp(package: Path = Path(__file__).resolve().parent, pattern: str = "*.py") -> str:
    """Changes whenever the linter's own code does, so a cache never outlives the code that wrote it."""
    stats = sorted((str(p.relative_to(package)), p.stat().st_size, p.stat().st_mtime_ns) for p in package.rglob(pattern))
    return hashlib.blake2b(repr((__version__, stats)).encode(), digest_size=8).hexdigest()


@functools.cache
def parsers() -> str:
    """The Python and the libcst that parse the files: another version may read a file otherwise (syntax a newer
    Python added is a parse error to an older one), so a cache made under one is not used under another. libcst's
    version is read from its `_version.py`, not imported (0.3 s, which a run whose result is cached never pays)."""
    spec = importlib.util.find_spec("libcst")
    version = ""
    if spec is not None and spec.submodule_search_locations:
        try:
            version = (Path(next(iter(spec.submodule_search_locations))) / "_version.py").read_text(encoding="utf-8")
        except OSError:
            pass
    return repr((sys.implementation.name, sys.version, version))


def run_stamp(catalog: Path) -> str:
    """A whole result also depends on the rest of graphready (findings, config, profiles) and on the
    rule catalog (names, severities)."""
    package = Path(__file__).resolve().parents[1]
    return _code_stamp(package, "*.py") + _code_stamp(package, "*.toml") + _code_stamp(catalog, "*.toml")


def digest(data: bytes, salt: str) -> str:
    return hashlib.blake2b(data + salt.encode(), digest_size=16).hexdigest()


class LintCache:
    def __init__(self, root: Path, enabled: bool):
        self.stamp = hashlib.blake2b((_code_stamp() + parsers()).encode(), digest_size=8).hexdigest()
        self.path = root / CACHE_DIR / f"lint-{self.stamp}.json"
        self.bodies = root / CACHE_DIR / f"bodies-{self.stamp}"
        self.run_path = root / CACHE_DIR / f"run-{self.stamp}.json"
        self.project_path = root / CACHE_DIR / f"project-{self.stamp}.json"
        self.enabled = enabled
        self.raw: dict[str, object] = {}  # entries as read (decoded on first use), written back as read
        self.entries: dict[str, CacheEntry] = {}  # the decoded ones
        self.changed: set[str] = set()  # entries to encode again on save
        self.dirty = False
        self.loaded = not enabled  # read on first use: a run whose whole result is cached never needs it

    def _load(self) -> dict[str, object]:
        try:
            data = json.loads(regular_bytes(self.path))
        except (OSError, ValueError, RecursionError):  # missing, unreadable, not JSON, absurdly nested
            return {}
        if not (isinstance(data, dict) and data.get("format") == FORMAT and data.get("stamp") == self.stamp
                and isinstance(data.get("entries"), dict)):
            return {}
        return data["entries"]

    def get(self, rel: str, file_digest: str) -> CacheEntry | None:
        entry = self.earlier(rel)
        return entry if entry is not None and entry.digest == file_digest else None

    def earlier(self, rel: str) -> CacheEntry | None:
        """The file's entry whatever its digest (a changed file's hits per function may still hold)."""
        entry = self.entries.get(rel)
        data = self._parsed(rel) if entry is None else None
        if data is not None:
            try:
                entry = self.entries[rel] = decode(CacheEntry, self._whole(rel, data))
            except (ShapeError, TypeError, ValueError, RecursionError, OSError):  # missing, not JSON, the wrong shape
                self._drop(rel)
        return entry

    def body_path(self, rel: str) -> Path:
        """Where the index and hits per function of the file at `rel` are kept."""
        return self.bodies / f"{hashlib.blake2b(rel.encode(), digest_size=12).hexdigest()}.json"

    def index_digest(self, rel: str, file_digest: str) -> str | None:
        """The `index_digest` of the file's entry if it is current, read without decoding the rest of it (a run
        that reuses the hot path decodes only the indexes it reads)."""
        entry = self.entries.get(rel)
        if entry is not None:
            return entry.index_digest if entry.digest == file_digest and entry.index_digest else None
        data = self._parsed(rel)
        if isinstance(data, dict) and data.get("digest") == file_digest and isinstance(data.get("index_digest"), str):
            return data["index_digest"] or None
        return None

    def hits(self, rel: str, file_digest: str, key: str) -> list[Candidate] | None:
        """The file's rule hits cached under `key` if its entry is current, decoding nothing else of it."""
        entry = self.entries.get(rel)
        if entry is not None:
            return entry.analysis.get(key) if entry.digest == file_digest else None
        data = self._parsed(rel)
        if not (isinstance(data, dict) and data.get("digest") == file_digest and isinstance(data.get("analysis"), dict)
                and key in data["analysis"]):
            return None
        try:
            return decode(list[Candidate], data["analysis"][key])
        except (ShapeError, TypeError, ValueError, RecursionError):
            return None

    def _parsed(self, rel: str) -> dict | None:
        """The file's entry as read (not checked yet), or None."""
        if not self.loaded:
            self.raw, self.loaded = self._load(), True
        found = self.raw.get(rel)
        if found is not None and not isinstance(found, dict):
            self._drop(rel)
            return None
        return found

    def _whole(self, rel: str, data: dict) -> dict:
        """An entry as read with its index and hits per function from their file: OSError if it is missing,
        ValueError if it is not JSON or was written for another version of the file."""
        body = json.loads(regular_bytes(self.body_path(rel)))
        if not (isinstance(body, dict) and body.pop("digest", None) == data.get("digest") and set(body) <= set(BODY)):
            raise ShapeError("the index file of an entry is not its index")
        return {**data, **body}

    def _drop(self, rel: str) -> None:
        self.raw.pop(rel, None)
        self.dirty = True  # rewrite without it

    def put(self, rel: str, entry: CacheEntry) -> None:
        if not self.loaded:  # entries of other files are kept on save
            self.raw, self.loaded = self._load(), True
        self.entries[rel] = entry
        self.changed.add(rel)
        self.dirty = True

    def discard(self, rel: str) -> None:
        """Leave the file's entry out of the cache (the next run indexes it again)."""
        if not self.loaded:
            self.raw, self.loaded = self._load(), True
        self._drop(rel)
        self.entries.pop(rel, None)
        self.changed.discard(rel)

    def save(self, present: set[str]) -> None:
        """Each changed entry's index file, then the file of entries (a reader that finds an index file of another
        digest than its entry's remakes the index). Entries of files no longer `present` are dropped with their
        index files: a checkout's renames and deletions do not pile up."""
        gone = [rel for rel in self.raw if rel not in present] if self.loaded else []
        if not (self.enabled and (self.dirty or gone)):
            return
        entries = {rel: entry for rel, entry in self.raw.items() if rel in present}
        try:
            for rel in gone:
                self.body_path(rel).unlink(missing_ok=True)
            for stale in self.path.parent.glob("bodies-*"):
                if stale != self.bodies:
                    shutil.rmtree(stale, ignore_errors=True)
            self.bodies.mkdir(parents=True, exist_ok=True)
            for rel in self.changed:
                encoded = encode(self.entries[rel])
                body = {"digest": encoded["digest"], **{name: encoded.pop(name) for name in BODY if name in encoded}}
                self._replace(self.body_path(rel), json.dumps(body, separators=(",", ":")))
                entries[rel] = encoded
        except (OSError, RecursionError):
            return  # a read-only checkout still lints, just without a cache
        self._write(self.path, "lint-", {"format": FORMAT, "stamp": self.stamp, "entries": entries})

    def _write(self, path: Path, prefix: str, document: dict) -> None:
        """Replace `path` whole (a reader never sees half a file) and drop older files of its kind."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._replace(path.parent / ".gitignore", "*\n")
            for stale in path.parent.glob(f"{prefix}*"):
                if stale != path:
                    stale.unlink()
            self._replace(path, json.dumps(document, separators=(",", ":")))
        except (OSError, RecursionError):
            pass  # a read-only checkout still lints, just without a cache

    @staticmethod
    def _replace(path: Path, text: str) -> None:
        """Write `path` whole: a reader sees the old file or the new one. Written beside it, created anew and renamed
        over it, so a link planted at either name is replaced, never followed (the cache of an untrusted checkout
        must not write outside it)."""
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.unlink(missing_ok=True)
        with temporary.open("x", encoding="utf-8") as handle:
            handle.write(text)
        temporary.replace(path)

    def run_result(self, key: str, kind: type[Result]) -> Result | None:
        """The whole result of the last run, if it was made under `key` (every file digest and setting)."""
        return self._record(self.run_path, RUN_FORMAT, key, kind)

    def save_run_result(self, key: str, result: object) -> None:
        self._save_record(self.run_path, RUN_FORMAT, key, result)

    def project_stage(self, key: str, kind: type[Result]) -> Result | None:
        """The hot path and project facts of the last run, if made under `key` (every index and setting)."""
        return self._record(self.project_path, PROJECT_FORMAT, key, kind)

    def save_project_stage(self, key: str, stage: object) -> None:
        self._save_record(self.project_path, PROJECT_FORMAT, key, stage)

    def _record(self, path: Path, kind_of_file: str, key: str, kind: type[Result]) -> Result | None:
        if not self.enabled:
            return None
        try:
            data = json.loads(regular_bytes(path))
            if not (isinstance(data, dict) and data.get("format") == kind_of_file and data.get("key") == key):
                return None
            return decode(kind, data.get("result"))
        except (OSError, ValueError, TypeError, RecursionError):  # ShapeError is a ValueError
            return None

    def _save_record(self, path: Path, kind_of_file: str, key: str, value: object) -> None:
        if self.enabled:
            prefix = path.name.split("-", 1)[0] + "-"
            self._write(path, prefix, {"format": kind_of_file, "key": key, "result": encode(value)})
