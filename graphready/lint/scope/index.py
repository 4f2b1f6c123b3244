"""Phase 1: a per-file index of definitions, imports and call sites, built with the stdlib `ast`.

The index only needs names, not full-fidelity syntax, so it uses `ast` (about 6x faster to parse
than libcst, measured in benchmarks/lint_speed.py) and covers every file of the project; the libcst
rule visitors then parse only the statements that hold hot code. Everything here is plain data so
it can be pickled into the cache and passed between worker processes.
"""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass, field, replace

from graphready.lint.scope.attrtypes import (
    AttributeTyper, class_attributes, class_tables, is_container, is_name, looks_like_class, returned_class,
    returns_pageable_tensor, self_attr,
)
from graphready.lint.scope.astwalk import BodyNodes, walk_body
from graphready.lint.analysis.deep import python_limits
from graphready.lint.scope.guards import Guards, with_predicates
from graphready.lint.scope.regions import (
    OneTimeFlags, Regions, absent_argument_regions, capture_bodies, falsy_when_captured, function_regions, never_run,
    returns_none, within,
)
from graphready.lint.scope.resolve import ImportMap, callee_name
from graphready.lint.scope.graphprep import constructor_params, graph_preparation
from graphready.lint.scope.padding import stale_padded_rows
from graphready.lint.inference.libraries import PARAMETER_CLASSES, PARAMETER_REGISTRATIONS
from graphready.lint.inference.torchnames import HOST_NAME, TENSOR, annotation_kind

HOT_COMMENT = re.compile(r"#\s*graphready:\s*hot\b")
HOT_DECORATORS = {"graphready.hot_path", "graphready.markers.hot_path"}
MEMO_DECORATORS = {"functools.cache", "functools.lru_cache", "functools.cached_property"}
ELEMENT_VIEWS = {"itertools.islice", "islice", "reversed", "list", "tuple"}  # iterate a list's elements
INERT_CALLS = {"isinstance", "issubclass"}  # a class in their second argument is tested, not built
GRAPH_TEXT = re.compile(r"\bgraph\s*\(|\.replay\s*\(")
HOST_RESULTS = {"cpu", "numpy", "tolist"}  # methods whose result is host data
# factories that build on the default device (the CPU) unless given `device=`; not `tensor`/`as_tensor`, which
# keep the device of a tensor they are given
CPU_DEFAULT_FACTORIES = {"zeros", "ones", "empty", "full", "arange", "linspace", "logspace", "rand", "randn", "randint",
                         "randperm", "eye", "empty_strided", "from_numpy"}


@dataclass
class CallSite:
    """A call the hot-path walk may follow.

    kind: "name" (target = dotted name), "self"/"super" (target = method), "attr" (method of the
    object in self.<target>), "elem" (method of an element of the list self.<target>), "class"
    (method of an instance of class <target>).
    """

    line: int
    kind: str
    target: str
    method: str = ""
    capture: bool = False  # inside a torch.cuda.graph body, or passed to make_graphed_callables
    host_args: list[str] = field(default_factory=list)  # positions ("0") and keywords given host data
    passed_params: dict[str, str] = field(default_factory=dict)  # position or keyword -> caller's parameter passed on
    attr_args: dict[str, str] = field(default_factory=dict)  # position or keyword -> attribute read (`w.offsets`)
    given_positions: int = 0  # leading positional arguments, up to the first `*args` or literal None
    given_keywords: list[str] = field(default_factory=list)  # keywords given something other than None
    assumed: str = ""  # the label of the configured fact whose ruled-out branch holds the call (scope/assume.py)


@dataclass
class FunctionInfo:
    key: str  # "module:Qual.name"
    qualname: str
    class_qualname: str | None
    lineno: int
    end_lineno: int
    first_line: int  # the first decorator's line, or the def line
    decorators: list[str] = field(default_factory=list)
    marked_hot: bool = False
    memoized: bool = False
    returns_tensor: bool = False
    returns_pageable: bool = False  # every return is None or a pageable CPU tensor (attrtypes)
    returns_class: str | None = None  # `-> Layer` or `return Layer(...)`: what a builder method makes
    calls: list[CallSite] = field(default_factory=list)
    params: list[str] = field(default_factory=list)  # positional parameters, `self` included
    excluded: list[tuple[int, int]] = field(default_factory=list)
    memo: list[tuple[int, str]] = field(default_factory=list)  # one-time-init tests: (line, state guarded)
    cold_spans: list[tuple[int, int, int, int]] = field(default_factory=list)  # eager-only operands
    empty_when_captured: list[str] = field(default_factory=list)  # locals only filled on eager lines
    capture_bodies: list[tuple[int, int]] = field(default_factory=list)
    never_runs: list[tuple[int, int]] = field(default_factory=list)  # branches this machine never takes (`is_xpu()`)
    absent_regions: list[tuple[str, int, int]] = field(default_factory=list)  # ("a,b", lines): run if a or b is None
    assumed: list[tuple[str, int, int]] = field(default_factory=list)  # (fact's label, lines it rules out)
    mentions_graph: bool = False
    declares_global: bool = False
    padded_rows: list[tuple[int, str, str]] = field(default_factory=list)  # GR605 (line, message, severity)
    # `calls` and the regions above (excluded .. assumed) are worked out: a lazy index leaves them for the functions
    # the hot walk reaches (`ModuleIndexer.deepen`)
    deep: bool = True

    def short_circuits(self, line: int, column: int) -> bool:
        """The position is in an operand that only runs eagerly (`meta is not None and meta.flag.any()`)."""
        return any((start, start_col) <= (line, column) < (end, end_col)
                   for start, start_col, end, end_col in self.cold_spans)

    def excludes(self, line: int) -> bool:
        """The line is in a debug guard, a non-capturing branch or memoized init: not hot."""
        return within(line, self.excluded)

    def assumed_by(self, line: int) -> str:
        """The label of the configured fact that rules the line out (the outermost), or ""."""
        return next((label for label, start, end in self.assumed if start <= line <= end), "")

    def captures(self, line: int) -> bool:
        """The line is inside a `with torch.cuda.graph(...)` body of this function."""
        return within(line, self.capture_bodies)

    def source_lines(self, lines: list[str]) -> list[str]:
        """The function's own lines of its file's `lines` (with or without line ends), to be parsed alone. ast ends
        a function at its last token, so a backslash ending that line joins a line that holds none (DeepSpeed's
        `return a, \\` before a blank line); parsed alone it would read as an unfinished statement: it is dropped."""
        own = lines[self.first_line - 1:self.end_lineno]
        if own:
            last = own[-1].rstrip("\r\n")
            if last.endswith("\\"):
                own[-1] = last[:-1] + own[-1][len(last):]
        return own


