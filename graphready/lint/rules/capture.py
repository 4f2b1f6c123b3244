"""GR601-GR605: what happens around a capture: freed temporaries, capture-only branches, one-time
initialisation that may first run inside a capture, metadata only a replay's preparation sets, and padded
rows a replay's preparation leaves stale."""

from __future__ import annotations

import libcst as cst

from graphready.lint.analysis.context import RuleContext
from graphready.lint.analysis.cstwalk import nodes, walk
from graphready.lint.inference.tensors import positional, string_value
from graphready.lint.inference.torchnames import GRAPH_CONTEXT
from graphready.lint.rules.base import Rule
from graphready.lint.scope.graphprep import prep_kind

FILLING = {"append", "extend", "insert", "add", "update", "setdefault", "appendleft"}  # put values in a container
CAPTURING = "torch.cuda.is_current_stream_capturing"


def _names_in(node: cst.CSTNode | None) -> set[str]:
    """Names a value carries along: `x`, `(x, y)`, `{"k": x}`, and arguments packed into an object
    (`Meta(graph=g, output_buffer=out)`)."""
    if node is None:
        return set()
    if isinstance(node, cst.Name):
        return {node.value}
    if isinstance(node, (cst.Tuple, cst.List, cst.Set)):
        return set().union(*(_names_in(e.value) for e in node.elements)) if node.elements else set()
    if isinstance(node, cst.Dict):
        return set().union(*(_names_in(e.value) for e in node.elements if isinstance(e, cst.DictElement))) \
            if node.elements else set()
    if isinstance(node, cst.Call):
        return set().union(*(_names_in(a.value) for a in node.args)) if node.args else set()
    return set()


def _scan(ctx: RuleContext, root: cst.FunctionDef):
    """Capture bodies of `root` and the tensors made outside them that nothing keeps after the call; none
    when every graph captured is a local that does not escape either, since it dies with the temporaries
    (a test that captures, replays and checks in one function)."""
    bodies: list[cst.BaseSuite] = []
    temps: set[str] = set()
    escaped: set[str] = set()
    inside: list[cst.BaseSuite] = []
    graphs: list[cst.BaseExpression | None] = []
    locals_: set[str] = set()
    held: dict[str, set[str]] = {}  # local container -> names put in it (`graphs.append(g)`): kept if it is

    def enter(node: cst.CSTNode) -> bool:
        nonlocal escaped
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)) and node is not root:
            # a closure keeps what it names alive for as long as it lives, which may be past the call
            escaped |= {n.value for n in nodes(node) if isinstance(n, cst.Name)}
            return False
        if isinstance(node, cst.With) and any(
            isinstance(i.item, cst.Call) and ctx.qualname(i.item.func) == GRAPH_CONTEXT for i in node.items
        ):
            bodies.append(node.body)
            inside.append(node.body)
            graphs.extend(next(iter(i.item.args), None) for i in node.items if isinstance(i.item, cst.Call))
        elif isinstance(node, cst.Assign):
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    locals_.add(target.target.value)
                if isinstance(target.target, (cst.Attribute, cst.Subscript)) or (
                        isinstance(target.target, (cst.Tuple, cst.List))  # `self.graphs, self.outs = graphs, outs`
                        and any(isinstance(e.value, (cst.Attribute, cst.Subscript)) for e in target.target.elements)):
                    escaped |= _names_in(node.value)
                elif isinstance(target.target, cst.Name) and not inside:
                    if (isinstance(node.value, cst.Call) and ctx.env.is_tensor(node.value)
                            and ctx.env.host_status(node.value) is None):  # a freed CPU tensor is never replayed
                        temps.add(target.target.value)
        elif isinstance(node, cst.Call):
            func = node.func  # self.keep.append(w), self.cache.update(k=w), obj.register_buffer("w", w)
            if (isinstance(func, cst.Attribute) and isinstance(func.value, (cst.Attribute, cst.Subscript))
                    and ctx.qualname(func) != GRAPH_CONTEXT):
                for arg in node.args:
                    escaped |= _names_in(arg.value)
            elif isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.attr.value in FILLING:
                held.setdefault(func.value.value, set()).update(*(_names_in(arg.value) for arg in node.args))
        elif isinstance(node, cst.Return):
            escaped |= _names_in(node.value)
        elif isinstance(node, cst.Yield) and isinstance(node.value, cst.BaseExpression):
            escaped |= _names_in(node.value)
        return True

    def leave(node: cst.CSTNode) -> None:
        if isinstance(node, cst.With) and inside and node.body is inside[-1]:
            inside.pop()

    walk(root, enter, leave, leave_types={cst.With})
    kept = [container for container in held if container in escaped]
    while kept:  # what a kept container holds is kept, and so is what it holds in turn
        added = held.pop(kept.pop(), set()) - escaped
        escaped |= added
        kept += [container for container in added if container in held]
    if graphs and all(isinstance(g, cst.Arg) and isinstance(g.value, cst.Name) and g.value.value in locals_
                      and g.value.value not in escaped for g in graphs):
        return bodies, set()
    return bodies, temps - escaped


