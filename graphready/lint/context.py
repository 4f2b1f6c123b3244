"""What a rule sees while it visits one function: types, facts, hotness, and `report()`."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
from libcst.metadata import CodeRange

from graphready.lint.index import FunctionInfo
from graphready.lint.tensors import LOCK_TYPES, Facts, TensorEnv


@dataclass
class Candidate:
    """A rule hit before hot-chain, severity, suppressions and baseline are applied."""

    rule: str
    line: int
    column: int
    end_line: int
    end_column: int
    message: str
    function: str  # key of the function it is in


class FileFacts(Facts):
    """Facts for one file, plus the class facts of the class being analysed."""

    def __init__(self, names):
        super().__init__(names)
        self.lock_names: set[str] = set()  # globals / self attrs holding a threading lock
        self.compiled_names: set[str] = set()  # globals / self attrs holding a cute.compile() result
        self.graph_names: set[str] = set()  # globals / self attrs holding a CUDAGraph
        self.frozen_attrs: dict[str, int] = {}  # self attr -> line where hot code mutates it
        self.frozen_globals: dict[str, int] = {}
        self.autograd_functions: set[str] = set()  # dotted names of autograd.Function classes

    def record_holder(self, name: str, callee: str) -> None:
        """Remember that global/attribute `name` holds what `callee(...)` returns, if it matters."""
        if callee in LOCK_TYPES:
            self.lock_names.add(name)
        elif callee.endswith("cute.compile"):
            self.compiled_names.add(name)
        elif callee == "torch.cuda.CUDAGraph":
            self.graph_names.add(name)


class RuleContext:
    def __init__(
        self,
        function: FunctionInfo,
        hot: bool,
        env: TensorEnv,
        facts: FileFacts,
        positions: dict[cst.CSTNode, CodeRange],
        line_offset: int,
    ):
        self.function = function
        self.hot = hot
        self.env = env
        self.facts = facts
        self.positions = positions
        self.line_offset = line_offset
        self.with_stack: list[list[str]] = []  # resolved context-manager names of enclosing `with`s
        self.candidates: list[Candidate] = []
        self._current_rule = ""
        self._current_scope = "hot"
        self._reported: set[tuple[str, int, int]] = set()

    def qualname(self, node: cst.CSTNode) -> str | None:
        return self.env.qualname(node)

    def line_of(self, node: cst.CSTNode) -> int:
        return self.positions[node].start.line + self.line_offset

    def _in(self, line: int, ranges: list[tuple[int, int]]) -> bool:
        return any(start <= line <= end for start, end in ranges)

    def is_hot_line(self, line: int) -> bool:
        if self._in(line, self.function.excluded):
            return False
        return self.hot or self._in(line, self.function.capture_bodies)

    def in_with(self, *names: str) -> bool:
        return any(name in names for frame in self.with_stack for name in frame)

    def report(self, node: cst.CSTNode, message: str, rule: str | None = None) -> None:
        where = self.positions[node]
        line = where.start.line + self.line_offset
        if self._current_scope == "hot" and not self.is_hot_line(line):
            return
        rule = rule or self._current_rule
        if (rule, line, where.start.column) in self._reported:
            return
        self._reported.add((rule, line, where.start.column))
        self.candidates.append(
            Candidate(
                rule=rule,
                line=line,
                column=where.start.column,
                end_line=where.end.line + self.line_offset,
                end_column=where.end.column,
                message=message,
                function=self.function.key,
            )
        )

    def activate(self, rule_code: str, scope: str) -> None:
        self._current_rule = rule_code
        self._current_scope = scope