@dataclass
class ClassInfo:
    key: str
    qualname: str
    bases: list[str]
    methods: list[str]
    attr_types: dict[str, str] = field(default_factory=dict)
    attr_elem_types: dict[str, str] = field(default_factory=dict)
    tensor_attrs: set[str] = field(default_factory=set)  # register_buffer / register_parameter names
    attr_calls: dict[str, list[str]] = field(default_factory=dict)  # self.x = f(...) or [f(...) ...] -> f
    host_attrs: dict[str, str] = field(default_factory=dict)  # self.x = a CPU tensor: "pinned" / "pageable"
    field_kinds: dict[str, str] = field(default_factory=dict)  # `name: torch.Tensor` in the class body -> kind
    container_attrs: set[str] = field(default_factory=set)  # self.x = [] / {} / deque(): grows if appended to
    graph_inputs: set[str] = field(default_factory=set)  # self.x read inside a `torch.cuda.graph` body
    attr_builders: dict[str, str] = field(default_factory=dict)  # self.x = self._build_x(...) -> "_build_x"
    attr_elem_params: dict[str, str] = field(default_factory=dict)  # layers built from __init__(layer_type=...)
    attr_params: dict[str, str] = field(default_factory=dict)  # self.attn = attn_type(...), attn_type a parameter
    super_init_classes: dict[str, str] = field(default_factory=dict)  # super().__init__(layer_type=Cls)
    class_attrs: dict[str, str] = field(default_factory=dict)  # `attention_cls = Attention` in the class body
    attr_alternatives: dict[str, list[str]] = field(default_factory=dict)  # other classes a branch sets
    attr_elem_alternatives: dict[str, list[str]] = field(default_factory=dict)  # `LAYER_TYPES[kind](...)`
    # metadata attr -> [replay prep, capture prep] set only when preparing a replay (scope/graphprep.py)
    replay_only: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class ModuleIndex:
    module: str
    path: str
    imports: dict[str, str] = field(default_factory=dict)
    functions: dict[str, FunctionInfo] = field(default_factory=dict)
    classes: dict[str, ClassInfo] = field(default_factory=dict)
    global_calls: dict[str, str] = field(default_factory=dict)  # NAME = call(...) at module level
    global_containers: set[str] = field(default_factory=set)  # NAME = [] / {} / deque() at module level
    # class-like names (`Foo`, `mod.Foo`) by last part -> where they are used: (function key, line) of a call
    # `Foo(...)` in a function, ("", line) for any other use (a registry, a base class, a module-level call)
    class_uses: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    # metadata attributes a graph's capture preparation fills with device tensors (scope/graphprep.py)
    captured_device_fields: set[str] = field(default_factory=set)
    # `Model(cfg, layer_type=Layer)`: (the class built, the parameter by keyword or "#<position>", the class given)
    class_arguments: list[tuple[str, str, str]] = field(default_factory=list)
    assumed_tests: dict[str, int] = field(default_factory=dict)  # fact's label -> branch tests here it names
    # attributes `set_weight_attrs(param, {"name": value})` attaches to parameters -> every value was host data
    weight_attrs: dict[str, bool] = field(default_factory=dict)
    # attributes code here makes a parameter tensor on some object (`layer.k_scale = nn.Parameter(...)`)
    parameter_attrs: set[str] = field(default_factory=set)
    parse_error: tuple[int, int, str] | None = None


def _call_name(node: ast.AST, names: ImportMap) -> str | None:
    return names.resolve(node.func) if isinstance(node, ast.Call) else None