class CaptureTemp(Rule):
    code = "GR601"
    scope = "always"

    def visit_FunctionDef(self, node: cst.FunctionDef, ctx: RuleContext) -> None:
        if not ctx.function.capture_bodies:
            return
        bodies, freed = _scan(ctx, node)
        for body in bodies if freed else []:
            first: dict[str, cst.Name] = {}
            for use in nodes(body):
                if isinstance(use, cst.Name) and use.value in freed:
                    first.setdefault(use.value, use)
            for name, use in sorted(first.items()):
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


class ReplayOnlyMetadata(Rule):
    """A read, in captured code, of metadata that only the replay preparation sets (scope/graphprep.py)."""

    code = "GR604"

    def __init__(self) -> None:
        self.stores: set[int] = set()

    def visit_Assign(self, node: cst.Assign, ctx: RuleContext) -> None:
        self.stores |= {id(target.target) for target in node.targets}

    def visit_AnnAssign(self, node: cst.AnnAssign, ctx: RuleContext) -> None:
        self.stores.add(id(node.target))

    def visit_Attribute(self, node: cst.Attribute, ctx: RuleContext) -> None:
        if id(node) not in self.stores and not (isinstance(node.value, cst.Name) and node.value.value == "self"):
            self._check(node, node.attr.value, ctx)

    def visit_Call(self, node: cst.Call, ctx: RuleContext) -> None:
        args = positional(node)
        named = len(args) >= 2 and isinstance(args[1], cst.SimpleString)
        if named and ctx.qualname(node.func) in ("getattr", "hasattr"):
            self._check(node, string_value(args[1]), ctx)

    def _check(self, node: cst.CSTNode, attr: str | None, ctx: RuleContext) -> None:
        prepared = ctx.facts.replay_only.get(attr or "")
        if prepared and prep_kind(ctx.function.qualname.rsplit(".", 1)[-1]) is None:
            replay, capture = prepared
            ctx.report(node, f"`{attr}` is set by `{replay}` but not by `{capture}`: it was unset while the graph "
                             "recorded, so this read (and any branch on it) keeps its capture-time value on "
                             f"every replay; set it in `{capture}` too")


class LazyInit(Rule):
    """A one-time block that builds tensors runs on the step's first call; if that call is the
    capture, the work (allocation, H2D copies, compiles) happens inside it. Info when an engine's
    warm-up may make the first call; warning when a capture body reaches it with no warm-up call."""

    code = "GR603"
    scope = "memo"  # the index found the one-time tests (lint/scope/regions.py); hits elsewhere are dropped

    def visit_If(self, node: cst.If, ctx: RuleContext) -> None:
        if not ctx.function.memo or ctx.function.key in ctx.facts.warmed:
            return
        if ctx.function.key in ctx.facts.unwarmed:
            ctx.report(node.test, "`{state}` is initialised on the first call, and the first call is inside a "
                                  "graph capture (no warm-up call before it); run the step once before capturing "
                                  "or build it at load time")
        else:
            ctx.report(node.test, "`{state}` is initialised on the step's first call: make sure warm-up makes "
                                  "that call before any capture, or build it at load time", severity="info")


class PaddedRows(Rule):
    """A graph input a replay preparation refreshes only on the real rows of a padded batch, left stale
    where the function shows those rows are read. The index finds them (scope/padding.py); this rule puts
    each on the node that starts its line: the statement, or the list element `self.x[:raw_bs]`."""

    code = "GR605"
    scope = "padded-rows"  # hits on lines the index did not record are dropped (RuleContext.candidate)

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine, ctx: RuleContext) -> None:
        if ctx.function.padded_rows:
            for statement in node.body:
                ctx.report(statement, "")

    def visit_Subscript(self, node: cst.Subscript, ctx: RuleContext) -> None:
        if ctx.function.padded_rows:
            ctx.report(node, "")
