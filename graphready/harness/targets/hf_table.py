"""The `hf` target's closing table: one row per architecture, from the results of its `<type>.step[B]` units,
with the verdicts of its `<type>.layer<i>` units and of `<type>.compiled` (--compile) in columns of their own.

Verdicts: `ready` (every batch size captured, replayed right and raised nothing), `capture fails`,
`not ready` (captured, with findings), `step raises` (the eager step itself raised), `not built`
(no small config, no StaticCache support, or the prefill raised: the reason says which, and where
in transformers), `not checked` (the worker died or hung). The first cause is, for the first batch
size with a finding at or above `fail_on`: the capture's own error when it failed, else the first
such finding located in transformers (not left at the target's call by a check that could not place
it), else the first; its location is shortened to `transformers/...`. The JSON keeps its message
whole; the table cells keep the part that says why (a replay mismatch's explanation), cut short.
The layers cell is `ready` when every layer unit is, else each other layer with its verdict and rule
(`layer1 not ready GD301`); the compiled cell is the compiled step's verdict, `no graphs` where the
compiler skipped CUDA graphs (GD601). Both columns appear only when a row has such units.
A row that failed where transformers itself cannot decode on a StaticCache (hf_limits) says why
in one line instead. No torch import: the report side uses it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from graphready.findings import Severity
from graphready.harness.keys import key_of
from graphready.harness.pool import NOT_CHECKED
from graphready.harness.targets.hf_limits import limit

NOT_BUILT = "NotBuilt: "
_RAISED_AT = re.compile(r" \((transformers/[^()\s]+:\d+)\)$")
# the pool's words for a unit whose worker died, hung or never loaded, or that the run's time limit left unchecked
_LOST = ("the worker", "cannot load the target", NOT_CHECKED)
CAUSE_CHARS = 96
# GD301's opening (checks/replay/replay.py): the table shows what follows it, the explanation, instead
_MISMATCH = "replay differs from eager on the same inputs and state: "
_CAPTURE_FAILED = "capture failed"  # GD201's opening when the capture raised (checks/capture.py)
_LIBRARY = "/transformers/"
COLUMNS = ("architecture", "verdict", "first cause", "where")
UNIT_COLUMNS = ("layers", "compiled")  # after the verdict, when any row has them
_KIND = re.compile(r"step|compiled|layer\d+")
_RULE = re.compile(r"GD\d{3}")
_UNDECODABLE = ("not built", "step raises")  # the verdicts a known transformers limit explains (hf_limits)


@dataclass
class Row:
    architecture: str
    verdict: str
    cause: str = ""
    where: str = ""
    keys: str = ""  # the batch sizes checked, with the failing ones marked
    layers: str = ""  # the layer units' verdicts ("" when none ran)
    compiled: str = ""  # the compiled step's verdict ("" without --compile)

    def to_json(self) -> dict:
        return {"architecture": self.architecture, "verdict": self.verdict, "cause": self.cause,
                "where": self.where, "keys": self.keys, "layers": self.layers, "compiled": self.compiled}


def short_path(path: str, line: int) -> str:
    """`transformers/models/x/modeling_x.py:12` for a file inside transformers; the path itself otherwise."""
    if _LIBRARY in path:
        path = "transformers/" + path.rsplit(_LIBRARY, 1)[1]
    return f"{path}:{line}"


def _unit_kind(name: str) -> tuple[str, str] | None:
    """(architecture, `step` | `compiled` | `layer<i>`) of an hf unit name, None for any other unit."""
    base, _ = key_of(name)
    architecture, dot, kind = (base or name).rpartition(".")
    return (architecture, kind) if dot and _KIND.fullmatch(kind) else None


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


def _said(row: Row) -> str:
    """A verdict with the rule behind it (`not ready GD301`), for the layers and compiled cells."""
    rule = row.cause.split(" ", 1)[0]
    return f"{row.verdict} {rule}" if _RULE.fullmatch(rule) else row.verdict


def _compiled_cell(results: list, fail_on: Severity) -> str:
    if not results:
        return ""
    if any(r.capture == "skipped" or any(f.rule == "GD601" for f in r.findings) for r in results):
        return "no graphs"
    return _said(_row("", results, fail_on))


def _layers_cell(layers: dict[str, list], fail_on: Severity) -> str:
    rows = {kind: _row("", results, fail_on) for kind, results in layers.items()}
    verdicts = {row.verdict for row in rows.values()}
    if len(verdicts) == 1 and verdicts & {"ready", "not built"}:
        return verdicts.pop()
    return ", ".join(f"{kind} {_said(row)}" for kind, row in rows.items() if row.verdict != "ready")


def architecture_rows(results: list, fail_on: Severity = Severity.WARNING) -> list[Row]:
    """One row per architecture with a step unit among `results` (UnitResult), in the order the units ran."""
    grouped: dict[str, dict[str, list]] = {}
    for result in results:
        found = _unit_kind(result.name)
        if found is not None:
            grouped.setdefault(found[0], {}).setdefault(found[1], []).append(result)
    rows = []
    for architecture, kinds in grouped.items():
        if "step" not in kinds:
            continue
        row = _row(architecture, kinds["step"], fail_on)
        why = limit(architecture, row.where) if row.verdict in _UNDECODABLE else None
        if why:
            row.cause = why
        row.layers = _layers_cell({k: v for k, v in kinds.items() if k.startswith("layer")}, fail_on)
        row.compiled = _compiled_cell(kinds.get("compiled", []), fail_on)
        rows.append(row)
    return rows


def brief(cause: str) -> str:
    """A cause as a table cell: a replay mismatch by its explanation (`GD301 replay differs: add got the Python
    value 27 now; the graph froze 26 at capture`), then cut to CAUSE_CHARS."""
    rule, _, message = cause.partition(" ")
    if message.startswith(_MISMATCH) and "; " in message:
        cause = f"{rule} replay differs: {message.split('; ', 1)[1]}"
    return cause if len(cause) <= CAUSE_CHARS else cause[: CAUSE_CHARS - 3] + "..."


def _columns(rows: list[Row]) -> tuple[str, ...]:
    extra = tuple(name for name in UNIT_COLUMNS if any(getattr(row, name) for row in rows))
    return (*COLUMNS[:2], *extra, *COLUMNS[2:])


def _cells(row: Row, columns: tuple[str, ...]) -> tuple[str, ...]:
    cells = {"architecture": row.architecture, "verdict": row.verdict, "layers": row.layers or "-",
             "compiled": row.compiled or "-", "first cause": brief(row.cause) or "-", "where": row.where or "-"}
    return tuple(cells[name] for name in columns)


def render_text(rows: list[Row]) -> str:
    """The table as aligned plain text, with a count of each verdict."""
    if not rows:
        return ""
    columns = _columns(rows)
    cells = [columns, *(_cells(row, columns) for row in rows)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(columns) - 1)]
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

    columns = _columns(rows)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(c) for c in _cells(row, columns)) + " |" for row in rows]
    return "\n".join(lines) + "\n"