class _FunctionScanner:
    """Collects the call sites of one function body (nested defs are scanned separately)."""

    def __init__(self, info: FunctionInfo, names: ImportMap, local_defs: dict[str, str],
                 module: ModuleIndex | None = None):
        self.info = info
        self.names = names
        self.local_defs = local_defs  # nested def name -> function key
        self.local_types: dict[str, tuple[str, str]] = {}
        self.params: set[str] = set()  # parameters the body never rebinds: what it passes on is what it got
        self.device_contexts: list[tuple[int, int]] = []  # `with torch.device(d):` blocks
        self.bound: dict[str, list[ast.AST]] = {}  # locals bound only by `name = value`: their values
        self._host_locals: set[str] | None = None  # ... where every value is host data, worked out when asked
        self.module = module or ModuleIndex("", "")  # its weight and parameter attributes are filled here

    def scan(self, func: ast.FunctionDef | ast.AsyncFunctionDef, body_nodes: list[ast.AST]) -> None:
        for arg in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]:
            if arg.annotation is not None:
                annotated = self.names.resolve(arg.annotation)
                if annotated:
                    self.local_types[arg.arg] = ("class", annotated)
        stores: dict[str, int] = {}
        for node in body_nodes:
            kind = type(node)
            if kind is ast.Name:
                if type(node.ctx) is not ast.Load:
                    stores[node.id] = stores.get(node.id, 0) + 1
                continue
            if kind is ast.Assign or kind is ast.For or kind is ast.AsyncFor:  # all `_learn_types` reads
                self._learn_types(node)
            if kind is ast.Assign or kind is ast.AnnAssign or kind is ast.Call or kind is ast.With:
                self._learn_binding(node)
        params = {a.arg for a in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs]}
        self.params = params - stores.keys()
        self.bound = {name: values for name, values in self.bound.items()  # bound by nothing else
                      if name not in params and stores.get(name) == len(values)}
        for node in body_nodes:
            if isinstance(node, ast.Call):
                self._record_call(node)

    def _learn_binding(self, node: ast.Assign | ast.AnnAssign | ast.Call | ast.With) -> None:
        """Plain `name = value` bindings, `with torch.device(d):` blocks (a factory without `device=` builds on
        `d`) and attributes made parameter tensors (`layer.k_scale = nn.Parameter(...)`)."""
        if isinstance(node, ast.With):
            if any(_call_name(item.context_expr, self.names) == "torch.device" for item in node.items):
                self.device_contexts.append((node.lineno, node.end_lineno or node.lineno))
            return
        if isinstance(node, ast.AnnAssign):
            if node.value is not None and type(node.target) is ast.Name:
                self.bound.setdefault(node.target.id, []).append(node.value)
            return
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and type(node.targets[0]) is ast.Name:
            self.bound.setdefault(node.targets[0].id, []).append(node.value)
        self.module.parameter_attrs |= _parameter_attrs(node, self.names)

    @property
    def host_locals(self) -> set[str]:
        """Locals whose every binding is host data (`offsets = np.cumsum(n)`, then `offsets = torch.tensor(
        offsets).cpu()`), settled from none up."""
        if self._host_locals is None:
            self._host_locals = set()
            while True:
                host = {name for name, values in self.bound.items() if all(map(self._host_value, values))}
                if host == self._host_locals:
                    break
                self._host_locals = host
        return self._host_locals

    def _learn_types(self, node: ast.AST) -> None:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            kind = self._value_type(node.value)
            if kind:
                self.local_types[node.targets[0].id] = kind
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            target, iterable = node.target, node.iter
            if isinstance(iterable, ast.Call) and is_name(iterable.func, "enumerate") and iterable.args:
                iterable = iterable.args[0]
                if isinstance(target, ast.Tuple) and len(target.elts) == 2:
                    target = target.elts[1]
            if isinstance(iterable, ast.Subscript):  # `for layer in self.layers[start:end]`
                iterable = iterable.value
            elif isinstance(iterable, ast.Call) and self.names.resolve(iterable.func) in ELEMENT_VIEWS and iterable.args:
                iterable = iterable.args[0]  # `for layer in islice(self.layers, start, end)`
            if isinstance(target, ast.Name) and self_attr(iterable):
                self.local_types[target.id] = ("elem", self_attr(iterable))

    def _value_type(self, value: ast.AST) -> tuple[str, str] | None:
        attr = self_attr(value)
        if attr:
            return ("attr", attr)
        if isinstance(value, ast.Subscript) and self_attr(value.value):
            return ("elem", self_attr(value.value))
        if isinstance(value, ast.Call):
            callee = self.names.resolve(value.func)
            if callee and looks_like_class(callee):
                return ("class", callee)
        return None

    def _record_call(self, call: ast.Call) -> None:
        line = call.lineno
        self._record_weight_attrs(call)
        if self.info.excludes(line):
            return
        capture = self.info.captures(line)
        site = self._site_for(call.func, capture, line)
        if site:
            site.assumed = self.info.assumed_by(line)
            site.host_args, site.passed_params, site.attr_args = self._arguments(call)
            site.given_positions, site.given_keywords = _given_args(call)
            self.info.calls.append(site)
        if _call_name(call, self.names) == "torch.cuda.make_graphed_callables" and call.args:
            first = call.args[0]
            for element in first.elts if isinstance(first, (ast.Tuple, ast.List)) else [first]:
                graphed = self._site_for(element, True, line, called=False)
                if graphed:
                    graphed.assumed = self.info.assumed_by(line)
                    self.info.calls.append(graphed)

    def _arguments(self, call: ast.Call) -> tuple[list[str], dict[str, str], dict[str, str]]:
        """By position ("0") or keyword, the arguments that are host data while capturing; those that are the
        caller's own parameters passed on unchanged (`self._split(x, seq_lens=seq_lens)`: the callee's is host
        data where every hot caller's is); and those that read an attribute, directly or through a local bound
        only to reads of it (`offsets = qweight.bnb_shard_offsets`: host data where the project attaches that
        attribute with host values only, `set_weight_attrs`)."""
        host: list[str] = []
        passed: dict[str, str] = {}
        attrs: dict[str, str] = {}
        slots = [(str(position), arg) for position, arg in enumerate(call.args)]
        for slot, value in slots + [(kw.arg, kw.value) for kw in call.keywords if kw.arg]:
            if self._host_value(value):
                host.append(slot)
            elif type(value) is ast.Name and value.id in self.params:
                passed[slot] = value.id
            elif (attr := self._attribute_read(value)) is not None:
                attrs[slot] = attr
        return host, passed, attrs

    def _attribute_read(self, value: ast.AST, through_locals: bool = True) -> str | None:
        if type(value) is ast.Attribute:
            return None if self_attr(value) else value.attr
        if through_locals and type(value) is ast.Name and value.id in self.bound:
            read = {self._attribute_read(v, through_locals=False) for v in self.bound[value.id]}
            return read.pop() if len(read) == 1 else None
        return None

    def _host_value(self, value: ast.AST) -> bool:
        """Named like a host mirror (`meta.expert_num_tokens_cpu`, `seq_lens_cpu`), a tensor factory that builds
        on the CPU (`torch.ones((bs,), dtype=torch.long)`: no `device=`, outside `with torch.device(d):`), or
        a conditional whose every branch a graph can take is one (`lens if lens is not None else torch.ones(...)`
        where `lens` is eager-if: the branch it picks is an eager-only span)."""
        if isinstance(value, ast.IfExp):
            arms = [arm for arm in (value.body, value.orelse)
                    if not self.info.short_circuits(arm.lineno, arm.col_offset)]
            return bool(arms) and all(self._host_value(arm) for arm in arms)
        if type(value) is ast.Call:
            func = root = value.func
            if type(func) is ast.Attribute and func.attr in HOST_RESULTS and not value.args:
                return True  # `x.cpu()`, `x.tolist()`
            while type(root) is ast.Attribute:
                root = root.value
            if type(root) is not ast.Name:
                return False
            if self.names.aliases.get(root.id, root.id).partition(".")[0] == "numpy":
                return True  # `np.cumsum(n)`
            last = func.attr if type(func) is ast.Attribute else root.id
            if last not in CPU_DEFAULT_FACTORIES or self.names.resolve(func) != f"torch.{last}":
                return False
            device = next((k.value for k in value.keywords if k.arg == "device"), None)
            return (device is None and not within(value.lineno, self.device_contexts)
                    or isinstance(device, ast.Constant) and device.value == "cpu")
        if isinstance(value, ast.Name) and value.id in self.host_locals:
            return True
        name = value.attr if isinstance(value, ast.Attribute) else value.id if isinstance(value, ast.Name) else None
        return bool(name and HOST_NAME.search(name))

    def _record_weight_attrs(self, call: ast.Call) -> None:
        """`set_weight_attrs(param, {"bnb_shard_offsets": offsets})`, vLLM's and SGLang's way to attach loader
        metadata to a parameter: whether each value is host data."""
        func = call.func
        if (len(call.args) < 2 or not isinstance(call.args[1], ast.Dict)
                or (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")) != "set_weight_attrs"):
            return
        for key, value in zip(call.args[1].keys, call.args[1].values):
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                attrs = self.module.weight_attrs
                attrs[key.value] = attrs.get(key.value, True) and self._host_value(value)

    def _site_for(self, func: ast.AST, capture: bool, line: int, called: bool = True) -> CallSite | None:
        """The call site for calling `func` (or, with called=False, for a callable passed by value)."""
        if isinstance(func, ast.Name):
            if func.id in self.local_defs:
                return CallSite(line, "key", self.local_defs[func.id], capture=capture)
            if func.id in self.local_types:
                kind, target = self.local_types[func.id]
                return CallSite(line, kind, target, "__call__", capture)
            resolved = self.names.resolve(func)
            return CallSite(line, "name", resolved, capture=capture) if resolved else None
        if isinstance(func, ast.Subscript) and self_attr(func.value):
            return CallSite(line, "elem", self_attr(func.value), "__call__", capture)
        if not isinstance(func, ast.Attribute):
            return None
        method, base = func.attr, func.value
        if isinstance(base, ast.Name) and base.id == "self":
            if called:
                return CallSite(line, "self", method, capture=capture)
            return CallSite(line, "attr", method, "__call__", capture)
        if isinstance(base, ast.Call) and is_name(base.func, "super"):
            return CallSite(line, "super", method, capture=capture)
        if self_attr(base):
            return CallSite(line, "attr", self_attr(base), method, capture)
        if isinstance(base, ast.Subscript) and self_attr(base.value):
            return CallSite(line, "elem", self_attr(base.value), method, capture)
        if isinstance(base, ast.Name) and base.id in self.local_types:
            kind, target = self.local_types[base.id]
            return CallSite(line, kind, target, method, capture)
        resolved = self.names.resolve(func)
        return CallSite(line, "name", resolved, capture=capture) if resolved else None


def _attrs_read_in(body_nodes: BodyNodes, ranges: list[tuple[int, int]]) -> set[str]:
    """`self.x` names a capture body reads: the graph's static inputs and state."""
    return {node.attr for node in (body_nodes.of(ast.Attribute) if ranges else [])
            if isinstance(node.value, ast.Name)
            and node.value.id == "self" and isinstance(node.ctx, ast.Load)
            and within(node.lineno, ranges)}


def _parameter_attrs(node: ast.Assign | ast.Call, names: ImportMap) -> set[str]:
    """`layer.k_scale = torch.nn.Parameter(...)`, `layer.register_parameter("k_scale", ...)`: the attribute made
    a parameter tensor."""
    if isinstance(node, ast.Assign):
        func = node.value.func if isinstance(node.value, ast.Call) else None
        if callee_name(func) != "Parameter" or names.resolve(func) not in PARAMETER_CLASSES:
            return set()
        return {target.attr for target in node.targets if isinstance(target, ast.Attribute)}
    if (isinstance(node.func, ast.Attribute) and node.func.attr in PARAMETER_REGISTRATIONS and node.args
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
        return {node.args[0].value}
    return set()




def _given_args(call: ast.Call) -> tuple[int, list[str]]:
    """What a call passes for sure: its leading positional arguments (up to a `*args` or a literal None)
    and its keywords given something other than a literal None (`**kwargs` passes nothing known)."""
    def none(value: ast.AST) -> bool:
        return isinstance(value, ast.Constant) and value.value is None
    positions = next((i for i, arg in enumerate(call.args) if isinstance(arg, ast.Starred) or none(arg)),
                     len(call.args))
    return positions, [kw.arg for kw in call.keywords if kw.arg and not none(kw.value)]


@dataclass
class _Context:
    """Where a function sits, as its deep facts need it: its def, the function it is nested in (whose guards it
    inherits) and its class's methods that return None when captured and one-time flags."""

    node: ast.FunctionDef | ast.AsyncFunctionDef
    parent: _Context | None
    none_methods: set[str]
    one_time_flags: OneTimeFlags


class ModuleIndexer:
    def __init__(self, module: str, path: str, is_package: bool, source: str, guards: Guards, lazy: bool = False):
        self.index = ModuleIndex(module=module, path=path)
        self.lines = source.splitlines()
        self.guards = replace(guards, assumed=guards.assumed.within(module))  # facts scoped to other modules left out
        self.names = ImportMap(module, is_package)
        self.tables: dict[str, list[str]] = {}  # module-level {kind: LayerClass} tables
        self.constructors: dict[str, list[str]] = {}  # class name -> positional parameters, for graphprep
        self.none_methods: set[str] = set()  # methods of the class being indexed that return None when captured
        self.one_time_flags = OneTimeFlags()  # ... and the `self` flags its methods set false once
        self.platform_guards: dict[int, tuple[Guards, Guards]] = {}  # id(guards) -> (guards, guards.platform())
        self.bodies: dict[int, list[ast.AST]] = {}  # id(def node) -> walk_body: one walk per function per file
        self.method_regions: dict[int, tuple[set[str], Guards, Regions]] = {}  # id(def node) -> `_regions`
        self.lazy = lazy and not self.guards.assumed  # assume facts count their tests in every function
        self.contexts: dict[str, _Context] = {}  # qualname -> what `deepen` needs of where the function sits
        self.scopes: dict[int, tuple[set[str], Guards, Regions]] = {}  # id(def node) -> `_scope`

    @classmethod
    def failed(cls, module: str, path: str, error: tuple[int, int, str]) -> "ModuleIndexer":
        """The indexer of a file that does not parse: an index with its parse error and nothing else."""
        indexer = cls(module, path, False, "", Guards())
        indexer.index.parse_error = error
        return indexer

    def run(self, tree: ast.Module) -> ModuleIndex:
        self.names.collect(tree)
        self.index.imports = self.names.aliases
        self.guards = self.guards.with_aliases(tree.body, self.names)  # `_DEBUG = envs.X.get()`
        self.guards = with_predicates(self.guards, tree, self.names, self._body_nodes)  # `def _can_run_tbo(): ...`
        self.tables = class_tables(tree.body, self.names)
        self.constructors = constructor_params(tree)
        for stmt in tree.body:
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and is_container(stmt.value, self.names):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                self.index.global_containers |= {t.id for t in targets if isinstance(t, ast.Name)}
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and isinstance(stmt.value, ast.Call):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                callee = self.names.resolve(stmt.value.func)
                for target in targets:
                    if isinstance(target, ast.Name) and callee:
                        self.index.global_calls[target.id] = callee
            self._definitions([stmt], prefix="", class_info=None)
        self._other_class_uses(tree)
        return self.index

    def _record_class_uses(self, key: str, body_nodes: BodyNodes) -> None:
        """In one function: each `Foo(...)` call with its function, any other use of `Foo` as ("", line). Calls
        in a lambda (`make_layers(n, lambda prefix: Layer(...))`) count where the lambda is written."""
        uses = self.index.class_uses
        calls, inert = set(), set()
        other: dict[str, list[tuple[str, int]]] = {}  # recorded after the calls, as they always were
        lambdas = [node.body for node in body_nodes.of(ast.Lambda)]
        body_nodes = [*body_nodes, *(n for body in lambdas for n in ast.walk(body))]
        for node in body_nodes:  # one pass: a call comes before its callee and arguments in both walks
            kind = type(node)
            if kind is ast.Call:
                name = _class_name(node.func)
                if name:
                    uses.setdefault(name, []).append((key, node.lineno))
                    calls.add(id(node.func))
                elif isinstance(node.func, ast.Name) and node.func.id in INERT_CALLS:
                    inert.update(id(n) for arg in node.args[1:] for n in ast.walk(arg))
            elif kind is ast.Name or kind is ast.Attribute:  # `_class_name` inlined: most nodes are these
                name = node.id if kind is ast.Name else node.attr
                if name[:1].isupper() and id(node) not in calls and id(node) not in inert:
                    other.setdefault(name, []).append(("", node.lineno))
            elif kind is ast.Constant:
                _record_named_class(other, node)
        for name, found in other.items():
            uses.setdefault(name, []).extend(found)

    def _record_class_arguments(self, body_nodes: BodyNodes) -> None:
        """Classes handed to a class's constructor (`JetNemotronModel(cfg, decoder_layer_type=JetDecoderLayer)`):
        the instance builds its layers from the class given, not from the parameter's default."""
        for node in body_nodes.of(ast.Call):
            if not _class_name(node.func):
                continue
            callee = self.names.resolve(node.func)
            positional = next((node.args[:i] for i, arg in enumerate(node.args) if isinstance(arg, ast.Starred)),
                              node.args)  # positions after a `*args` are unknown
            given = [(f"#{i}", arg) for i, arg in enumerate(positional)]
            given += [(k.arg, k.value) for k in node.keywords if k.arg]
            for param, value in given:
                held = self.names.resolve(value) if callee and isinstance(value, (ast.Name, ast.Attribute)) else None
                if held and looks_like_class(held):
                    self.index.class_arguments.append((callee, param, held))

    def _platform(self, guards: Guards) -> Guards:
        """`guards.platform()`, made once per guards object (most functions share the module's)."""
        if id(guards) not in self.platform_guards:
            self.platform_guards[id(guards)] = (guards, guards.platform())
        return self.platform_guards[id(guards)][1]

    def _other_class_uses(self, tree: ast.Module) -> None:
        """Uses of class-like names outside function bodies: they may build the class (`REGISTRY = {"x": Foo}`,
        `class Bar(Foo)`, a module-level `Foo()`, a name in a string). Annotations, imports, isinstance tests
        and `__all__` build nothing."""
        uses = self.index.class_uses
        stack: list[ast.AST] = list(tree.body)
        while stack:
            node = stack.pop()
            if isinstance(node, (ast.Name, ast.Attribute)):
                name = _class_name(node)
                if name:
                    uses.setdefault(name, []).append(("", node.lineno))
                elif isinstance(node, ast.Attribute):
                    stack.append(node.value)  # `Foo.create`: a use of Foo; `mod.Foo`: one use, of Foo
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):  # its body: `_record_class_uses`
                stack += [*node.decorator_list, *node.args.defaults, *filter(None, node.args.kw_defaults)]
            elif isinstance(node, ast.AnnAssign):
                stack += [node.target, *filter(None, [node.value])]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in INERT_CALLS:
                stack += node.args[:1]
            elif isinstance(node, ast.Constant):
                _record_named_class(uses, node)
            elif not isinstance(node, (ast.arg, ast.Import, ast.ImportFrom)) and not _exports(node):
                stack.extend(ast.iter_child_nodes(node))

    def _definitions(self, statements, prefix: str, class_info: ClassInfo | None) -> None:
        for stmt in statements:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._function(stmt, prefix, class_info)
            elif isinstance(stmt, ast.ClassDef):
                self._class(stmt, prefix)
            elif isinstance(stmt, (ast.If, ast.Try, ast.With)):
                blocks = [getattr(stmt, name, []) for name in ("body", "orelse", "finalbody")]
                blocks += [handler.body for handler in getattr(stmt, "handlers", [])]
                for block in blocks:
                    self._definitions(block, prefix, class_info)

    def _class(self, node: ast.ClassDef, prefix: str) -> None:
        qualname = f"{prefix}{node.name}"
        info = ClassInfo(
            key=f"{self.index.module}:{qualname}",
            qualname=qualname,
            bases=[b for b in (self.names.resolve(base) for base in node.bases) if b],
            methods=[s.name for s in node.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))],
        )
        self.index.classes[qualname] = info
        info.class_attrs = class_attributes(node.body, self.names)
        info.replay_only, device_fields = graph_preparation(node, self.constructors)
        self.index.captured_device_fields |= device_fields
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                annotated = self.names.resolve(stmt.annotation)
                if annotated:
                    info.attr_types.setdefault(stmt.target.id, annotated)
                kind = annotation_kind(ast.unparse(stmt.annotation))
                if kind:
                    info.field_kinds[stmt.target.id] = kind
        outer_methods, outer_flags = self.none_methods, self.one_time_flags
        self.one_time_flags = OneTimeFlags.of({stmt.name: self._body_nodes(stmt) for stmt in node.body
                                            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))})
        self.none_methods = {stmt.name for stmt in node.body if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))
                             and self._returns_none_when_captured(stmt)}
        self._definitions(node.body, f"{qualname}.", info)
        self.none_methods, self.one_time_flags = outer_methods, outer_flags

    def _returns_none_when_captured(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
        """Every `return` on a captured line gives None (or a tuple of them): `if is_decode(): return None, None`."""
        returns = self._body_nodes(node).of(ast.Return)
        nones = [r for r in returns if returns_none(r.value)]
        if not nones or len(nones) == len(returns):
            return bool(nones)
        _, _, regions = self._regions(node, None, self.one_time_flags)
        captured = [r for r in returns if not within(r.lineno, regions.excluded)]
        return bool(captured) and all(returns_none(r.value) for r in captured)

    def _body_nodes(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> BodyNodes:
        """The function's own statements and expressions, walked once (predicates, the class pre-pass and the
        index share it; the tree outlives the indexer, so ids stay unique)."""
        if id(node) not in self.bodies:
            self.bodies[id(node)] = walk_body(node.body)
        return self.bodies[id(node)]

    def _regions(self, node, outer: Guards | None, one_time_flags: OneTimeFlags) -> tuple[set[str], Guards, Regions]:
        """Declared globals, guards with the function's aliases, and its eager-only regions; kept for a method
        (no outer guards) so the class pre-pass and the index compute them once."""
        if outer is None and id(node) in self.method_regions:
            return self.method_regions[id(node)]
        body_nodes = self._body_nodes(node)
        global_names = _global_names(body_nodes)
        guards = (outer or self.guards).with_aliases(body_nodes, self.names)
        found = global_names, guards, function_regions(node, guards, self.names, global_names, body_nodes, one_time_flags)
        if outer is None:
            self.method_regions[id(node)] = found
        return found

    def _scope(self, context: _Context) -> tuple[set[str], Guards, Regions]:
        """The function's locals that are empty when captured, its guards (what functions nested in it start
        from) and its eager-only regions."""
        if id(context.node) not in self.scopes:
            outer = self._scope(context.parent)[1] if context.parent is not None else None
            body_nodes = self._body_nodes(context.node)
            global_names, guards, regions = self._regions(context.node, outer, context.one_time_flags)
            dead_when_captured = falsy_when_captured(body_nodes, regions.excluded, context.none_methods, global_names)
            if dead_when_captured:
                guards = guards.adding(eager_if=dead_when_captured)
                regions = function_regions(context.node, guards, self.names, global_names, body_nodes,
                                           context.one_time_flags)
            self.scopes[id(context.node)] = dead_when_captured, guards, regions
        return self.scopes[id(context.node)]

    def deepen(self, qualname: str) -> FunctionInfo:
        """Fill in the function's call sites and eager-only regions (what the hot walk and the rules read)."""
        info = self.index.functions[qualname]
        if info.deep:
            return info
        context = self.contexts[qualname]
        node = context.node
        dead_when_captured, guards, regions = self._scope(context)
        info.excluded = regions.excluded
        info.memo = regions.memo
        info.cold_spans = regions.cold_spans
        info.empty_when_captured = sorted(dead_when_captured)
        info.never_runs = never_run(node.body, self._platform(guards), self.names) if regions.excluded else []
        info.assumed = regions.assumed
        for label in regions.matched:
            self.index.assumed_tests[label] = self.index.assumed_tests.get(label, 0) + 1
        body_nodes = self._body_nodes(node)
        nested = {stmt.name: f"{self.index.module}:{qualname}.{stmt.name}" for stmt in body_nodes
                  if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))}
        _FunctionScanner(info, self.names, nested, self.index).scan(node, body_nodes)
        info.deep = True
        return info

    def _deep_now(self, info: FunctionInfo, text: str) -> bool:
        """Facts the whole project reads come from these functions, hot or not: capture sites (roots), what the
        rules check anyway (`graph(`/`.replay(` text, padded rows) and `set_weight_attrs` (the loader's host
        attributes); a lazy index leaves the rest to the walk."""
        return (not self.lazy or bool(info.capture_bodies or info.mentions_graph or info.padded_rows)
                or "make_graphed_callables" in text or "set_weight_attrs" in text)

    def _function(self, node, prefix: str, class_info: ClassInfo | None, parent: _Context | None = None) -> None:
        qualname = f"{prefix}{node.name}"
        decorators = [d for d in (self.names.resolve(_decorator_callee(dec)) for dec in node.decorator_list) if d]
        body_nodes = self._body_nodes(node)
        def_line = self.lines[node.lineno - 1] if node.lineno - 1 < len(self.lines) else ""
        info = FunctionInfo(
            key=f"{self.index.module}:{qualname}",
            qualname=qualname,
            class_qualname=class_info.qualname if class_info else None,
            lineno=node.lineno,
            end_lineno=node.end_lineno or node.lineno,
            first_line=_first_line(node),
            decorators=decorators,
            marked_hot=bool(HOT_DECORATORS.intersection(decorators) or HOT_COMMENT.search(def_line)
                            or any(d.endswith(".hot_path") and d.startswith("graphready") for d in decorators)),
            memoized=bool(MEMO_DECORATORS.intersection(decorators)),
            returns_tensor=node.returns is not None and annotation_kind(ast.unparse(node.returns)) == TENSOR,
            returns_class=returned_class(self.names, node, body_nodes) if class_info is not None else None,
            returns_pageable=returns_pageable_tensor(self.names, body_nodes),
            capture_bodies=capture_bodies(body_nodes, self.names),
            absent_regions=absent_argument_regions(node),
            declares_global=bool(_global_names(body_nodes)),
            params=[a.arg for a in [*node.args.posonlyargs, *node.args.args]],
            padded_rows=stale_padded_rows(body_nodes),
            deep=False,
        )
        text = "\n".join(self.lines[info.lineno - 1:info.end_lineno])
        info.mentions_graph = ("graph" in text or ".replay" in text) and bool(GRAPH_TEXT.search(text))  # substring first: fast
        self.index.functions[qualname] = info
        context = self.contexts[qualname] = _Context(node, parent, self.none_methods, self.one_time_flags)
        if self._deep_now(info, text):
            self.deepen(qualname)
        else:  # what `_FunctionScanner` would add to the module's facts
            for stmt in [*body_nodes.of(ast.Assign), *body_nodes.of(ast.Call)]:  # a set is filled: order aside
                self.index.parameter_attrs |= _parameter_attrs(stmt, self.names)
        self._record_class_uses(info.key, body_nodes)
        self._record_class_arguments(body_nodes)
        if class_info is not None:
            AttributeTyper(self.names, class_info, node, body_nodes, self.tables).learn()
            class_info.graph_inputs |= _attrs_read_in(body_nodes, info.capture_bodies)
        for stmt in body_nodes:
            kind = type(stmt)  # exact types (a parsed tree has no subclasses): cheaper than `isinstance` per node
            if kind is ast.FunctionDef or kind is ast.AsyncFunctionDef:
                self._function(stmt, f"{qualname}.", None, context)
            elif kind is ast.ClassDef:
                self._class(stmt, f"{qualname}.")

