"""The `hf` target's closing table: one row per architecture, from the results of its `<type>.step[B]` units.

Verdicts: `ready` (every batch size captured, replayed right and raised nothing), `capture fails`,
`not ready` (captured, with findings), `step raises` (the eager step itself raised), `not built`
(no small config, no StaticCache support, or the prefill raised: the reason says which, and where
in transformers), `not checked` (the worker died or hung). The first cause is, for the first batch
size with a finding at or above `fail_on`: the capture's own error when it failed, else the first
such finding located in transformers (not left at the target's call by a check that could not place
it), else the first; its location is shortened to `transformers/...`. The JSON keeps its message
whole; the table cells keep the part that says why (a replay mismatch's explanation), cut short.
No torch import: the report side uses it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from graphready.findings import Severity
from graphready.harness.keys import key_of

NOT_BUILT = "NotBuilt: "
_RAISED_AT = re.compile(r" \((transformers/[^()\s]+:\d+)\)$")
_LOST = ("the worker", "cannot load the target")  # the pool's words for a unit whose worker died, hung or never loaded
CAUSE_CHARS = 96
# GD301's opening (checks/replay/replay.py): the table shows what follows it, the explanation, instead
_MISMATCH = "replay differs from eager on the same inputs and state: "
_CAPTURE_FAILED = "capture failed"  # GD201's opening when the capture raised (checks/capture.py)
_LIBRARY = "/transformers/"
COLUMNS = ("architecture", "verdict", "first cause", "where")


@dataclass
class Row:
    architecture: str
    verdict: str
    cause: str = ""
    where: str = ""
    keys: str = ""  # the batch sizes checked, with the failing ones marked

    def to_json(self) -> dict:
        return {"architecture": self.architecture, "verdict": self.verdict, "cause": self.cause,
                "where": self.where, "keys": self.keys}


def short_path(path: str, line: int) -> str:
    """`transformers/models/x/modeling_x.py:12` for a file inside transformers; the path itself otherwise."""
    if _LIBRARY in path:
        path = "transformers/" + path.rsplit(_LIBRARY, 1)[1]
    return f"{path}:{line}"


def _architecture(name: str) -> str | None:
    base, _ = key_of(name)
    base = base or name
    return base[: -len(".step")] if base.endswith(".step") else None


def _row(architecture: str, results: list, fail_on: Severity) -> Row:
    keys = " ".join(f"{key_of(r.name)[1] or '-'}{'' if r.status(fail_on) == 'pass' else '!'}" for r in results)
    for result in results:
        if result.error and NOT_BUILT in result.error:
            reason = result.error.split(NOT_BUILT, 1)[1]
            reason = reason.split(": ", 1)[1] if reason.startswith(f"{architecture}: ") else reason
            raised_at = _RAISED_AT.search(reason)  # hf.NotBuilt ends with where transformers raised
            if raised_at:
                return Row(architecture, "not built", reason[: raised_at.start()], raised_at.group(1), keys)
            return Row(architecture, "not built", reason, "", keys)
    for result in results:
        if result.status(fail_on) == "pass":
            continue
        real = [f for f in result.findings if f.severity >= fail_on and not f.internal]
        broke = [f for f in real if result.capture == "failed" and f.message.startswith(_CAPTURE_FAILED)]
        first = next(iter(broke + [f for f in real if _LIBRARY in f.path] + real + result.findings), None)
        if result.capture == "failed":
            verdict = "capture fails"
        elif result.error is not None and result.capture is None:
            verdict = "not checked" if result.error.startswith(_LOST) else "step raises"
        elif real:
            verdict = "not ready"
        else:
            verdict = "internal error"
        cause = f"{first.rule} {first.message}" if first else (result.error or "")
        return Row(architecture, verdict, cause, short_path(first.path, first.line) if first else "", keys)
    return Row(architecture, "ready", "", "", keys)


def architecture_rows(results: list, fail_on: Severity = Severity.WARNING) -> list[Row]:
    """One row per architecture among `results` (UnitResult), in the order the units ran."""
    grouped: dict[str, list] = {}
    for result in results:
        architecture = _architecture(result.name)
        if architecture is not None:
            grouped.setdefault(architecture, []).append(result)
    return [_row(architecture, group, fail_on) for architecture, group in grouped.items()]


def brief(cause: str) -> str:
    """A cause as a table cell: a replay mismatch by its explanation (`GD301 replay differs: add got the Python
    value 27 now; the graph froze 26 at capture`), then cut to CAUSE_CHARS."""
    rule, _, message = cause.partition(" ")
    if message.startswith(_MISMATCH) and "; " in message:
        cause = f"{rule} replay differs: {message.split('; ', 1)[1]}"
    return cause if len(cause) <= CAUSE_CHARS else cause[: CAUSE_CHARS - 3] + "..."


def _cells(row: Row) -> tuple[str, ...]:
    cause = brief(row.cause)
    return (row.architecture, row.verdict, cause or "-", row.where or "-")


def render_text(rows: list[Row]) -> str:
    """The table as aligned plain text, with a count of each verdict."""
    if not rows:
        return ""
    cells = [COLUMNS, *map(_cells, rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS) - 1)]
    lines = ["  ".join(c[i].ljust(widths[i]) for i in range(len(widths))) + "  " + c[-1] for c in cells]
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.verdict] = counts.get(row.verdict, 0) + 1
    lines.append(f"{len(rows)} architectures: " + ", ".join(f"{n} {verdict}" for verdict, n in counts.items()))
    return "\n".join(lines) + "\n"


def render_markdown(rows: list[Row]) -> str:
    """The table in Markdown (docs/hf.md); `|` inside a cell is escaped."""
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(c) for c in _cells(row)) + " |" for row in rows]
    return "\n".join(lines) + "\n"
