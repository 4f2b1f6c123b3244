"""The line numbers in a function's index facts, replaced: by their ranks or by offsets from its first line.

An edit that moves lines renumbers every line below it. The hot walk reads a function's lines only against each
other (is this call in that eager-only branch, is this use of a class in code that never runs), so the walk over
a file is the same while each function's lines keep their order: a file's signature for the walk takes ranks.
A function's rule hits depend on its text and facts, not on where the file puts them: its cache key takes
offsets, and its hits are kept as offsets too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from graphready.lint.scope.index import FunctionInfo

# FunctionInfo's fields holding line numbers, as `datacodec.encode` writes them: None for a number, else the
# positions of the line numbers in each item of the list (`excluded`: [[start, end], ...]). Call sites hold theirs
# under "line". tests/lint/test_line_positions.py checks that no other field of theirs holds a line number.
LINE_FIELDS: dict[str, tuple[int, ...] | None] = {
    "lineno": None, "end_lineno": None, "first_line": None,
    "excluded": (0, 1), "memo": (0,), "cold_spans": (0, 2), "capture_bodies": (0, 1), "never_runs": (0, 1),
    "absent_regions": (1, 2), "assumed": (1, 2), "padded_rows": (0,),
}


def lines_of(encoded: dict, more: Iterable[int] = ()) -> list[int]:
    """Every line number in an encoded FunctionInfo, and `more`, sorted, each once."""
    found = set(more)
    for name, value in encoded.items():  # only the fields off their defaults are there: few
        if name in LINE_FIELDS:
            positions = LINE_FIELDS[name]
            if positions is None:
                found.add(value)
            else:
                found.update(item[i] for item in value for i in positions)
        elif name == "calls":
            found.update(call["line"] for call in value)
    return sorted(found)


def renumbered(encoded: dict, number: Callable[[int], int]) -> dict:
    """A copy of an encoded FunctionInfo with each line number `number(line)`."""
    copy = {}
    for name, value in encoded.items():
        if name in LINE_FIELDS:
            positions = LINE_FIELDS[name]
            if positions is None:
                value = number(value)
            else:
                value = [[number(v) if i in positions else v for i, v in enumerate(item)] for item in value]
        elif name == "calls":
            value = [{**call, "line": number(call["line"])} for call in value]
        copy[name] = value
    return copy


def ranked(encoded: dict, more: Iterable[int] = ()) -> tuple[dict, dict[int, int]]:
    """The encoded FunctionInfo with lines as ranks among its own (and `more`), and line -> rank."""
    rank = {line: position for position, line in enumerate(lines_of(encoded, more))}
    return renumbered(encoded, rank.__getitem__), rank


def offsets(encoded: dict, info: FunctionInfo) -> dict:
    """The encoded FunctionInfo with lines as offsets from the function's first line (its first decorator's)."""
    return renumbered(encoded, lambda line: line - info.first_line)