def _global_names(body_nodes: BodyNodes) -> set[str]:
    return {n for g in body_nodes.of(ast.Global, ast.Nonlocal) for n in g.names}


def _class_name(node: ast.AST) -> str | None:
    """`Foo` of a `Foo` or `mod.Foo` expression (a capitalised name: what looks like a class)."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name if name[:1].isupper() else None


def _exports(node: ast.AST) -> bool:
    """`__all__ = [...]` (or `+=`): names a module exports, which builds none of them."""
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AugAssign) else []
    return any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets)


def _record_named_class(uses: dict[str, list[tuple[str, int]]], node: ast.Constant) -> None:
    """A string that names a class (`"LlamaForCausalLM"`, `"pkg.mod.Foo"`) is a use: registries build classes
    they find by name. Prose (a docstring, a message) names nothing."""
    if isinstance(node.value, str) and len(node.value) < 200:
        parts = node.value.split(".")
        if all(part.isidentifier() for part in parts) and looks_like_class(node.value):
            uses.setdefault(parts[-1], []).append(("", node.lineno))


def _decorator_callee(node: ast.AST) -> ast.AST:
    return node.func if isinstance(node, ast.Call) else node


def _first_line(stmt: ast.stmt) -> int:
    decorators = getattr(stmt, "decorator_list", None)
    return min([stmt.lineno, *(d.lineno for d in decorators)]) if decorators else stmt.lineno


def index_module(module: str, path: str, source: str, guards: Guards, is_package: bool = False) -> ModuleIndex:
    """The module's index with every function's facts worked out."""
    return module_indexer(module, path, source, guards, is_package).index


def module_indexer(module: str, path: str, source: str, guards: Guards, is_package: bool = False,
                   lazy: bool = False) -> "ModuleIndexer":
    """The indexer of one module, holding its tree: with `lazy`, the call sites and eager-only regions of most
    functions are left for `deepen` (the hot walk reaches about one function in seven)."""
    try:
        with python_limits(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # `1()` or "\d" in the user's code is not ours to print
            tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        return ModuleIndexer.failed(module, path, (exc.lineno or 1, max((exc.offset or 1) - 1, 0), exc.msg))
    except ValueError as exc:  # e.g. null bytes
        return ModuleIndexer.failed(module, path, (1, 0, str(exc)))
    except (RecursionError, MemoryError):  # nesting deeper than CPython itself can compile
        return ModuleIndexer.failed(module, path, (1, 0, "nested too deeply for Python to compile"))
    indexer = ModuleIndexer(module, path, is_package, source, guards, lazy)
    indexer.run(tree)
    return indexer

