"""A file's signature for the hot walk takes each function's lines as ranks: lines moved by an edit leave it as
it was, a change in what the walk reads (a call moved out of an eager-only branch) does not. Every field holding a
line number is named, so a new one cannot slip through as a plain number."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest

from graphready.lint.lazyindex import deep_digest, function_lines, index_digest
from graphready.lint.scope.guards import Guards
from graphready.lint.scope.index import CallSite, FunctionInfo, module_indexer
from graphready.lint.scope.positions import LINE_FIELDS

REPO = Path(__file__).resolve().parents[2]
ENGINE = REPO / "tests" / "fixtures" / "dsv4_like"

STEP = '''import torch


class Runner:
    def step(self, x, debug=False):
        y = prepare(x)
        if debug:
            report(y.sum().item())
        if is_xpu():
            pass
        return Layer(y)


def prepare(x):
    return x + 1
'''
NOT_LINES = {("CallSite", "given_positions")}  # a count of arguments


def _holds_int(hint) -> bool:
    return hint is int or any(_holds_int(arg) for arg in typing.get_args(hint))


@pytest.mark.parametrize("cls", [FunctionInfo, CallSite])
def test_every_number_held_is_a_named_line(cls):
    hints = typing.get_type_hints(cls)
    named = set(LINE_FIELDS) | {"line"}
    for field in dataclasses.fields(cls):
        if _holds_int(hints[field.name]) and (cls.__name__, field.name) not in NOT_LINES:
            assert field.name in named, f"{cls.__name__}.{field.name} holds numbers: name it in positions.py"


def _deep_index(text: str):
    indexer = module_indexer("mod", "mod.py", text, Guards.of(["debug"], [], None, None), False, True)
    for qualname in indexer.index.functions:
        indexer.deepen(qualname)
    return indexer.index


def _signature(text: str) -> tuple[str, str]:
    shallow = module_indexer("mod", "mod.py", text, Guards.of(["debug"], [], None, None), False, True).index
    deep = _deep_index(text)
    return index_digest(shallow), deep_digest(deep, list(deep.functions))


def test_moved_lines_keep_the_signature():
    before = _signature(STEP)
    assert _signature("# a header\n\n" + STEP) == before
    assert _signature(STEP.replace("        y = prepare(x)\n", "        limit = 4\n        y = prepare(x)\n")) == before
    assert _signature(STEP.replace("    return x + 1\n", "    x = x * 2\n    return x + 1\n")) == before


@pytest.mark.parametrize("edit", [
    ("        if debug:\n            report(y.sum().item())\n",
     "        report(y.sum().item())\n        if debug:\n            pass\n"),  # the call left the debug branch
    ("prepare(x)", "prepare_all(x)"),  # another callee, the same lines
    ("return Layer(y)", "return y"),  # no use of the class
    ("            pass\n        return Layer(y)", "            return Layer(y)\n        return y"),  # built only on XPU
])
def test_what_the_walk_reads_changes_the_signature(edit):
    assert _signature(STEP.replace(*edit)) != _signature(STEP)


@pytest.mark.parametrize("path", sorted(ENGINE.rglob("*.py"))[:8], ids=lambda p: p.name)
def test_a_rank_is_a_position_among_the_function_lines(path):
    index = _deep_index(path.read_text())
    lines = function_lines(index, list(index.functions))
    for qualname, info in index.functions.items():
        assert lines[qualname] == sorted(set(lines[qualname]))
        assert {call.line for call in info.calls} <= set(lines[qualname])
        assert info.first_line == lines[qualname][0] and info.end_lineno in lines[qualname]
