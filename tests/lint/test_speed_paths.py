"""The short cuts a cold run takes give what the plain paths give: libcst's parse without its per-node checks,
children listed once per file's analysis, libcst loaded while the index workers start, the hot walk starting
on the first user of each entry class at once, a function's nodes of one type taken from its walk's buckets,
and deep calls run on one kept thread."""

from __future__ import annotations

import ast
import multiprocessing
import sys
import threading
from pathlib import Path

import libcst as cst
import pytest

from graphready.lint.analysis import cstwalk
from graphready.lint.analysis.analyzer import _parse_unchecked
from graphready.lint.analysis.deep import call_deep
from graphready.lint.lazyindex import IndexPool
from graphready.lint.scope.astwalk import walk_body
from graphready.lint.scope.guards import Guards
from graphready.lint.scope.hotpath import Project
from graphready.lint.scope.index import module_indexer

REPO = Path(__file__).resolve().parents[2]
CORPUS = sorted((REPO / "graphready" / "lint" / "analysis").glob("*.py")) + sorted(
    (REPO / "tests" / "fixtures" / "dsv4_like").rglob("*.py"))


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_an_unchecked_parse_builds_the_checked_tree(path):
    text = path.read_text()
    check = cst.CSTNode.__post_init__
    try:
        checked = cst.parse_module(text)
    except cst.ParserSyntaxError:  # a fixture of broken code: broken for both
        with pytest.raises(cst.ParserSyntaxError):
            _parse_unchecked(text)
    else:
        assert _parse_unchecked(text).deep_equals(checked)
    assert cst.CSTNode.__post_init__ is check  # put back: nodes built later are checked as usual


def test_an_unchecked_parse_still_finds_syntax_errors_and_puts_the_check_back():
    check = cst.CSTNode.__post_init__
    with pytest.raises(cst.ParserSyntaxError):
        _parse_unchecked("def f(:\n    pass\n")
    assert cst.CSTNode.__post_init__ is check
    with pytest.raises(cst.CSTValidationError):  # a node built by hand is checked
        cst.Name("not a name")


@pytest.mark.parametrize("path", CORPUS[:4], ids=lambda p: p.name)
def test_remembered_children_are_the_children(path):
    tree = cst.parse_module(path.read_text())
    plain = [(node, cstwalk.children(node)) for node in cstwalk.nodes(tree, skip_scopes=False)]
    with cstwalk.remembered_children():
        for _ in range(2):  # worked out, then remembered
            assert [(node, cstwalk.children(node)) for node in cstwalk.nodes(tree, skip_scopes=False)] == plain
    assert cstwalk._remembered is None  # nothing outlives the block


@pytest.mark.parametrize("path", [p for p in CORPUS if "def " in p.read_text()][:6], ids=lambda p: p.name)
def test_body_nodes_of_a_type_are_the_filtered_walk(path):
    kinds = [(ast.Return,), (ast.Call,), (ast.Assign,), (ast.Global, ast.Nonlocal), (ast.With, ast.AsyncWith),
             (ast.Assign, ast.AnnAssign), (ast.Assign, ast.Call), (ast.Lambda,), (ast.Yield,)]
    functions = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)]
    assert functions
    for function in functions:
        nodes = walk_body(function.body)
        for wanted in kinds:
            plain = [node for node in nodes if isinstance(node, wanted)]
            assert nodes.of(*wanted) == plain
            assert nodes.of(*wanted) == plain  # from the buckets made by the first call


def test_the_index_workers_let_this_process_work_meanwhile_once():
    source = "def f(x):\n    return g(x)\n\n\ndef g(x):\n    return x\n"
    jobs = [(f"mod{n}", f"mod{n}.py", source, Guards(), False) for n in range(10)]
    calls = []
    with_work, without = IndexPool(2, jobs), IndexPool(2, jobs)
    try:
        found = with_work.index(None, digests=True, meanwhile=lambda: calls.append(1))
        plain = without.index(None, digests=True)
    finally:
        with_work.close()
        without.close()
    assert calls == [1]
    assert [digest for _, digest in found] == [digest for _, digest in plain]


MODEL = '''class Layer:
    def forward(self, x):
        return x


class Model:
    def __init__(self):
        self.layer = Layer()

    def forward(self, x):
        return self.layer(x)


class Unbuilt:
    def forward(self, x):
        return x
'''


class _Wants:
    def __init__(self):
        self.asked: list[str] = []

    def want(self, path, info):
        self.asked.append(info.key)


def test_the_walk_starts_on_the_first_user_of_each_entry_class():
    index = module_indexer("model", "model.py", MODEL, Guards(), lazy=True).index
    wants = _Wants()
    project = Project({"model": index}, wants)
    project.want_builders(["model:Layer.forward", "model:Model.forward", "model:Unbuilt.forward"])
    assert wants.asked == ["model:Model.__init__"]  # Model and Unbuilt: no function names them


def _depth(n: int) -> int:
    return 0 if n == 0 else 1 + _depth(n - 1)


def _deep_in_a_child(connection) -> None:
    connection.send(call_deep(_depth, 5000))


def test_deep_calls_share_one_thread_and_act_as_a_thread_per_call_did():
    """Each call runs past the default recursion limit, raises what its function raises, puts the caller's limit
    back, and may make a deep call of its own; a forked child gets a runner of its own."""
    limit = sys.getrecursionlimit()
    threads = {call_deep(threading.current_thread) for _ in range(3)}
    assert len(threads) == 1 and threading.current_thread() not in threads
    assert call_deep(_depth, 5000) == 5000
    assert call_deep(call_deep, _depth, 5000) == 5000
    with pytest.raises(ZeroDivisionError):
        call_deep(lambda: 1 / 0)
    assert sys.getrecursionlimit() == limit
    ours, theirs = multiprocessing.get_context("fork").Pipe()
    child = multiprocessing.get_context("fork").Process(target=_deep_in_a_child, args=(theirs,))
    child.start()
    assert ours.poll(30) and ours.recv() == 5000
    child.join()
