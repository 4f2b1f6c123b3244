"""GD309's messages: what a padded replay showed, which padded rows explain it, and the fix."""

from __future__ import annotations

from typing import Sequence

from graphready.harness.frames import Location
from graphready.output.summary import counted

_FIX = ("reset every buffer the graph reads in the pad branch (`zero_()`/`fill_()` to a value that points at a "
        "reserved padding slot) or write all the captured rows")


def lines_at(locations: Sequence[Location | None], anchor: Location) -> str:
    """`line 57` / `lines 57, 58` in the finding's own file, `path:line` elsewhere."""
    same = [loc.line for loc in locations if loc is not None and loc.path == anchor.path]
    other = [loc.describe() for loc in locations if loc is not None and loc.path != anchor.path]
    parts = ([("line " if len(same) == 1 else "lines ") + ", ".join(map(str, same))] if same else []) + other
    return ", ".join(parts)


def _replayed(key: int, rows: int) -> str:
    return f"the graph captured for {key} rows, replayed for {counted(rows, 'real row')} padded to {key}"


def mismatch_message(key: int, rows: int, what: str, cause: str) -> str:
    text = (f"{_replayed(key, rows)} right after a full batch, does not match an eager step on "
            f"{'that row' if rows == 1 else 'those rows'}: {what}")
    return text + (f"; {cause}" if cause else "") + f"; {_FIX}"


def unhooked_message(key: int, rows: int, what: str) -> str:
    return (f"{_replayed(key, rows)} (the other rows left as the previous replay, a full batch, wrote them: the "
            "harness's own padding; declare pad_inputs to pad as the engine does) does not match an eager step on "
            f"{'that row' if rows == 1 else 'those rows'}: {what}. Its real rows depend on its padded rows: keep each "
            "row's result independent of the others, or mask the padded rows by the real count held in a device "
            "tensor (SGLang's num_token_non_padded)")


def shape_message(key: int, rows: int, name: str, got: tuple, want: tuple, real: Sequence[int]) -> str:
    dims = [d for d, (g, w) in enumerate(zip(got, want)) if g != w]
    if len(got) == len(want) and len(dims) == 1 and got[dims[0]] == tuple(real)[dims[0]] != want[dims[0]]:
        why = "it is sized by the real batch, not padded to the captured one"
    elif len(got) == len(want) and dims and all(g > w for g, w in zip(got, want) if g != w):
        why = "it is longer than the captured batch, so the graph reads rows past it"
    else:
        why = "the graph cannot read it"
    return (f"the replay preparation hands the graph captured for {key} rows {name} of shape {got} for "
            f"{counted(rows, 'real row')}, where the graph was captured with {want}: {why}; slice and pad every graph "
            "input to the captured batch (`buf[:bs]`, padded rows filled)")


def raised_message(key: int, rows: int, exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    error = type(exc).__name__ + (f": {lines[0]}" if lines else "")
    return (f"the replay preparation raised for {counted(rows, 'real row')} padded to the graph captured for {key} "
            f"({error}), while it prepares a full batch of {key} rows: something it builds is sized by the real "
            "batch where the graph takes the padded one; size it by the captured batch")


def stale_index_message(key: int, rows: int, cause: str) -> str:
    return (f"{_replayed(key, rows)}, indexes with stale padded rows: {cause}. Padded rows "
            "then read or write where that batch pointed, out of range once its values are (an illegal memory "
            f"access): nothing a replay can show here, which is why this is a warning; {_FIX}")
