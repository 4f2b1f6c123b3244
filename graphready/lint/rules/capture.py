"""GR601-GR602: what happens around a capture: freed temporaries and capture-only branches."""

from __future__ import annotations

import libcst as cst

from graphready.lint.context import RuleContext
from graphready.lint.rules.base import Rule

GRAPH_CONTEXT = "torch.cuda.graph"
CAPTURING = "torch.cuda.is_current_stream_capturing"


def _names_in(node: cst.CSTNode | None) -> set[str]:
    if node is None:
        return set()
    if isinstance(node, cst.Name):
        return {node.value}
    if isinstance(node, (cst.Tuple, cst.List, cst.Set)):
        return set().union(*(_names_in(e.value) for e in node.elements)) if node.elements else set()
    if isinstance(node, cst.Dict):
        return set().union(*(_names_in(e.value) for e in node.elements if isinstance(e, cst.DictElement))) \
            if node.elements else set()
    return set()


class _CaptureScan(cst.CSTVisitor):
    """Splits one function into capture bodies, temporaries made outside them, and escapes."""

    def __init__(self, ctx: RuleContext, root: cst.FunctionDef):
        self.ctx = ctx
        self.root = root
        self.bodies: list[cst.IndentedBlock | cst.BaseSuite] = []
        self.temps: set[str] = set()
        self.escaped: set[str] = set()
        self.depth = 0  # > 0 while inside a capture body

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node is self.root

    def visit_With(self, node: cst.With) -> None:
        if any(isinstance(i.item, cst.Call) and self.ctx.qualname(i.item.func) == GRAPH_CONTEXT for i in node.items):
            self.bodies.append(node.body)
            self.depth += 1

    def leave_With(self, node: cst.With) -> None:
        if self.bodies and node.body is self.bodies[-1] and self.depth:
            self.depth -= 1

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            if isinstance(target.target, (cst.Attribute, cst.Subscript)):
                self.escaped |= _names_in(node.value)
            elif isinstance(target.target, cst.Name) and self.depth == 0:
                value = node.value
                if isinstance(value, cst.Call) and self.ctx.env.is_tensor(value):
                    self.temps.add(target.target.value)

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Attribute) and isinstance(node.func.value, (cst.Attribute, cst.Subscript)):
            for arg in node.args:  # self.keep.append(w), self.cache.update(k=w), obj.register_buffer("w", w)
                self.escaped |= _names_in(arg.value)

    def visit_Return(self, node: cst.Return) -> None:
        self.escaped |= _names_in(node.value)

    def visit_Yield(self, node: cst.Yield) -> None:
        self.escaped |= _names_in(node.value if isinstance(node.value, cst.BaseExpression) else None)


class _FirstReads(cst.CSTVisitor):
    def __init__(self, names: set[str]):
        self.names = names
        self.first: dict[str, cst.Name] = {}

    def visit_Name(self, node: cst.Name) -> None:
        if node.value in self.names and node.value not in self.first:
            self.first[node.value] = node


class CaptureTemp(Rule):
    code = "GR601"
    scope = "always"

    def visit_FunctionDef(self, node: cst.FunctionDef, ctx: RuleContext) -> None:
        scan = _CaptureScan(ctx, node)
        node.visit(scan)
        freed = scan.temps - scan.escaped
        if not scan.bodies or not freed:
            return
        for body in scan.bodies:
            reads = _FirstReads(freed)
            body.visit(reads)
            for name, use in sorted(reads.first.items()):
                ctx.report(use, f"`{name}` is made outside the capture and read inside it, but nothing keeps it "
                                "alive: it is freed after capture and replay reads freed memory; store it on "
                                "`self` (or return it) for the graph's lifetime")


class CaptureBranch(Rule):
    code = "GR602"

    def _check(self, test: cst.BaseExpression, ctx: RuleContext) -> None:
        inner = test.expression if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not) else test
        if isinstance(inner, cst.Call) and ctx.qualname(inner.func) == CAPTURING:
            ctx.report(test, "the captured path differs from the eager one here; test both (replay vs eager)")

    def visit_If(self, node: cst.If, ctx: RuleContext) -> None:
        self._check(node.test, ctx)

    def visit_IfExp(self, node: cst.IfExp, ctx: RuleContext) -> None:
        self._check(node.test, ctx)
