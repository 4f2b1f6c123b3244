"""Baselines: record today's findings so that only new ones fail (legacy debt does not block).

Entries are matched by a fingerprint of the rule, the file and the text of the offending line
(plus its occurrence number), so they survive code moving up and down the file.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

from graphready.errors import UsageError, read_named_file
from graphready.findings import Finding

BASELINE_VERSION = 1


def assign_fingerprints(findings: list[Finding], sources: dict[str, list[str]]) -> None:
    seen: Counter[tuple[str, str, str]] = Counter()
    for finding in sorted(findings, key=Finding.sort_key):
        lines = sources.get(finding.path, [])
        text = lines[finding.line - 1].strip() if 0 < finding.line <= len(lines) else ""
        key = (finding.rule, finding.path, text)
        seen[key] += 1
        digest = hashlib.sha1(f"{finding.rule}|{finding.path}|{text}|{seen[key]}".encode()).hexdigest()
        finding.fingerprint = digest[:16]


def write_baseline(path: Path, findings: list[Finding]) -> None:
    entries = [
        {"path": f.path, "rule": f.rule, "fingerprint": f.fingerprint, "line": f.line, "message": f.message}
        for f in sorted(findings, key=Finding.sort_key)
    ]
    text = json.dumps({"version": BASELINE_VERSION, "entries": entries}, indent=2) + "\n"
    write_output(path, text, "baseline")


def write_output(path: Path, text: str, what: str) -> None:
    """Write a file the user named, or a UsageError that says why it cannot be written."""
    if path.is_dir():
        raise UsageError(f"cannot write the {what} to {path}: it is a directory (name a file in it)")
    blocker = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise UsageError(f"cannot write the {what} to {path}: {blocker} is a file, not a directory")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write the {what} to {path}: {exc.strerror or exc}") from None


def load_baseline(path: Path) -> set[tuple[str, str, str]]:
    """(path, rule, fingerprint) of every entry; a UsageError that says what is wrong otherwise."""
    text = read_named_file(path, "baseline file", UsageError, ", not a baseline file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"baseline file {path} is not a graphready baseline: not JSON ({exc})") from None
    where = f"baseline file {path}"
    if not isinstance(data, dict) or "entries" not in data:
        raise UsageError(f"{where} is not a graphready baseline: expected an object with 'version' and 'entries'"
                         " (write one with `graphready lint --write-baseline FILE`)")
    if data.get("version") != BASELINE_VERSION:
        raise UsageError(f"{where} has version {data.get('version')!r}; this graphready reads version"
                         f" {BASELINE_VERSION} (re-create it with `graphready lint --write-baseline FILE`)")
    entries = data["entries"]
    if not isinstance(entries, list):
        raise UsageError(f"{where} is not a graphready baseline: 'entries' must be a list")
    found = set()
    for number, entry in enumerate(entries, start=1):
        keys = ("path", "rule", "fingerprint")
        if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in keys):
            raise UsageError(f"{where} is not a graphready baseline: entry {number} needs string 'path', 'rule'"
                             " and 'fingerprint' fields")
        found.add((entry["path"], entry["rule"], entry["fingerprint"]))
    return found


def apply_baseline(findings: list[Finding], entries: set[tuple[str, str, str]]) -> None:
    for finding in findings:
        finding.baselined = (finding.path, finding.rule, finding.fingerprint) in entries
