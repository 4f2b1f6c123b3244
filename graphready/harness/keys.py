"""Capture keys in a check report: which keys of a unit ran graphed and passed, which did not.

A unit declaring `keys` is checked as one unit per key, named `name[key]` (`Unit.expand`); this
module reads those names back, so the per-key verdicts also survive a crashed worker (whose
result carries only the name). No torch import: the report side uses it.
"""

from __future__ import annotations

import re
from typing import Any

_KEYED = re.compile(r"(?P<base>.+)\[(?P<key>[^\[\]]+)\]")


def key_of(name: str) -> tuple[str | None, str | None]:
    """(unit, key) for a per-key unit name `unit[key]`; (None, None) for any other name."""
    found = _KEYED.fullmatch(name)
    return (found.group("base"), found.group("key")) if found else (None, None)


def _verdict(row: dict[str, Any]) -> str:
    if row.get("capture") == "ok" and row.get("status") == "pass":
        return "graphed"
    if row.get("capture") == "failed":
        return "capture failed"
    if row.get("capture") == "ok":
        return "graphed with findings"
    return "not checked" if row.get("status") == "error" else "not captured"


def summarize_keys(rows: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    """Tag each per-key row with `base_unit` and `key`, and put every keyed unit's verdicts into `summary`.

    `summary["capture_keys"]` maps unit -> key -> verdict ("graphed", "graphed with findings",
    "capture failed", "not checked"); one note per keyed unit says the same in a line.
    """
    table: dict[str, dict[str, str]] = {}
    for row in rows:
        base, key = key_of(str(row.get("name", "")))
        if base is None:
            continue
        row["base_unit"], row["key"] = base, key
        table.setdefault(base, {})[key] = _verdict(row)
    if not table:
        return
    summary["capture_keys"] = table
    notes = summary.setdefault("notes", [])
    for base, verdicts in table.items():
        by_verdict: dict[str, list[str]] = {}
        for key, verdict in verdicts.items():
            by_verdict.setdefault(verdict, []).append(key)
        parts = [f"{verdict} for {', '.join(keys)}" for verdict, keys in by_verdict.items()]
        notes.append(f"capture keys of {base}: " + "; ".join(parts))
