"""Line ranges inside a function that are not hot, and the bodies of graph captures.

Not hot: the eager-only branch of a configured predicate (`eager-if`: `if VERBOSE:`,
`if forward_mode.is_extend():`; `captured-if`: the `else` of `if forward_mode.is_decode():`), the
non-capturing branch of `torch.cuda.is_current_stream_capturing()`, and memoized one-time initialisation (an
`if X is None:` / `if k not in cache:` / `if not self._ready:` block that stores its result in a
global, an attribute or a dict). Calls there do not make their callees hot and no rule fires there.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from graphready.lint.resolve import ImportMap

CAPTURING = "torch.cuda.is_current_stream_capturing"
GRAPH_CONTEXT = "torch.cuda.graph"


def _block_range(statements: list[ast.stmt]) -> tuple[int, int] | None:
    if not statements:
        return None
    return statements[0].lineno, max(s.end_lineno or s.lineno for s in statements)


@dataclass(frozen=True)
class Guards:
    """Eager-only predicates: names whose true (`eager_if`) or false (`captured_if`) branch never
    runs inside a graph. A name matches a variable, an attribute or a call: `VERBOSE`,
    `envs.DEBUG`, `forward_batch.forward_mode.is_extend()`."""

    eager_if: frozenset[str] = frozenset()
    captured_if: frozenset[str] = frozenset()

    @classmethod
    def of(cls, eager_if, captured_if) -> "Guards":
        return cls(frozenset(eager_if), frozenset(captured_if))


ENV_READS = {"get", "value", "is_set", "get_bool"}  # `envs.DEBUG_X.get()` reads the switch DEBUG_X


def _named(test: ast.AST, names: frozenset[str]) -> bool:
    if isinstance(test, ast.Call):
        test = test.func
        if isinstance(test, ast.Attribute) and test.attr in ENV_READS and test.attr not in names:
            test = test.value
    if isinstance(test, ast.Name):
        return test.id in names
    if isinstance(test, ast.Attribute):
        return test.attr in names
    return False


def _eager_when(test: ast.AST, truth: bool, guards: Guards, names: ImportMap) -> bool:
    """Does `test` evaluating to `truth` mean this call is eager (not inside a graph)?"""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _eager_when(test.operand, not truth, guards, names)
    if isinstance(test, ast.BoolOp):  # `a and b` true needs both; `a or b` false needs both
        parts = [_eager_when(v, truth, guards, names) for v in test.values]
        either = isinstance(test.op, ast.And) == truth
        return any(parts) if either else all(parts)
    if not truth and isinstance(test, ast.Call) and names.resolve(test.func) == CAPTURING:
        return True
    if isinstance(test, ast.Compare):  # `if VERBOSE > 1:`, `if meta.num_prefills > 0:`, `if meta is None:`
        flipped = _says_absent(test) == truth
        return _named(test.left, guards.captured_if if flipped else guards.eager_if)
    return _named(test, guards.eager_if if truth else guards.captured_if)


def _says_absent(test: ast.Compare) -> bool:
    """`x is None`, `x == 0`, `x == False`: true when the named thing is absent (polarity flips)."""
    if len(test.ops) != 1 or not isinstance(test.ops[0], (ast.Is, ast.Eq)):
        return False
    right = test.comparators[0]
    return isinstance(right, ast.Constant) and right.value in (None, 0, False)


def _is_memo_test(test: ast.AST) -> bool:
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op, right = test.ops[0], test.comparators[0]
        if isinstance(op, ast.Is) and isinstance(right, ast.Constant) and right.value is None:
            return True
        return isinstance(op, ast.NotIn)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        operand = test.operand
        return isinstance(operand, (ast.Name, ast.Attribute)) or (
            isinstance(operand, ast.Call) and isinstance(operand.func, ast.Name) and operand.func.id == "hasattr"
        )
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        return any(_is_memo_test(v) for v in test.values)
    return False


def _stores_result(statements: list[ast.stmt], global_names: set[str]) -> bool:
    for stmt in statements:
        for node in ast.walk(stmt):
            targets: list[ast.AST] = []
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            for target in targets:
                if isinstance(target, (ast.Attribute, ast.Subscript)):
                    return True
                if isinstance(target, ast.Name) and target.id in global_names:
                    return True
    return False


def excluded_ranges(func: ast.FunctionDef | ast.AsyncFunctionDef, guards: Guards, names: ImportMap,
                    global_names: set[str]):
    ranges: list[tuple[int, int]] = []

    def visit(statements: list[ast.stmt]) -> None:
        for stmt in statements:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(stmt, ast.If):
                cold: list[ast.stmt] | None = None
                if _eager_when(stmt.test, True, guards, names):
                    cold = stmt.body
                elif _eager_when(stmt.test, False, guards, names):
                    cold = stmt.orelse
                elif _is_memo_test(stmt.test) and _stores_result(stmt.body, global_names):
                    cold = stmt.body
                block = _block_range(cold) if cold is not None else None
                if block:
                    ranges.append(block)
            for field_name in ("body", "orelse", "finalbody"):
                visit(getattr(stmt, field_name, []) or [])
            for handler in getattr(stmt, "handlers", []) or []:
                visit(handler.body)
            for case in getattr(stmt, "cases", []) or []:
                visit(case.body)

    visit(func.body)
    return ranges


def capture_bodies(body_nodes: list[ast.AST], names: ImportMap) -> list[tuple[int, int]]:
    bodies = []
    for node in body_nodes:
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                expr = item.context_expr
                if isinstance(expr, ast.Call) and names.resolve(expr.func) == GRAPH_CONTEXT:
                    block = _block_range(node.body)
                    if block:
                        bodies.append(block)
    return bodies
