"""Configuration facts (`assume-true` / `assume-false`): branch tests a deployment knows the value of.

A finding's chain prints the tests its calls sit under (`[if 'dynamic' in self.rope_type]`); a deployment
that never takes such a branch says so once, in the words the chain printed, and the branch it rules out
is cold: no rule fires there and its calls make nothing hot (mypy's `always_true` / `always_false`, for
whole tests). Entries and tests are compared as parsed expressions, so spacing, quotes and parentheses
do not matter, and `not` is a polarity: `assume-false = ["x is None"]` says what `assume-true =
["x is not None"]` says. A fact decides a test it equals, or the `and` / `or` it is an operand of; an
`and` the chain joined from nested tests (`[if x is not None and self.use_marlin]`) is ruled out as a
whole by `assume-false`, wherever a branch sits under all of its tests. A test that names a local
(`out is None`, `use_fused`) means something else in every module that has it: such a fact is scoped
to the modules it is about (`{test = "out is None", in = "vllm.model_executor.models.moondream3"}`).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

POSITIVE = {ast.NotIn: ast.In, ast.IsNot: ast.Is, ast.NotEq: ast.Eq}
MAX_ENTRY = 1000  # characters: a fact is one branch test, not a program

Literal = tuple[str, bool]  # a test with its negations taken off, unparsed, and the value it has


def _positive(test: ast.AST) -> tuple[ast.AST, bool]:
    """(test without its negations, whether test equals it): `x is not None` -> (`x is None`, False)."""
    holds = True
    while True:
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            test, holds = test.operand, not holds
        elif isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in POSITIVE:
            test, holds = ast.Compare(test.left, [POSITIVE[type(test.ops[0])]()], test.comparators), not holds
        else:
            return test, holds


def _split(test: ast.AST, holds: bool, conjunction: bool) -> list[tuple[ast.AST, bool]]:
    """(operand, value) pairs whose conjunction (or disjunction) is `test == holds`: `a and b` true is `a`
    true and `b` true; `a and b` false is `a` false or `b` false."""
    node, positive = _positive(test)
    value = positive == holds
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And) == (value == conjunction):
        return [pair for operand in node.values for pair in _split(operand, value, conjunction)]
    return [(node, value)]


def _shape(node: ast.AST) -> tuple:
    """A cheap part of what `ast.unparse` would write: tests of other shapes are never unparsed (most of an
    engine's tests name nothing a fact names)."""
    if isinstance(node, ast.Name):
        return ast.Name, node.id
    if isinstance(node, ast.Attribute):
        return ast.Attribute, node.attr
    if isinstance(node, ast.Constant):
        return ast.Constant, repr(node.value)
    if isinstance(node, ast.Compare):
        return ast.Compare, tuple(map(type, node.ops)), _shape(node.left)
    if isinstance(node, ast.Call):
        return ast.Call, _shape(node.func)
    if isinstance(node, (ast.BoolOp, ast.UnaryOp, ast.BinOp)):
        return type(node), type(node.op)
    return (type(node),)


def _text(node: ast.AST, shapes: set[tuple]) -> str | None:
    """`ast.unparse(node)` where its shape is one of `shapes`, else None."""
    if _shape(node) not in shapes:
        return None
    try:
        return ast.unparse(node)
    except (ValueError, RecursionError):  # deeper than unparse goes: no entry names it
        return None


@dataclass(frozen=True)
class Assumption:
    key: str  # "assume-true" or "assume-false", as written in the configuration
    entry: str  # the entry as written
    clauses: tuple[frozenset[Literal], ...]  # what it says, as `or`s of literals that all hold
    scope: str = ""  # a module glob: the fact holds only there ("" everywhere)

    @property
    def label(self) -> str:
        """How messages, statistics and the index name it: `assume-false "'dynamic' in self.rope_type"`."""
        return f"{self.key} {self.entry!r}" + (f" in {self.scope}" if self.scope else "")


def parse(key: str, entry: str, scope: str = "") -> Assumption:
    """The fact an entry states; ValueError saying why when it is not one Python expression. The entry is
    parsed, never evaluated."""
    if len(entry) > MAX_ENTRY:
        raise ValueError(f"{key} entry of {len(entry)} characters is too long for one branch test")
    try:
        test = ast.parse(entry.strip(), mode="eval").body
        clauses = tuple(frozenset((ast.unparse(n), v) for n, v in _split(node, value, conjunction=False))
                        for node, value in _split(test, key == "assume-true", conjunction=True))
    except SyntaxError as exc:
        raise ValueError(f"{key} entry {entry!r} is not a Python expression ({exc.msg}); write a branch test as a"
                         " hot chain prints it, e.g. \"'dynamic' in self.rope_type\"") from None
    except (ValueError, RecursionError, MemoryError):
        raise ValueError(f"{key} entry {entry!r} is not a branch test graphready can read") from None
    return Assumption(key, entry, clauses, scope)


@dataclass
class Facts:
    """The configured facts of one run: single tests with their values, and the `or`s of several."""

    tests: dict[str, tuple[bool, str]] = field(default_factory=dict)  # test -> (its value, label of the fact)
    clauses: list[tuple[frozenset[Literal], str]] = field(default_factory=list)  # (one literal holds, label)
    # an entry's label -> the labels its facts go by (an entry that repeats an earlier fact goes by the earlier's)
    named_as: dict[str, set[str]] = field(default_factory=dict)
    shapes: set[tuple] = field(default_factory=set)  # `_shape` of each single test
    clause_shapes: set[tuple] = field(default_factory=set)  # ... of each test in an `or` of several
    assumptions: tuple[Assumption, ...] = ()

    @classmethod
    def of(cls, assumptions) -> "Facts":
        """ValueError naming two entries of one scope that contradict each other (where the scopes of two
        overlap, the first decides)."""
        facts, scopes = cls(assumptions=tuple(assumptions)), {}  # test -> the scope of its first fact
        for assumption in assumptions:
            names = facts.named_as.setdefault(assumption.label, set())
            for clause in assumption.clauses:
                shapes = {_shape(ast.parse(test, mode="eval").body) for test, _ in clause}  # parsed, not run
                if len(clause) > 1:
                    facts.clauses.append((clause, assumption.label))
                    facts.clause_shapes |= shapes
                    names.add(assumption.label)
                    continue
                facts.shapes |= shapes
                ((test, value),) = clause
                scopes.setdefault(test, assumption.scope)
                earlier = facts.tests.setdefault(test, (value, assumption.label))
                if earlier[0] != value and scopes[test] == assumption.scope:
                    raise ValueError(f"{earlier[1]} and {assumption.label} contradict each other")
                names.update((earlier[1], assumption.label))
        return facts

    def __bool__(self) -> bool:
        return bool(self.tests or self.clauses)

    def within(self, module: str) -> "Facts":
        """The facts that hold in `module`: those scoped to other modules left out."""
        if not any(a.scope for a in self.assumptions):
            return self
        return Facts.of([a for a in self.assumptions if not a.scope or fnmatchcase(module, a.scope)])

    def decide(self, test: ast.AST, matched: list[str]) -> tuple[bool, str] | None:
        """The value the single-test facts give `test` and the label of the fact that decides it, or None.
        Appends to `matched` the label of each fact that equals the test or an operand of its `and` / `or`
        (an entry that names no test anywhere is a configuration error)."""
        node, holds = _positive(test)
        fact = self.tests.get(_text(node, self.shapes))
        if fact is not None:
            matched.append(fact[1])
            return fact[0] == holds, fact[1]
        if not isinstance(node, ast.BoolOp):
            return None
        parts = [self.decide(value, matched) for value in node.values]
        absorbing = isinstance(node.op, ast.Or)  # the value one operand gives the whole: true for `or`
        found = next((part for part in parts if part is not None and part[0] == absorbing), None)
        if found is None and parts and all(part is not None for part in parts):
            found = parts[0]
        return None if found is None else (found[0] == holds, found[1])

    def literals(self, test: ast.AST, holds: bool) -> frozenset[Literal]:
        """What a branch's code may take as given, of what facts of several tests name: `if a and not b:`
        gives its body `a` true and `b` false."""
        pairs = ((_text(node, self.clause_shapes), value) for node, value in _split(test, holds, conjunction=True))
        return frozenset((text, value) for text, value in pairs if text is not None)

    def contradicted(self, given: frozenset[Literal]) -> str:
        """The label of an `or` of several tests that `given` (a branch's tests and those around it) makes
        false: a branch the facts rule out as a whole. "" if none."""
        return next((label for clause, label in self.clauses
                     if all((test, not value) in given for test, value in clause)), "")
