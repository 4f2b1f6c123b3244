"""Does `graphready lint` catch the CUDA-graph bugs that engines really shipped? Recall on engine history.

Released engines hold almost no live CUDA-graph hazards, so `engine_lint.py` can only measure precision.
This benchmark measures recall: `benchmarks/engine_history.tsv` lists SGLang and vLLM releases that
shipped a real CUDA-graph bug (in captured code or in the preparation of a captured step), later fixed
upstream by a CUDA-graph issue or PR, with the buggy line as it is in the wheel. Each buggy release is downloaded once (`pip download --no-deps`,
cached under ~/.cache/graphready-bench/ like `engine_lint.py`), the case's prefixes are unpacked with the
engine's shipped profile (`profile = "sglang"` / `"vllm"`) and linted, and every case is reported as
flagged (a finding that starts inside the statement's line span, with its rule and severity) or not.
Recall counts the cases flagged at a gating severity (error or warning); the error/warning count of each
tree is the noise a user reads around the hit. Rows with `counted = no` are reported but not counted.

    python benchmarks/engine_history.py              # every case
    python benchmarks/engine_history.py --case V2    # one case (repeatable)
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
import tempfile
import zipfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_lint import BenchError, Engine, gating, lint, unpack  # noqa: E402

CASES = Path(__file__).with_name("engine_history.tsv")
COLUMNS = ["case", "engine", "version", "fixed", "path", "line", "end_line", "statement", "hazard", "upstream",
           "prefixes", "counted", "note"]


@dataclass(frozen=True)
class Case:
    case: str
    engine: Engine  # name, the buggy release (pin) and the prefixes unpacked from its wheel
    path: str
    line: int
    end_line: int
    statement: str  # as in the source, whitespace-normalised; "..." skips code between pieces
    counted: bool
    note: str  # why it is not flagged (empty when it is)

    @property
    def where(self) -> str:
        span = f"{self.line}" if self.line == self.end_line else f"{self.line}-{self.end_line}"
        return f"{self.path}:{span}"


def load_cases(path: Path, wanted: list[str] | None) -> list[Case]:
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            rows = list(csv.DictReader(handle, delimiter="\t"))
    except OSError as exc:
        raise BenchError(f"cannot read {path}: {exc.strerror}") from None
    cases = []
    for row in rows:
        if any(row.get(column) is None for column in COLUMNS) or row["counted"] not in ("yes", "no"):
            raise BenchError(f"{path}: malformed row {row.get('case')!r} (columns {', '.join(COLUMNS)}; "
                             "counted is yes or no)")
        engine = Engine(row["engine"], row["version"], tuple(row["prefixes"].split()))
        cases.append(Case(row["case"], engine, row["path"], int(row["line"]), int(row["end_line"]),
                          row["statement"], row["counted"] == "yes", row["note"]))
    if wanted:
        unknown = sorted(set(wanted) - {c.case for c in cases})
        if unknown:
            raise BenchError(f"unknown case(s) {', '.join(unknown)} in {path}")
        cases = [c for c in cases if c.case in wanted]
    return cases


def squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def check_statement(tree: Path, case: Case) -> None:
    """The TSV's line numbers must still point at the buggy statement in this wheel."""
    source = tree / case.path
    if not source.is_file():
        raise BenchError(f"{case.case}: {case.path} is not in {case.engine.requirement} under its prefixes")
    span = squash("".join(source.read_text(encoding="utf-8").splitlines()[case.line - 1:case.end_line]))
    at = 0
    for piece in filter(None, (squash(p) for p in case.statement.split("..."))):
        at = span.find(piece, at)
        if at < 0:
            raise BenchError(f"{case.case}: {case.where} in {case.engine.requirement} does not hold "
                             f"`{case.statement}`")
        at += len(piece)


def hits(doc: dict, case: Case) -> list[dict]:
    return sorted((f for f in doc["findings"] if f["path"] == case.path and case.line <= f["line"] <= case.end_line),
                  key=lambda f: (f["line"], f["rule"]))


def verdict(found: list[dict]) -> tuple[str, bool]:
    shown = ", ".join(f"{f['rule']} {f['severity']} l.{f['line']}" for f in found)
    if gating(found):
        return f"flagged: {shown}", True
    if found:
        return f"info only (below fail-on): {shown}", False
    return "not flagged", False


def one_line(message: str) -> str:
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return lines[0] if len(lines) < 2 else f"{lines[0]} {lines[-1]}"


def run(cases: list[Case], root: Path) -> int:
    reports: dict[Engine, dict] = {}
    for engine in dict.fromkeys(c.engine for c in cases):  # one tree per release and prefix set, in TSV order
        label = f"{engine.name}-{engine.pin}-{len(reports)}"
        tree, files, lines = unpack(engine, "profile", root / label)
        for case in cases:  # fail before the lint if a line number no longer points at its statement
            if case.engine == engine:
                check_statement(tree, case)
        doc, seconds = lint(tree, root / f"{label}.json")
        reports[engine] = doc
        severity = Counter(f["severity"] for f in doc["findings"])
        names = ", ".join(c.case for c in cases if c.engine == engine)
        print(f"== {engine.requirement} ({names}): {files} files, {lines:,} lines, lint {seconds:.1f} s; "
              f"{severity['error']} error, {severity['warning']} warning, {severity['info']} info")
    print()
    flagged, counted, stale = [], [], []
    width = max(len(c.where) for c in cases)
    for case in cases:
        text, gated = verdict(hits(reports[case.engine], case))
        print(f"{case.case:<3} {case.engine.requirement:<20} {case.where:<{width}}  {text}"
              + ("" if case.counted else "  [not counted]"))
        if not gated and case.note:
            print(f"    why: {case.note}")
        if gated == bool(case.note) and case.counted:
            stale.append(case.case)
        if case.counted:
            counted.append(case.case)
            if gated:
                flagged.append(case.case)
    print(f"\nrecall: {len(flagged)}/{len(counted)} historical hazards flagged at error/warning"
          + (f" ({', '.join(flagged)})" if flagged else ""))
    if stale:  # flagged with a why-not note, or missed without one: the TSV's last column needs an update
        print(f"note column out of date for: {', '.join(stale)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=Path, default=CASES)
    parser.add_argument("--case", action="append", metavar="ID", help="only this case (repeatable)")
    parser.add_argument("--keep", type=Path, metavar="DIR", help="unpack and write reports here (kept)")
    args = parser.parse_args(argv)
    try:
        cases = load_cases(args.cases, args.case)
        with tempfile.TemporaryDirectory() as scratch:
            return run(cases, args.keep or Path(scratch))
    except BenchError as exc:
        print(f"engine_history: {one_line(str(exc))}", file=sys.stderr)
    except (zipfile.BadZipFile, OSError) as exc:
        print(f"engine_history: cannot unpack a wheel: {exc}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
