"""Phase 3: run the libcst rules over the functions that matter in one file.

Only the top-level statements holding hot functions (or graph-capture sites) are parsed with
libcst, each as its own small module, so positions stay exact (a top-level statement starts at
column 0; lines are shifted back by the statement's first line).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from graphready.lint.analysis.candidate import Candidate
from graphready.lint.analysis.multidevice import handles_several_devices
from graphready.lint.analysis.context import FileFacts, Pending, RuleContext
from graphready.lint.analysis.project import ProjectFacts
from graphready.lint.failures import Failure
from graphready.lint.analysis.cstwalk import Locations, Span, nodes, remembered_children, walk
from graphready.lint.scope.index import ClassInfo, FunctionInfo
from graphready.lint.scope.resolve import ImportMap
from graphready.lint.analysis.candidate import PARSE_ERROR
from graphready.lint.rules import ALL_RULES
from graphready.lint.inference.tensors import BOOL, HOST, SCALAR, TENSOR, FunctionScan, TensorEnv, mentions_name, mentions_self_attr, scan_function
from graphready.lint.inference.libraries import flashinfer_wrapper
from graphready.lint.inference.torchnames import is_tensor_callee


@dataclass
class FileJob:
    module: str
    path: str
    source: str
    imports: dict[str, str]
    global_calls: dict[str, str]
    global_containers: set[str]
    classes: dict[str, ClassInfo]
    targets: list[tuple[FunctionInfo, bool]]  # (function, hot); not-hot ones hold capture sites
    functions: dict[str, FunctionInfo] = field(default_factory=dict)  # every function of the file
    hot_keys: set[str] = field(default_factory=set)
    unwarmed: set[str] = field(default_factory=set)  # hot through a capture with no warm-up call
    warmed: set[str] = field(default_factory=set)  # hot through a capture after a warm-up call
    uncompiled: set[str] = field(default_factory=set)  # hot only through functions torch.compile never traces
    host_params: dict[str, list[str]] = field(default_factory=dict)  # function key -> params its hot callers fill with host data
    wanted: set[str] | None = None  # the targets to analyse (qualnames; None: all), the rest's hits are cached
    key_salt: str | None = None  # the project's facts, where the worker works out the targets' cache keys


def _module_facts(job: FileJob, project: ProjectFacts, names: ImportMap) -> FileFacts:
    facts = FileFacts(names)
    facts.one_gpu_per_process = project.one_gpu_per_process
    facts.multi_device = handles_several_devices(job.source)
    facts.containers = set(job.global_containers)
    for name, callee in job.global_calls.items():
        if is_tensor_callee(callee):
            facts.tensor_globals.add(name)
        facts.record_holder(name, callee)
    facts.tensor_functions, facts.pageable_functions = project.tensor_functions, project.pageable_functions
    facts.captured_device_fields = project.captured_device_fields
    facts.parameter_attrs = project.parameter_attrs
    facts.flashinfer_holders = {attr for info in job.classes.values()
                                for attr, held in [*info.attr_types.items(), *info.attr_elem_types.items()]
                                if flashinfer_wrapper(held)}
    facts.autograd_functions = project.autograd_functions
    facts.class_fields = project.class_fields
    facts.unwarmed, facts.warmed, facts.uncompiled = job.unwarmed, job.warmed, job.uncompiled
    return facts


@dataclass
class _Parsed:
    module: cst.Module
    function: cst.FunctionDef
    offset: int  # add to a snippet line to get the file line
    _locations: Locations | None = None

    def spans(self, wanted: list[cst.CSTNode]) -> dict[cst.CSTNode, Span]:
        """Where the nodes are (snippet lines); the code generation this takes is done once per function."""
        if not wanted:
            return {}
        if self._locations is None:
            self._locations = Locations(self.module)
        return self._locations.spans(wanted)


class FileAnalyzer:
    """Each function that matters is parsed on its own: hot ones, capture sites, and the methods
    that define `self.*` attributes of a hot method's class."""

    def __init__(self, job: FileJob, project: ProjectFacts):
        self.job = job
        self.lines = job.source.splitlines(keepends=True)
        self.names = ImportMap(job.module)
        self.names.aliases = job.imports
        self.module_facts = _module_facts(job, project, self.names)
        self.parse_errors: dict[str, Candidate] = {}  # qualname -> why libcst could not parse it
        self.parsed: dict[str, _Parsed | None] = {}
        self.class_facts: dict[str, tuple[FileFacts, dict[str, TensorEnv]]] = {}

    def run(self) -> tuple[dict[str, list[Candidate]], list[Failure]]:
        """The rule hits of each wanted function, and the functions graphready itself failed on (each one's hits
        are dropped)."""
        with remembered_children():
            return self._run()

    def _run(self) -> tuple[dict[str, list[Candidate]], list[Failure]]:
        self.module_facts.frozen_globals, self.module_facts.stepped_globals = self._frozen_globals()
        hits: dict[str, list[Candidate]] = {}
        failures: list[Failure] = []
        for info, hot in self.job.targets:
            if self.job.wanted is not None and info.qualname not in self.job.wanted:
                continue
            try:
                hits[info.qualname] = self._analyze(info, hot)
            except RecursionError:  # nested deeper than call_deep allows: the file's GR001, not a bug
                raise
            except Exception as exc:  # a bug on one function leaves the others' findings standing
                failures.append(Failure.of(exc, self.job.path, "analysing", info))
        return hits, failures

    def _analyze(self, info: FunctionInfo, hot: bool) -> list[Candidate]:
        parsed = self._parse(info)
        if parsed is None:
            return [self.parse_errors[info.qualname]]
        facts, env = self.module_facts, None
        if info.class_qualname is not None and info.class_qualname in self.job.classes:
            facts, envs = self._class_facts(info.class_qualname)
            env = envs.get(info.qualname)
        if env is None:
            env = TensorEnv(facts)
            env.learn_function(parsed.function, self._scan(info, parsed), self.job.host_params.get(info.key, ()))
        ctx = RuleContext(info, hot, env, facts)
        _run_rules(parsed.function, ctx)
        spans = parsed.spans([hit.node for hit in ctx.pending])
        found = (ctx.candidate(hit, spans[hit.node], parsed.offset) for hit in ctx.pending)
        return [candidate for candidate in found if candidate is not None]

    def _parse(self, info: FunctionInfo) -> _Parsed | None:
        if info.qualname in self.parsed:
            return self.parsed[info.qualname]
        text = "".join(info.source_lines(self.lines))
        indented = text[:1] in (" ", "\t")
        try:  # an indented method parses as the body of `if 1:`, keeping its columns
            module = _parse_unchecked("if 1:\n" + text if indented else text)
        except cst.ParserSyntaxError as exc:
            line = info.first_line + exc.raw_line - (2 if indented else 1)
            self.parse_errors[info.qualname] = Candidate(PARSE_ERROR, line, exc.raw_column, line, exc.raw_column,
                                                         f"libcst cannot parse this function: {exc.message}", info.key)
            self.parsed[info.qualname] = None
            return None
        statement = module.body[0].body.body[0] if indented else module.body[0]
        parsed = _Parsed(module, statement, info.first_line - (2 if indented else 1))
        self.parsed[info.qualname] = parsed
        return parsed

    def _scan(self, info: FunctionInfo, parsed: "_Parsed") -> FunctionScan:
        """Assignments of one function; those on eager-only lines do not decide a local's kind."""
        scan = scan_function(parsed.function)
        if not info.excluded:
            return scan
        spans = parsed.spans([*scan.pair_nodes, *scan.loop_nodes])
        return scan.hot_only(lambda node: not info.excludes(spans[node].line + parsed.offset))

    def _hot_line(self, info: FunctionInfo, line: int) -> bool:
        return info.key in self.job.hot_keys and not info.excludes(line)

    def _class_facts(self, class_qualname: str) -> tuple[FileFacts, dict[str, TensorEnv]]:
        """Facts about `self.*` from the class's methods that set attributes, and their tensor envs."""
        if class_qualname in self.class_facts:
            return self.class_facts[class_qualname]
        facts = self.module_facts.for_class()
        class_info = self.job.classes[class_qualname]
        facts.tensor_attrs |= {attr for attr, kind in class_info.attr_types.items() if kind.endswith("Tensor")}
        facts.tensor_attrs |= class_info.tensor_attrs
        facts.buffers = set(class_info.tensor_attrs)
        facts.graph_inputs = set(class_info.graph_inputs)
        facts.replay_only = class_info.replay_only
        for attr, callees in class_info.attr_calls.items():  # set anywhere in the class, from the index
            for callee in callees:
                if is_tensor_callee(callee) or callee.endswith(".Parameter"):
                    facts.tensor_attrs.add(attr)
                facts.record_holder(attr, callee)
        facts.host_attrs.update(class_info.host_attrs)
        facts.containers |= class_info.container_attrs
        methods = []
        for name in class_info.methods:  # hot methods: full inference for what they assign
            info = self.job.functions.get(f"{class_qualname}.{name}")
            if info is not None and info.key in self.job.hot_keys:
                parsed = self._parse(info)
                if parsed is not None:
                    methods.append((info, parsed, self._scan(info, parsed)))
        envs: dict[str, TensorEnv] = {}
        for _ in range(2):  # attributes can be derived from other attributes
            before = _learned(facts)
            for info, parsed, scan in methods:
                env = envs[info.qualname] = TensorEnv(facts)
                env.learn_function(parsed.function, scan, self.job.host_params.get(info.key, ()))
                for attr, node, value, augmented in scan.attribute_writes:
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
            if _learned(facts) == before:  # every method saw these facts: another round would learn the same
                break
        for info, parsed, scan in methods:
            if info.qualname.rsplit(".", 1)[-1] == "__init__" or info.key not in self.job.hot_keys:
                continue
            env = envs[info.qualname]
            mutations = [(attr, node) for attr, node, value, augmented in scan.attribute_writes  # step counters
                         if attr not in facts.tensor_attrs and attr not in class_info.container_attrs and (
                             (augmented and _may_be_number(value, env))
                             or (env.kind(value) == SCALAR and mentions_self_attr(value, attr)))]
            spans = parsed.spans([node for _, node in mutations])
            for attr, node in mutations:
                line = spans[node].line + parsed.offset
                if self._hot_line(info, line):
                    facts.frozen_attrs.setdefault(attr, line)
        self.class_facts[class_qualname] = (facts, envs)
        return facts, envs

    def _frozen_globals(self) -> tuple[dict[str, int], set[str]]:
        """Module globals that hot code rebinds (`global buf; buf = ...`), and the numbers it steps (`step += 1`);
        a global tensor moved or rebuilt from itself (`IDENTITY = IDENTITY.to(dev)`) is a re-bind, not a counter."""
        frozen: dict[str, int] = {}
        stepped: set[str] = set()
        module_env = TensorEnv(self.module_facts)
        for info, hot in self.job.targets:
            parsed = self._parse(info) if hot and info.declares_global else None
            if parsed is None:
                continue
            writes = scan_function(parsed.function).global_writes
            spans = parsed.spans([node for _, node in writes])
            for name, node in writes:
                line = spans[node].line + parsed.offset
                if self._hot_line(info, line):
                    frozen.setdefault(name, line)
                    if name in self.module_facts.tensor_globals:
                        continue
                    if isinstance(node, cst.AugAssign) or (mentions_name(node.value, name)
                                                           and module_env.kind(node.value) != TENSOR):
                        stepped.add(name)
        return frozen, stepped


