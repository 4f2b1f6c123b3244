"""The branch tests a hot call sits under, so a finding's chain says when its code runs.

Most findings an engineer dismisses on real engines sit behind a branch a configuration decides (`if
"dynamic" in self.rope_type:`, `if out is None:` after a fused kernel): the code is hot as written, but
whether a given deployment takes it is known only to its owner. Printing the tests along the chain turns
that question into one look at the finding. Only the functions a finding's chain passes through are
parsed, once each and from their own lines, after the lint, so the index and its cache carry none of this.
"""

from __future__ import annotations

import ast
import warnings
from typing import Callable

from graphready.lint.analysis.deep import python_limits
from graphready.lint.scope.hotpath import CAPTURE_STEP, HotSet
from graphready.lint.scope.index import FunctionInfo
from graphready.lint.scope.regions import nested_blocks

MAX_TEST = 72  # characters of one test shown; longer ones are cut


OPPOSITES = {ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.Eq: ast.NotEq,
             ast.NotEq: ast.Eq}


def _negated(test: ast.AST) -> ast.AST:
    """`not test`, written as a reader would: `x is not None` for `x is None`, `flag` for `not flag`."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return test.operand
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in OPPOSITES:
        return ast.Compare(test.left, [OPPOSITES[type(test.ops[0])]()], test.comparators)
    return ast.UnaryOp(ast.Not(), test)


def _shown(test: ast.AST, holds: bool) -> str:
    try:
        text = " ".join(ast.unparse(test if holds else _negated(test)).split())
    except RecursionError:  # a test nested deeper than the default limit (valid Python goes to ~3000)
        text = "…"
    return text if len(text) <= MAX_TEST else text[:MAX_TEST - 1] + "…"


def _tests_at(statements: list[ast.stmt], line: int) -> list[str]:
    """The tests of the `if`/`elif`/`else` blocks around `line`, outermost first."""
    for stmt in statements:
        if not stmt.lineno <= line <= (stmt.end_lineno or stmt.lineno):
            continue
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return []
        if isinstance(stmt, ast.If):
            for block, holds in ((stmt.body, True), (stmt.orelse, False)):
                if block and block[0].lineno <= line <= (block[-1].end_lineno or block[-1].lineno):
                    return [_shown(stmt.test, holds), *_tests_at(block, line)]
            return []
        bodies, handlers = nested_blocks(stmt)
        return next((found for block in bodies + handlers if (found := _tests_at(block, line))), [])
    return []


class BranchTests:
    """Hot chains with the branch tests their calls sit under, from the module sources of one lint run."""

    def __init__(self, texts: dict[str, str], hot: HotSet, function: Callable[[str], FunctionInfo | None]):
        self.texts = texts  # module -> source
        self.hot = hot
        self.function = function  # key -> the function's index facts (None: not in the project)
        self.lines: dict[str, list[str]] = {}
        self.bodies: dict[str, list[ast.stmt]] = {}  # function key -> its statements, lines as in the file
        self.chains: dict[str, list[str]] = {}  # hot function -> its chain as shown

    def chain(self, key: str) -> list[str]:
        """The hot chain of `key`, each step made inside a branch followed by its tests: `mod:Rope._update
        [if 'dynamic' in self.rope_type]` says the step runs only for the configurations that pass them."""
        if key not in self.chains:
            chain = self.hot.chains[key]
            shown = chain[:1]
            for caller, callee in zip(chain, chain[1:]):
                info = self.function(caller.removesuffix(CAPTURE_STEP))
                line = self.hot.via.get(callee)
                held = _tests_at(self._body(info), line) if info is not None and line is not None else []
                shown.append(f"{callee} [if {' and '.join(held)}]" if held else callee)
            self.chains[key] = shown
        return self.chains[key]

    def _body(self, info: FunctionInfo) -> list[ast.stmt]:
        """The function's statements, parsed from its own lines only: the chains of a run pass through a
        few functions of many files, and parsing whole files would cost a warm run more than the lint."""
        if info.key not in self.bodies:
            module = info.key.split(":", 1)[0]
            if module not in self.lines:
                self.lines[module] = self.texts.get(module, "").splitlines()
            lines = info.source_lines(self.lines[module])
            indented = bool(lines) and lines[0][:1].isspace()
            # a method's lines keep their indent; blank lines before them give every node its line in the file
            # (far cheaper than ast.increment_lineno, which visits every node)
            source = "\n" * max(info.first_line - 1 - indented, 0) + "\n".join(["if 1:", *lines] if indented else lines)
            try:
                with warnings.catch_warnings(), python_limits():
                    warnings.simplefilter("ignore")
                    tree = ast.parse(source)
                node = tree.body[0].body[0] if indented else tree.body[0]
                self.bodies[info.key] = node.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else []
            except (SyntaxError, ValueError, RecursionError, MemoryError, IndexError, AttributeError):
                self.bodies[info.key] = []
        return self.bodies[info.key]
