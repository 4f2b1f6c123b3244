"""What changed since a lint baseline: `{"version": 1, "entries": [{"path", "rule", "fingerprint"}]}`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from graphready.errors import UsageError
from graphready.findings import Finding

BaselineKey = tuple[str, str, str]


@dataclass(frozen=True)
class BaselineDiff:
    new: list[Finding]  # found now, not in the baseline
    fixed: list[dict]  # baseline entries no longer found


def load_baseline(path: Path) -> set[BaselineKey]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"baseline {path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"baseline {path}: cannot read: {exc}") from None
    if not isinstance(data, dict) or data.get("version") != 1:
        raise UsageError(f"baseline {path}: expected a version 1 baseline file")
    entries = data.get("entries")
    if not isinstance(entries, list):
        raise UsageError(f"baseline {path}: expected an 'entries' list")
    try:
        return {(e["path"], e["rule"], e["fingerprint"]) for e in entries}
    except (KeyError, TypeError):
        raise UsageError(f"baseline {path}: every entry needs 'path', 'rule' and 'fingerprint'") from None


def finding_key(finding: Finding) -> BaselineKey:
    return (finding.path, finding.rule, finding.fingerprint or "")


def diff_against(findings: list[Finding], baseline: set[BaselineKey]) -> BaselineDiff:
    """New = not in the baseline; fixed = in the baseline, no longer found."""
    found = {finding_key(f) for f in findings}
    new = [f for f in findings if finding_key(f) not in baseline]
    fixed = [{"path": p, "rule": r, "fingerprint": fp} for p, r, fp in sorted(baseline - found)]
    return BaselineDiff(new=new, fixed=fixed)