def _parse_unchecked(text: str) -> cst.Module:
    """`cst.parse_module` without libcst checking each node as its parser builds it (`CSTNode.__post_init__`: a fifth
    of parsing a function; libcst's own note there says a parsed tree needs no such check). Syntax errors are still
    raised: the parser finds those."""
    check = cst.CSTNode.__post_init__
    cst.CSTNode.__post_init__ = _unchecked
    try:
        return cst.parse_module(text)
    finally:
        cst.CSTNode.__post_init__ = check


def _unchecked(node: cst.CSTNode) -> None:
    pass


TEXT = (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)


def _may_be_number(value: cst.BaseExpression, env: TensorEnv) -> bool:
    """What an augmented write adds may step a number: not text (`self.log += f"..."`), a collection
    (`self.items += [x]`) or host data (`self._buffer += bytes(n)`)."""
    if isinstance(value, (*TEXT, cst.List, cst.Tuple, cst.Set, cst.Dict, cst.ListComp, cst.SetComp, cst.DictComp)):
        return False
    if isinstance(value, cst.BinaryOperation):
        return _may_be_number(value.left, env) and _may_be_number(value.right, env)
    return env.kind(value) != HOST


def _learned(facts: FileFacts) -> tuple:
    """What `_class_facts` learns from a class's methods (the class facts its tensor envs read), as a copy."""
    return (set(facts.tensor_attrs), set(facts.bool_attrs), dict(facts.host_attrs), set(facts.lock_names),
            set(facts.compiled_names), set(facts.lazy_compiled))


