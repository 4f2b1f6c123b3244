"""Inline suppressions: `# graphready: ignore[GR101] reason`, `# graphready: ignore`, `# noqa: GR101`.

A suppression that silences nothing is itself reported (GR000), so stale ones do not pile up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

IGNORE = re.compile(r"#\s*graphready:\s*ignore(?:\[(?P<codes>[^\]]*)\])?(?P<reason>.*)$")
NOQA = re.compile(r"#\s*noqa:\s*(?P<codes>[A-Z]+\d+(?:\s*[,\s]\s*[A-Z]+\d+)*)", re.IGNORECASE)


@dataclass
class Suppression:
    line: int
    column: int
    codes: frozenset[str] | None  # None: every code
    reason: str
    used: set[str] = field(default_factory=set)

    def covers(self, rule: str) -> bool:
        return self.codes is None or rule in self.codes


def _comment_start(line: str) -> int:
    """Index of the `#` that starts a comment on this line, skipping `#` inside string literals."""
    quote = ""
    index = 0
    while index < len(line):
        char = line[index]
        if quote:
            if char == "\\":
                index += 1
            elif line.startswith(quote, index):
                index += len(quote) - 1
                quote = ""
        elif char in "\"'":
            quote = char * 3 if line.startswith(char * 3, index) else char
            index += len(quote) - 1
        elif char == "#":
            return index
        index += 1
    return -1


def _comments(source: str):
    """(line, column, text) of comments on lines that can hold a suppression (cheap pre-filter)."""
    for lineno, text in enumerate(source.splitlines(), start=1):
        if "graphready" not in text and "noqa" not in text.lower():
            continue
        position = _comment_start(text)
        if position >= 0:
            yield lineno, position, text[position:]


def parse_suppressions(source: str) -> list[Suppression]:
    if "graphready" not in source and "noqa" not in source and "NOQA" not in source:
        return []  # plain substring tests: a regex over every file dominated warm runs
    found = []
    for line, column, comment in _comments(source):
        match = IGNORE.search(comment)
        if match:
            codes = match.group("codes")
            parsed = frozenset(c.strip().upper() for c in codes.split(",") if c.strip()) if codes is not None else None
            reason = match.group("reason").strip().lstrip(":-").strip()
            found.append(Suppression(line, column + match.start(), parsed, reason))
            continue
        match = NOQA.search(comment)
        if match:
            codes = frozenset(c.upper() for c in re.split(r"[\s,]+", match.group("codes")) if c.upper().startswith("GR"))
            if codes:
                found.append(Suppression(line, column + match.start(), codes, ""))
    return found
