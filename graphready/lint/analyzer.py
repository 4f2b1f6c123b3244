"""Phase 3: run the libcst rules over the functions that matter in one file.

Only the top-level statements holding hot functions (or graph-capture sites) are parsed with
libcst, each as its own small module, so positions stay exact (a top-level statement starts at
column 0; lines are shifted back by the statement's first line).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from graphready.lint.context import Candidate, FileFacts, RuleContext
from graphready.lint.index import ClassInfo, FunctionInfo
from graphready.lint.resolve import ImportMap
from graphready.lint.rules import ALL_RULES, PARSE_ERROR
from graphready.lint.tensors import BOOL, SCALAR, TENSOR, TensorEnv, is_tensor_callee, self_attr


@dataclass
class FileJob:
    module: str
    path: str
    source: str
    imports: dict[str, str]
    global_calls: dict[str, str]
    classes: dict[str, ClassInfo]
    targets: list[tuple[FunctionInfo, bool]]  # (function, hot); not-hot ones hold capture sites
    hot_keys: set[str] = field(default_factory=set)
    tensor_functions: set[str] = field(default_factory=set)
    autograd_functions: set[str] = field(default_factory=set)


def _module_facts(job: FileJob, names: ImportMap) -> FileFacts:
    facts = FileFacts(names)
    for name, callee in job.global_calls.items():
        if is_tensor_callee(callee):
            facts.tensor_globals.add(name)
        facts.record_holder(name, callee)
    facts.tensor_functions = job.tensor_functions
    facts.autograd_functions = job.autograd_functions
    return facts


class _Definitions(cst.CSTVisitor):
    """qualname -> (FunctionDef, enclosing ClassDef) with the same naming as the ast index."""

    def __init__(self) -> None:
        self.stack: list[cst.CSTNode] = []
        self.found: dict[str, tuple[cst.FunctionDef, cst.ClassDef | None]] = {}
        self.classes: dict[str, cst.ClassDef] = {}

    def _qualname(self, name: str) -> str:
        return ".".join([*(n.name.value for n in self.stack), name])

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.classes[self._qualname(node.name.value)] = node
        self.stack.append(node)

    def leave_ClassDef(self, node: cst.ClassDef) -> None:
        self.stack.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        owner = self.stack[-1] if self.stack and isinstance(self.stack[-1], cst.ClassDef) else None
        self.found[self._qualname(node.name.value)] = (node, owner)
        self.stack.append(node)

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.stack.pop()


class _AttributeWrites(cst.CSTVisitor):
    """`self.x = value` / `self.x += value` in one method (not nested scopes)."""

    def __init__(self, root: cst.FunctionDef):
        self.root = root
        self.writes: list[tuple[str, cst.CSTNode, cst.BaseExpression, bool]] = []  # attr, node, value, augmented
        self.global_names: set[str] = set()
        self.global_writes: list[tuple[str, cst.CSTNode]] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node is self.root

    def visit_Global(self, node: cst.Global) -> None:
        self.global_names |= {n.name.value for n in node.names}

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._write(target.target, node, node.value, False)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._write(node.target, node, node.value, False)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._write(node.target, node, node.value, True)

    def _write(self, target, node, value, augmented: bool) -> None:
        attr = self_attr(target)
        if attr is not None:
            self.writes.append((attr, node, value, augmented))
        elif isinstance(target, cst.Name) and target.value in self.global_names:
            self.global_writes.append((target.value, node))


class FileAnalyzer:
    def __init__(self, job: FileJob):
        self.job = job
        self.lines = job.source.splitlines(keepends=True)
        self.names = ImportMap(job.module)
        self.names.aliases = job.imports
        self.module_facts = _module_facts(job, self.names)
        self.candidates: list[Candidate] = []

    def run(self) -> list[Candidate]:
        by_statement: dict[tuple[int, int], list[tuple[FunctionInfo, bool]]] = {}
        for info, hot in self.job.targets:
            by_statement.setdefault(info.stmt_range, []).append((info, hot))
        for stmt_range, targets in sorted(by_statement.items()):
            self._statement(stmt_range, targets)
        return self.candidates

    def _statement(self, stmt_range: tuple[int, int], targets) -> None:
        start, end = stmt_range
        snippet = "".join(self.lines[start - 1:end])
        try:
            module = cst.parse_module(snippet)
        except cst.ParserSyntaxError as exc:
            self.candidates.append(Candidate(PARSE_ERROR, start + exc.raw_line - 1, exc.raw_column, start + exc.raw_line - 1,
                                             exc.raw_column, f"libcst cannot parse this statement: {exc.message}", ""))
            return
        positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
        definitions = _Definitions()
        module.visit(definitions)
        offset = start - 1
        class_facts: dict[str, FileFacts] = {}
        frozen_globals = self._frozen_globals(targets, definitions, positions, offset)
        for info, hot in targets:
            found = definitions.found.get(info.qualname)
            if found is None:
                continue
            node, owner = found
            facts = self.module_facts
            if info.class_qualname is not None and info.class_qualname in definitions.classes:
                if info.class_qualname not in class_facts:
                    class_facts[info.class_qualname] = self._class_facts(
                        info.class_qualname, definitions, positions, offset)
                facts = class_facts[info.class_qualname]
            facts.frozen_globals = frozen_globals
            env = TensorEnv(facts)
            env.learn_function(node)
            ctx = RuleContext(info, hot, env, facts, positions, offset)
            _RuleWalker(node, ctx).run()
            self.candidates.extend(ctx.candidates)

    def _method_key(self, qualname: str) -> str:
        return f"{self.job.module}:{qualname}"

    def _hot_line(self, key: str, line: int) -> bool:
        if key not in self.job.hot_keys:
            return False
        info = next((i for i, _ in self.job.targets if i.key == key), None)
        return info is None or not any(s <= line <= e for s, e in info.excluded)

    def _class_facts(self, class_qualname: str, definitions: _Definitions, positions, offset: int) -> FileFacts:
        facts = FileFacts(self.names)
        base = self.module_facts
        facts.tensor_globals, facts.tensor_functions = base.tensor_globals, base.tensor_functions
        facts.lock_names, facts.compiled_names = set(base.lock_names), set(base.compiled_names)
        facts.graph_names, facts.autograd_functions = set(base.graph_names), base.autograd_functions
        class_node = definitions.classes[class_qualname]
        for statement in class_node.body.body:
            if isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
                        if TensorEnv(facts).annotation_kind(small.annotation.annotation) == TENSOR:
                            facts.tensor_attrs.add(small.target.value)
        methods = [(q, n) for q, (n, owner) in definitions.found.items() if owner is class_node]
        writes: list[tuple[str, str, cst.CSTNode, cst.BaseExpression, bool, TensorEnv]] = []
        for _ in range(2):  # attributes can be derived from other attributes
            writes.clear()
            for qualname, method in methods:
                env = TensorEnv(facts)
                env.learn_function(method)
                scan = _AttributeWrites(method)
                method.visit(scan)
                for attr, node, value, augmented in scan.writes:
                    writes.append((qualname, attr, node, value, augmented, env))
                    kind = env.kind(value)
                    if kind in (TENSOR, BOOL) and not augmented:
                        facts.tensor_attrs.add(attr)
                        if kind == BOOL:
                            facts.bool_attrs.add(attr)
                    host = env.host_status(value)
                    if host:
                        facts.host_attrs[attr] = host
                    for callee in _callees(value, env):  # the value itself, or a container built of them
                        facts.record_holder(attr, callee)
        for qualname, attr, node, value, augmented, env in writes:
            if attr in facts.tensor_attrs or qualname.rsplit(".", 1)[-1] == "__init__":
                continue
            line = positions[node].start.line + offset
            if (augmented or env.kind(value) == SCALAR) and self._hot_line(self._method_key(qualname), line):
                facts.frozen_attrs.setdefault(attr, line)
        return facts

    def _frozen_globals(self, targets, definitions: _Definitions, positions, offset: int) -> dict[str, int]:
        frozen: dict[str, int] = {}
        for info, hot in targets:
            found = definitions.found.get(info.qualname)
            if not hot or found is None:
                continue
            scan = _AttributeWrites(found[0])
            found[0].visit(scan)
            for name, node in scan.global_writes:
                line = positions[node].start.line + offset
                if self._hot_line(info.key, line):
                    frozen.setdefault(name, line)
        return frozen


def _callees(value: cst.BaseExpression, env: TensorEnv) -> set[str]:
    if isinstance(value, cst.Call):
        return {env.qualname(value.func) or ""}
    if isinstance(value, (cst.List, cst.Tuple, cst.Dict, cst.ListComp, cst.DictComp, cst.GeneratorExp)):
        calls = cst.ensure_type(value, cst.BaseExpression)
        found: set[str] = set()

        class _Calls(cst.CSTVisitor):
            def visit_Call(self, node: cst.Call) -> None:
                found.add(env.qualname(node.func) or "")

        calls.visit(_Calls())
        return found
    return set()


class _RuleWalker(cst.CSTVisitor):
    """Visits one function once and dispatches each node to every rule that handles its type."""

    def __init__(self, root: cst.FunctionDef, ctx: RuleContext):
        self.root = root
        self.ctx = ctx
        self.visitors: dict[str, list] = {}
        self.leavers: dict[str, list] = {}
        for rule_class in ALL_RULES:
            rule = rule_class()
            for attr in dir(rule):
                if attr.startswith("visit_"):
                    self.visitors.setdefault(attr[6:], []).append((rule, getattr(rule, attr)))
                elif attr.startswith("leave_"):
                    self.leavers.setdefault(attr[6:], []).append((rule, getattr(rule, attr)))

    def run(self) -> None:
        self.root.visit(self)

    def _dispatch(self, table, node: cst.CSTNode) -> None:
        for rule, handler in table.get(type(node).__name__, ()):
            self.ctx.activate(rule.code, rule.scope)
            handler(node, self.ctx)

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)) and node is not self.root:
            return False
        if isinstance(node, cst.With):
            self.ctx.with_stack.append([self.ctx.qualname(i.item.func) or "" for i in node.items
                                        if isinstance(i.item, cst.Call)])
        self._dispatch(self.visitors, node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        self._dispatch(self.leavers, original_node)
        if isinstance(original_node, cst.With):
            self.ctx.with_stack.pop()


def analyze_file(job: FileJob) -> list[Candidate]:
    return FileAnalyzer(job).run()