def _callees(value: cst.BaseExpression, env: TensorEnv) -> set[str]:
    if isinstance(value, cst.Call):
        return {env.qualname(value.func) or ""}
    if isinstance(value, (cst.List, cst.Tuple, cst.Dict, cst.ListComp, cst.DictComp, cst.GeneratorExp)):
        return {env.qualname(n.func) or "" for n in nodes(value) if isinstance(n, cst.Call)}
    return set()


_HANDLERS = [(rule_class, [a for a in dir(rule_class) if a.startswith(("visit_", "leave_"))]) for rule_class in ALL_RULES]
# the nodes a walk leaves: those a rule has a `leave_` handler for, and `with` blocks (the stack of their names)
_LEFT = frozenset({cst.With, *(getattr(cst, a[6:]) for _, handlers in _HANDLERS for a in handlers if a.startswith("leave_"))})


def _dispatch_tables():
    """Fresh rule instances (some keep per-function state) and their handlers by node type name."""
    visitors: dict[str, list] = {}
    leavers: dict[str, list] = {}
    for rule_class, handlers in _HANDLERS:
        rule = rule_class()
        for attr in handlers:
            table = visitors if attr.startswith("visit_") else leavers
            table.setdefault(attr[6:], []).append((rule, getattr(rule, attr)))
    return visitors, leavers


def _run_rules(root: cst.FunctionDef, ctx: RuleContext) -> None:
    """Visit one function once, dispatching each node to every rule that handles its type."""
    visitors, leavers = _dispatch_tables()

    def dispatch(table, node: cst.CSTNode) -> None:
        for rule, handler in table.get(type(node).__name__, ()):
            ctx.activate(rule.code, rule.scope)
            handler(node, ctx)

    def enter(node: cst.CSTNode) -> bool:
        kind = type(node)
        if (kind is cst.FunctionDef or kind is cst.ClassDef) and node is not root:
            return False
        if kind is cst.With:
            ctx.with_stack.append([ctx.qualname(i.item.func) or "" for i in node.items if isinstance(i.item, cst.Call)])
        if kind.__name__ in visitors:  # most nodes have no handler: no call
            dispatch(visitors, node)
        return True

    def leave(node: cst.CSTNode) -> None:
        dispatch(leavers, node)
        if type(node) is cst.With:
            ctx.with_stack.pop()

    walk(root, enter, leave, leave_types=_LEFT)


def analyze_file(job: FileJob, project: ProjectFacts) -> tuple[dict[str, list[Candidate]], list[Failure]]:
    return FileAnalyzer(job, project).run()
