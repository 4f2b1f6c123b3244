"""Inline suppressions: `# graphready: ignore[GR101] reason`, `# graphready: ignore`, `# noqa: GR101`.

A suppression that silences nothing is itself reported (GR000), so stale ones do not pile up.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field

IGNORE = re.compile(r"#\s*graphready:\s*ignore(?:\[(?P<codes>[^\]]*)\])?(?P<reason>.*)$")
NOQA = re.compile(r"#\s*noqa:\s*(?P<codes>[A-Z]+\d+(?:\s*[,\s]\s*[A-Z]+\d+)*)", re.IGNORECASE)
QUICK_CHECK = re.compile(r"graphready:\s*ignore|noqa:\s*GR", re.IGNORECASE)


@dataclass
class Suppression:
    line: int
    column: int
    codes: frozenset[str] | None  # None: every code
    reason: str
    used: set[str] = field(default_factory=set)

    def covers(self, rule: str) -> bool:
        return self.codes is None or rule in self.codes


def _comments(source: str):
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                yield token.start[0], token.start[1], token.string
    except (tokenize.TokenError, SyntaxError, IndentationError):
        for lineno, text in enumerate(source.splitlines(), start=1):
            position = text.find("#")
            if position >= 0:
                yield lineno, position, text[position:]


def parse_suppressions(source: str) -> list[Suppression]:
    if not QUICK_CHECK.search(source):
        return []
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
