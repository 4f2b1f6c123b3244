"""Fast read-only traversal of libcst trees, and positions computed only for the nodes reported.

libcst's visitor machinery rebuilds every node it passes and `PositionProvider` records a range
for every node; together they cost several parses' worth of time per file. The rules only read
the tree and need positions for the handful of nodes they report, so we walk dataclass fields
directly and locate reported nodes with one plain code generation pass per parsed function.
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import re
from typing import Callable, Container, Iterable, Iterator

import libcst as cst
from libcst._nodes.internal import CodegenState

_FIELDS: dict[type, tuple[str, ...]] = {}
# Tokens and whitespace: no rule looks at them, and they are half of every tree.
_SKIPPED_FIELDS = {
    "lpar", "rpar", "comma", "semicolon", "leading_lines", "lines_after_decorators", "header", "footer",
    "newline", "colon", "equal", "dot", "asynchronous", "operator", "star_tok", "trailing_whitespace",
    "first_line", "empty_lines", "last_line", "default_comma", "default_comma_whitespace",
}
_IS_NODE: dict[type, bool] = {}  # exact type -> is a CSTNode (avoids slow ABC isinstance checks)


def _is_node(value: object) -> bool:
    kind = type(value)
    known = _IS_NODE.get(kind)
    if known is None:
        known = _IS_NODE[kind] = issubclass(kind, cst.CSTNode)
    return known


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    if _remembered is None:
        return _children(node)
    found = _remembered.get(id(node))
    if found is None:
        found = _remembered[id(node)] = (node, _children(node))  # the node kept alive: its id stays its own
    return found[1]


def _children(node: cst.CSTNode) -> list[cst.CSTNode]:
    fields = _FIELDS.get(type(node))
    if fields is None:
        fields = _FIELDS[type(node)] = tuple(
            f.name for f in dataclasses.fields(node)
            if f.name not in _SKIPPED_FIELDS and "whitespace" not in f.name
        )
    found: list[cst.CSTNode] = []
    for name in fields:
        value = getattr(node, name)
        kind = type(value)
        if kind is list or kind is tuple:
            found += value  # libcst's sequence fields hold nodes only
        elif _is_node(value):
            found.append(value)
    return found


_remembered: dict[int, tuple[cst.CSTNode, list[cst.CSTNode]]] | None = None  # see `remembered_children`


@contextlib.contextmanager
def remembered_children() -> Iterator[None]:
    """Within the block each node's children are worked out once: the analysis walks every function four times
    (the rules, tensor evidence, its assignments, the counters it steps), and listing a node's children was the
    larger part of each walk."""
    global _remembered
    outer, _remembered = _remembered, {}
    try:
        yield
    finally:
        _remembered = outer


def walk(root: cst.CSTNode, enter: Callable[[cst.CSTNode], bool | None],
         leave: Callable[[cst.CSTNode], None] | None = None, leave_types: Container[type] | None = None) -> None:
    """Depth-first, children in field order; `enter` returning False skips a subtree. `leave` is called for the
    nodes of `leave_types` (None: every node) once their subtree is walked."""
    stack: list[cst.CSTNode | tuple[cst.CSTNode]] = [root]  # a node to enter, or (node,) to leave
    pop = stack.pop
    while stack:
        node = pop()
        if type(node) is tuple:
            leave(node[0])
            continue
        if enter(node) is False:
            continue
        if leave is not None and (leave_types is None or type(node) in leave_types):
            stack.append((node,))
        stack += reversed(children(node))


def nodes(root: cst.CSTNode, skip_scopes: bool = True) -> Iterable[cst.CSTNode]:
    """Every node under `root`; with skip_scopes, not inside nested functions or classes."""
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        if skip_scopes and node is not root and type(node) in _SCOPES:
            continue
        stack.extend(reversed(children(node)))


_SCOPES = (cst.FunctionDef, cst.ClassDef)


@dataclasses.dataclass(frozen=True)
class Span:
    line: int
    column: int
    end_line: int
    end_column: int


_NOTHING = contextlib.nullcontext()


class _Locator(CodegenState):
    """Code generation that only notes where each node starts and ends."""

    def __init__(self, module: cst.Module):
        super().__init__(default_indent=module.default_indent, default_newline=module.default_newline)
        self.offset = 0
        self.ranges: dict[int, list[int]] = {}  # id(node) -> [start, end]

    def add_indent_tokens(self) -> None:
        for token in self.indent_tokens:
            self.add_token(token)

    def add_token(self, value: str) -> None:
        self.tokens.append(value)
        self.offset += len(value)

    def pop_trailing_newline(self) -> None:
        if self.tokens:
            self.offset -= len(self.tokens.pop())

    def before_codegen(self, node: cst.CSTNode) -> None:
        self.ranges[id(node)] = [self.offset, self.offset]  # by id: a node's own hash is a Python call

    def after_codegen(self, node: cst.CSTNode) -> None:
        self.ranges[id(node)][1] = self.offset

    def record_syntactic_position(self, node: cst.CSTNode, *, start_node: cst.CSTNode | None = None,
                                  end_node: cst.CSTNode | None = None) -> contextlib.nullcontext:
        """Nothing to record (only a position provider does): one shared empty block, not a generator-based context
        manager made per node (the most costly part of locating a function's nodes)."""
        return _NOTHING


class Locations:
    """Where the nodes of one parsed module are, from one code generation pass however often a function's
    nodes are asked for (its assignments and loops, the rules' hits, its class's attribute writes)."""

    def __init__(self, module: cst.Module):
        state = _Locator(module)
        module._codegen(state)
        self.text = "".join(state.tokens)
        self.module = module  # its nodes' ids key `ranges`: alive, no other object can take one
        self.ranges = state.ranges
        self.newlines = [match.start() for match in re.finditer("\n", self.text)]

    def _position(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_left(self.newlines, offset)
        start_of_line = self.newlines[line - 1] + 1 if line else 0
        return line + 1, offset - start_of_line

    def spans(self, wanted: Iterable[cst.CSTNode]) -> dict[cst.CSTNode, Span]:
        """1-based lines, 0-based columns of each wanted node, surrounding whitespace trimmed."""
        text, spans = self.text, {}
        for node in wanted:
            start, end = self.ranges[id(node)]
            while start < end and text[start].isspace():
                start += 1
            while end > start and text[end - 1].isspace():
                end -= 1
            spans[node] = Span(*self._position(start), *self._position(end))
        return spans
