"""GR605 on the shipped padding bugs the harness reproduces (tests/fixtures/padding, checked by GD309 on a
GPU): the four whose preparation has a pad branch or a head-only refresh handed on whole are flagged at the
line the check points at; every fixed twin is quiet. V5 (a slice by the real count inside the step) and V9
(a copy sized by the real batch) are not of GR605's shape: only the padded replay catches them."""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "padding"
# case -> where GR605 sits relative to the check's line: S9's rule points at the alias that hands the whole
# buffer on (`track_buf = ...`), one line above the head refresh the check names
FLAGGED = {"eagle_positions": 0, "eagle_topk": 0, "swa_cache_loc": 0, "mamba_track": -1}
CASES = sorted(p.stem.removesuffix("_bug") for p in FIXTURES.glob("*_bug.py"))


def _marked_line(text: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if "# padded: GD309" in line)


@pytest.mark.parametrize("case", CASES)
def test_gr605_on_the_buggy_twin(lint_project, case):
    text = (FIXTURES / f"{case}_bug.py").read_text()
    found = {(f.line, f.rule) for f in lint_project({f"{case}_bug.py": text}).findings}
    expected = {_marked_line(text) + FLAGGED[case]} if case in FLAGGED else set()
    assert {line for line, rule in found if rule == "GR605"} >= expected
    assert bool(expected) == any(rule == "GR605" for _, rule in found)


@pytest.mark.parametrize("case", CASES)
def test_the_fixed_twin_is_quiet(lint_project, case):
    text = (FIXTURES / f"{case}_fixed.py").read_text()
    assert [f"{f.line}: {f.rule}" for f in lint_project({f"{case}_fixed.py": text}).findings] == []
