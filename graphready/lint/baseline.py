"""Baselines: record today's findings so that only new ones fail (legacy debt does not block).

Entries are matched by a fingerprint of the rule, the file and the text of the offending line
(plus its occurrence number), so they survive code moving up and down the file.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path

from graphready.errors import UsageError
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
    path.write_text(json.dumps({"version": BASELINE_VERSION, "entries": entries}, indent=2) + "\n", encoding="utf-8")


def load_baseline(path: Path) -> set[tuple[str, str, str]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {(e["path"], e["rule"], e["fingerprint"]) for e in data["entries"]}
    except FileNotFoundError:
        raise UsageError(f"baseline file not found: {path}") from None
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise UsageError(f"baseline file {path} is not a graphready baseline: {exc}") from None


def apply_baseline(findings: list[Finding], entries: set[tuple[str, str, str]]) -> None:
    for finding in findings:
        finding.baselined = (finding.path, finding.rule, finding.fingerprint) in entries
