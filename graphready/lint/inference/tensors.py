"""Is this expression a device tensor?": the inference every rule relies on.

Flow-insensitive and per function: a name is a tensor if any assignment makes it one. Kinds are
TENSOR, BOOL (a boolean tensor, for mask indexing), SCALAR (plainly Python: shapes, lengths,
dtypes, `x.numel()`), HOST (data on the host: numpy arrays, Python lists, CPU tensors, `*_cpu`
mirrors; reading them never waits for the GPU) and None (unknown: never enough to fire a rule that
needs a tensor). Whether a host tensor is pinned is tracked separately, for host-to-device copies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Collection

import libcst as cst

from graphready.lint.analysis.cstwalk import nodes
from graphready.lint.inference.evidence import tensor_call_results
from graphready.lint.scope.resolve import ImportMap
from graphready.lint.inference.torchnames import FACTORIES, non_tensor_torch

from graphready.lint.inference.torchnames import BOOL, HOST, HOST_NAME, SCALAR, TENSOR, TENSORS, annotation_kind  # noqa: F401 (re-exported)
PAGEABLE, PINNED = "pageable", "pinned"

NON_TENSOR_METHODS = {
    "item", "tolist", "size", "dim", "numel", "nelement", "element_size", "data_ptr", "stride",
    "is_contiguous", "is_floating_point", "is_complex", "get_device", "storage_offset", "numpy",
    "storage", "untyped_storage", "nbytes", "ndimension", "is_shared", "is_inference", "is_pinned", "is_set_to", "__len__", "type", "synchronize", "record", "query",
    "record_event", "wait_event", "wait_stream", "keys", "items", "append", "extend", "get",
}
METADATA_ATTRS = {
    "shape", "dtype", "device", "ndim", "is_cuda", "is_cpu", "layout", "requires_grad", "is_leaf",
    "names", "itemsize", "nbytes", "is_sparse", "is_quantized", "is_meta",
}
TENSOR_ATTRS = {"T", "mT", "H", "mH", "data", "real", "imag", "grad", "values", "indices"}
BOOL_OPS = {
    "bool", "isnan", "isinf", "isfinite", "eq", "ne", "gt", "ge", "lt", "le", "greater", "less",
    "greater_equal", "less_equal", "not_equal", "logical_and", "logical_or", "logical_not",
    "logical_xor", "any", "all", "isin", "isclose", "signbit", "isneginf", "isposinf",
}
DEVICE_EXPRESSIONS = (cst.SimpleString, cst.FormattedString, cst.Call, cst.Subscript)
HOST_MODULES = ("numpy.", "np.", "array.")
# builtins that build host data (never a tensor): what they return lives on the host
HOST_BUILTINS = {"list", "tuple", "dict", "set", "frozenset", "sorted", "bytes", "bytearray", "memoryview"}
HOST_RESULT_METHODS = {"numpy", "tolist", "cpu", "pin_memory"}
# torch functions that return a tuple whose every element is a tensor
TENSOR_TUPLE_OPS = {
    "split", "chunk", "unbind", "tensor_split", "topk", "sort", "max", "min", "mode", "median", "kthvalue",
    "std_mean", "var_mean", "aminmax", "broadcast_tensors", "meshgrid", "frexp", "unique", "cummax", "cummin",
}
PYTHON_SCALAR_BUILTINS = {"len", "int", "float", "bool", "str", "round", "abs", "min", "max", "sum", "range", "isinstance", "hash", "id"}


def dotted(node: cst.CSTNode) -> str | None:
    parts = []
    while isinstance(node, cst.Attribute):
        parts.append(node.attr.value)
        node = node.value
    if isinstance(node, cst.Name):
        parts.append(node.value)
        return ".".join(reversed(parts))
    return None


def self_attr(node: cst.CSTNode) -> str | None:
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self":
        return node.attr.value
    return None


def mentions_self_attr(value: cst.CSTNode, attr: str) -> bool:
    """`self.<attr>` occurs in `value`: the new value is computed from the old one."""
    return any(self_attr(node) == attr for node in nodes(value))


def mentions_name(value: cst.CSTNode, name: str) -> bool:
    return any(isinstance(node, cst.Name) and node.value == name for node in nodes(value))


def keyword(call: cst.Call, name: str) -> cst.BaseExpression | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg.value
    return None


def positional(call: cst.Call) -> list[cst.BaseExpression]:
    return [a.value for a in call.args if a.keyword is None and not a.star]


def string_value(node: cst.CSTNode) -> str | None:
    if isinstance(node, cst.SimpleString):
        return node.evaluated_value if isinstance(node.evaluated_value, str) else None
    return None


def _not_pinned(pin_memory: cst.CSTNode | None) -> bool:
    """Pageable unless pinning is asked for: `pin_memory=<flag>` pins wherever the platform allows."""
    return pin_memory is None or (isinstance(pin_memory, cst.Name) and pin_memory.value in ("False", "None"))


def _is_number(node: cst.BaseExpression) -> bool:
    """An int/float literal, signed or not (a bool or None default says nothing about the type)."""
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, (cst.Minus, cst.Plus)):
        node = node.expression
    return isinstance(node, (cst.Integer, cst.Float))


class Facts:
    """What is known outside the current function: class attributes, module globals, callees."""

    def __init__(self, names: ImportMap):
        self.names = names
        self.tensor_attrs: set[str] = set()
        self.bool_attrs: set[str] = set()
        self.host_attrs: dict[str, str] = {}
        self.tensor_globals: set[str] = set()
        self.tensor_functions: set[str] = set()  # dotted names of functions annotated -> Tensor
        self.pageable_functions: set[str] = set()  # dotted names of functions returning pageable CPU tensors
        self.captured_device_fields: set[str] = set()  # metadata attrs a capture preparation makes device tensors
        self.class_fields: dict[str, dict[str, str]] = {}  # dotted class -> field -> kind, from annotations


class TensorEnv:
    """Kinds of local names in one function, on top of class/module facts."""

    def __init__(self, facts: Facts):
        self.facts = facts
        self.locals: dict[str, str] = {}
        self.host: dict[str, str] = {}
        self.device_names: dict[str, str] = {}  # local names bound to a device expression
        self.classes: dict[str, str] = {}  # local names annotated with a project class (`meta: AttnMetadata`)
        # memos by id(node) (a node's own hash is a Python call), each holding its node: alive, its id stays its own
        self._kinds: dict[int, tuple[cst.CSTNode, str | None]] = {}  # valid once learning is done
        self._qualnames: dict[int, tuple[cst.CSTNode, str | None]] = {}
        self._learned = False

    def qualname(self, node: cst.CSTNode) -> str | None:
        found = self._qualnames.get(id(node))
        if found is None:
            name = dotted(node)
            found = self._qualnames[id(node)] = node, self.facts.names.resolve_dotted(name) if name else None
        return found[1]

    # -- learning -----------------------------------------------------------------------
    def learn_function(self, func: cst.FunctionDef, scan: FunctionScan | None = None,
                       host_params: Collection[str] = ()) -> None:
        """Kinds of the function's locals; `host_params` are the parameters every hot caller passes host data."""
        for param in [*func.params.posonly_params, *func.params.params, *func.params.kwonly_params]:
            if param.name.value in host_params:
                self.locals[param.name.value] = HOST
                continue
            if param.annotation is not None:
                kind = self.annotation_kind(param.annotation.annotation)
                if kind:
                    self.locals[param.name.value] = kind
                owner = self._annotated_class(param.annotation.annotation)
                if owner:
                    self.classes[param.name.value] = owner
            elif param.default is not None and _is_number(param.default):
                self.locals[param.name.value] = SCALAR  # `max_len=-1`: callers pass a Python number
        scan = scan or scan_function(func)
        self._settle(scan)
        evident = tensor_call_results(func, self.qualname, lambda call: self.kind(call) is None)
        if evident - self.locals.keys():
            self.locals.update((name, TENSOR) for name in evident if name not in self.locals)
            self._settle(scan)  # `z = y + 1` after `y` turned out a tensor
        self._learned = True

    def _settle(self, scan: FunctionScan) -> None:
        for _ in range(3):  # a few passes settle chains like a = f(x); b = a + 1
            before = (dict(self.locals), dict(self.host))
            for targets, value in scan.pairs:
                self._learn(targets, value)
            for target, iterable in scan.loops:
                if isinstance(target, cst.Name) and self.kind(iterable) in (TENSOR, BOOL, TENSORS):
                    self.locals[target.value] = TENSOR
            if before == (self.locals, self.host):
                break

    def annotation_kind(self, annotation: cst.BaseExpression) -> str | None:
        return annotation_kind(cst.Module([]).code_for_node(annotation))

    def _annotated_class(self, annotation: cst.BaseExpression) -> str | None:
        """`AttnMetadata`, `Optional[AttnMetadata]`, `"AttnMetadata"` -> the class's dotted name, if known."""
        if isinstance(annotation, cst.BinaryOperation) and isinstance(annotation.operator, cst.BitOr):
            sides = [annotation.left, annotation.right]
            others = [x for x in sides if not (isinstance(x, cst.Name) and x.value == "None")]
            if len(others) != 1:
                return None
            annotation = others[0]
        if isinstance(annotation, cst.Subscript) and annotation.slice:
            head = dotted(annotation.value) or ""
            if head.rsplit(".", 1)[-1] != "Optional":
                return None
            first = annotation.slice[0].slice
            annotation = first.value if isinstance(first, cst.Index) else annotation
        name = string_value(annotation) if isinstance(annotation, cst.SimpleString) else dotted(annotation)
        if not name or not name.replace(".", "").isidentifier():
            return None
        resolved = self.facts.names.resolve_dotted(name)
        return resolved if resolved in self.facts.class_fields else None

    def _learn(self, targets: list[cst.BaseExpression], value: cst.BaseExpression | None) -> None:
        if value is None:
            return
        kind = self.kind(value)
        host = self.host_status(value)
        for target in targets:
            names = [target]
            if isinstance(target, (cst.Tuple, cst.List)):
                names = [e if isinstance(e, cst.StarredElement) else e.value for e in target.elements]
                if kind in (TENSOR, BOOL) and not self._tensor_tuple(value):
                    continue  # `y, ok = helper(x)`: the parts of an unknown tuple are unknown
            for name in names:
                if isinstance(name, cst.StarredElement) and kind in (TENSOR, TENSORS):
                    if isinstance(name.value, cst.Name):
                        self.locals[name.value.value] = TENSORS
                    continue
                if not isinstance(name, cst.Name):
                    continue
                if host and len(names) == 1:
                    self.host[name.value] = host
                if kind == HOST:
                    self.locals[name.value] = HOST
                    continue
                if kind in (TENSOR, BOOL):
                    if self.locals.get(name.value) != BOOL:
                        self.locals[name.value] = kind
                elif kind == SCALAR and name.value not in self.locals and len(names) == 1:
                    self.locals[name.value] = SCALAR
                if host and len(names) == 1:
                    self.host[name.value] = host
                if len(names) == 1 and isinstance(value, DEVICE_EXPRESSIONS):
                    device = device_kind(value, self)
                    if device:
                        self.device_names[name.value] = device

    def _tensor_tuple(self, value: cst.BaseExpression) -> bool:
        """Unpacking this value gives tensors: a tuple op (`split`, `topk`, ...) or a literal tuple."""
        if isinstance(value, (cst.Tuple, cst.List)):
            return True
        if not isinstance(value, cst.Call):
            return False
        func = value.func
        if isinstance(func, cst.Attribute) and self.kind(func.value) in (TENSOR, BOOL):
            return func.attr.value in TENSOR_TUPLE_OPS
        name = self.qualname(func) or ""
        return name.startswith("torch.") and name.rsplit(".", 1)[-1] in TENSOR_TUPLE_OPS

    # -- queries -----------------------------------------------------------------------
    def is_tensor(self, node: cst.CSTNode) -> bool:
        return self.kind(node) in (TENSOR, BOOL)

    def on_host(self, node: cst.CSTNode) -> bool:
        """Known to live on the host (Python value, numpy, CPU tensor): reading it never syncs."""
        return self.kind(node) in (SCALAR, HOST) or self.host_status(node) is not None

    def kind(self, node: cst.CSTNode) -> str | None:
        if not self._learned:
            return self._kind(node)
        found = self._kinds.get(id(node))
        if found is None:
            found = self._kinds[id(node)] = node, self._kind(node)
        return found[1]

    def _kind(self, node: cst.CSTNode) -> str | None:
        if isinstance(node, cst.Name):
            if node.value in self.host or HOST_NAME.search(node.value):
                return HOST
            if node.value in self.locals:
                return self.locals[node.value]
            if node.value in self.facts.tensor_globals:
                return TENSOR
            if node.value in ("True", "False", "None"):
                return SCALAR
            return None
        if isinstance(node, (cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.FormattedString,
                             cst.ConcatenatedString)):
            return SCALAR
        if isinstance(node, cst.Attribute):
            attr = node.attr.value
            owner = self_attr(node)
            if HOST_NAME.search(attr) or (owner is not None and owner in self.facts.host_attrs):
                return HOST
            if owner is not None:
                if owner in self.facts.bool_attrs:
                    return BOOL
                return TENSOR if owner in self.facts.tensor_attrs else None
            if attr in METADATA_ATTRS:
                return SCALAR
            if attr in self.facts.captured_device_fields:  # what the graph sees, whatever the annotation says
                return TENSOR
            if isinstance(node.value, cst.Name) and node.value.value in self.classes:
                return self.facts.class_fields[self.classes[node.value.value]].get(attr)
            base = self.kind(node.value)
            if base in (TENSOR, BOOL) and attr in TENSOR_ATTRS:
                return TENSOR
            name = self.qualname(node)
            if _torch_constant(name):
                return SCALAR
            return None
        if isinstance(node, cst.Call):
            return self._call_kind(node)
        if isinstance(node, cst.BinaryOperation):
            left, right = self.kind(node.left), self.kind(node.right)
            if isinstance(node.operator, (cst.BitAnd, cst.BitOr, cst.BitXor)) and BOOL in (left, right):
                return BOOL
            if TENSOR in (left, right) or BOOL in (left, right):
                return TENSOR
            if left == SCALAR and right == SCALAR:
                return SCALAR
            if {left, right} <= {SCALAR, HOST}:
                return HOST
            return None
        if isinstance(node, (cst.List, cst.Tuple, cst.Set)):
            kinds = {self.kind(e.value) for e in node.elements}
            if kinds & {TENSOR, BOOL, TENSORS}:
                return TENSORS
            return HOST if kinds <= {SCALAR, HOST} else None
        if isinstance(node, (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)):
            return HOST if self.kind(getattr(node, "elt", getattr(node, "value", None))) in (SCALAR, HOST) else None
        if isinstance(node, cst.UnaryOperation):
            if isinstance(node.operator, cst.Not):
                return SCALAR
            return self.kind(node.expression)
        if isinstance(node, cst.Comparison):
            if any(isinstance(c.operator, (cst.Is, cst.IsNot, cst.In, cst.NotIn)) for c in node.comparisons):
                return SCALAR
            operands = [node.left, *(c.comparator for c in node.comparisons)]
            return BOOL if any(self.is_tensor(o) for o in operands) else SCALAR
        if isinstance(node, cst.Subscript):
            base = node.value
            if isinstance(base, cst.Attribute) and base.attr.value in ("shape", "stride"):
                return SCALAR
            if isinstance(base, cst.Call) and isinstance(base.func, cst.Attribute) and base.func.attr.value in ("size", "stride"):
                return SCALAR
            base_kind = self.kind(base)
            if base_kind == TENSORS:
                return TENSOR
            return base_kind if base_kind in (TENSOR, BOOL, HOST) else None
        if isinstance(node, cst.IfExp):
            kinds = {self.kind(node.body), self.kind(node.orelse)}
            return TENSOR if kinds & {TENSOR, BOOL} else None
        return None

    def _call_kind(self, call: cst.Call) -> str | None:
        func = call.func
        if self.host_status(call) is not None:
            return HOST
        if isinstance(func, cst.Attribute) and self_attr(func) is None:
            method = func.attr.value
            receiver = self.kind(func.value)
            if method in HOST_RESULT_METHODS:
                return HOST
            if receiver == HOST:
                return TENSOR if method == "cuda" or (method == "to" and _moves_device(call, self)) else HOST
            if receiver in (TENSOR, BOOL):
                if method in NON_TENSOR_METHODS:
                    return SCALAR
                if method in BOOL_OPS:
                    return BOOL
                if method == "to" and _dtype_is_bool(call, self):
                    return BOOL
                return TENSOR
        name = self.qualname(func)
        if name is None:
            return None
        short = name.rsplit(".", 1)[-1]
        if name in PYTHON_SCALAR_BUILTINS:
            return SCALAR
        if name.startswith(HOST_MODULES) or name in HOST_BUILTINS:
            return HOST
        if name.startswith("torch."):
            if non_tensor_torch(name):
                return SCALAR if short in ("equal", "allclose", "is_tensor", "numel", "is_nonzero") else None
            if name.startswith("torch.nn.") and not name.startswith("torch.nn.functional."):
                return None
            if short[:1].isupper() and short != "Tensor":
                return None
            if short in BOOL_OPS or _dtype_is_bool(call, self):
                return BOOL
            if keyword(call, "device") is None:
                kinds = {self.kind(arg.value) for arg in call.args if arg.keyword is None}
                if HOST in kinds and not kinds & {TENSOR, BOOL, TENSORS}:
                    return HOST  # `torch.sum(counts_cpu)`: a torch op on host tensors stays on the host
            return TENSOR
        if name.startswith("math."):
            return SCALAR
        if name in self.facts.tensor_functions:
            return TENSOR
        return None

    def host_status(self, node: cst.CSTNode) -> str | None:
        """PAGEABLE / PINNED for host (CPU) tensors, None otherwise or unknown."""
        if isinstance(node, cst.Name):
            return self.host.get(node.value)
        owner = self_attr(node)
        if owner is not None:
            return self.facts.host_attrs.get(owner)
        if not isinstance(node, cst.Call):
            return None
        func = node.func
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            if method == "pin_memory":
                return PINNED
            if method == "cpu":
                return PAGEABLE
            if method == "to" and device_kind(_device_arg(node), self) == "cpu":
                return PAGEABLE
            if method in ("view", "reshape", "flatten", "contiguous", "unsqueeze", "squeeze", "long", "int", "float"):
                return self.host_status(func.value)
        name = self.qualname(func)
        if name in ("torch.from_numpy", "torch.frombuffer") or name in self.facts.pageable_functions:
            return PAGEABLE
        if name and name.startswith("torch.") and name.count(".") == 1 and name.rsplit(".", 1)[-1] in FACTORIES:
            device = keyword(node, "device")
            if device is not None and device_kind(device, self) != "cpu":
                return None
            return PAGEABLE if _not_pinned(keyword(node, "pin_memory")) else PINNED
        return None


def _moves_device(call: cst.Call, env: "TensorEnv") -> bool:
    """`.to(device)`, `.to("cuda")`, `.to(other)`; not `.to(torch.int64)` or `.to(dtype=...)`."""
    if keyword(call, "device") is not None:
        return True
    for arg in call.args:
        if arg.keyword is not None:
            continue
        if not _torch_constant(env.qualname(arg.value)):
            return True
    return False


def _torch_constant(name: str | None) -> bool:
    """`torch.float32`, `torch.bool`, ...: a lowercase name right under `torch` read as a value."""
    return bool(name) and name.startswith("torch.") and name.count(".") == 1 and name[6:7].islower()


def _dtype_is_bool(call: cst.Call, env: TensorEnv) -> bool:
    dtype = keyword(call, "dtype")
    if dtype is None and call.args and isinstance(call.func, cst.Attribute) and call.func.attr.value == "to":
        dtype = call.args[0].value
    return dtype is not None and env.qualname(dtype) == "torch.bool"


def _device_arg(call: cst.Call) -> cst.BaseExpression | None:
    device = keyword(call, "device")
    if device is not None:
        return device
    args = positional(call)
    return args[0] if args else None


def device_kind(node: cst.CSTNode | None, env: TensorEnv, depth: int = 0) -> str | None:
    """'cpu', 'cuda' (current device), 'explicit' (a fixed device index), 'device' (some device), or None."""
    if node is None or depth > 4:
        return None
    text = string_value(node)
    if text is not None:
        if text.startswith("cpu"):
            return "cpu"
        if text.startswith("cuda:"):
            return "explicit"
        return "cuda" if text.startswith("cuda") else None
    if isinstance(node, cst.FormattedString):
        head = node.parts[0] if node.parts else None
        if isinstance(head, cst.FormattedStringText) and head.value.startswith("cuda"):
            return "explicit"
        return None
    if isinstance(node, cst.Call):
        name = env.qualname(node.func)
        if name == "torch.device":
            args = positional(node)
            first = device_kind(args[0], env, depth + 1) if args else None
            if len(args) >= 2 or keyword(node, "index") is not None:
                return "explicit"
            return first
        return None
    if isinstance(node, cst.Subscript):
        base = dotted(node.value) or ""
        return "explicit" if "dev" in base.rsplit(".", 1)[-1].lower() else None
    if isinstance(node, cst.Name) and node.value in env.device_names:
        return env.device_names[node.value]
    name = dotted(node) or ""
    last = name.rsplit(".", 1)[-1].lower()
    if name and env.qualname(node) and (env.qualname(node) or "").startswith("torch.") and last != "device":
        return None  # torch.float16 and friends are dtypes
    if last == "device" or last.endswith("_device") or last in ("dev", "device_id"):
        return "device"
    if env.is_tensor(node):
        return "device"
    return None


@dataclass
class FunctionScan:
    """Everything assigned in one function body (not nested scopes), gathered in one walk."""

    pairs: list[tuple[list[cst.BaseExpression], cst.BaseExpression | None]] = field(default_factory=list)
    loops: list[tuple[cst.BaseExpression, cst.BaseExpression]] = field(default_factory=list)
    attribute_writes: list[tuple[str, cst.CSTNode, cst.BaseExpression, bool]] = field(default_factory=list)
    global_writes: list[tuple[str, cst.CSTNode]] = field(default_factory=list)
    pair_nodes: list[cst.CSTNode] = field(default_factory=list)  # the statement of each pair / loop,
    loop_nodes: list[cst.CSTNode] = field(default_factory=list)  # to drop those on eager-only lines

    def hot_only(self, is_hot: Callable[[cst.CSTNode], bool]) -> "FunctionScan":
        """The same scan without local assignments on lines that never run in a graph (what a
        variable holds while capturing is decided by the captured branches alone)."""
        kept = [i for i, node in enumerate(self.pair_nodes) if is_hot(node)]
        loops = [i for i, node in enumerate(self.loop_nodes) if is_hot(node)]
        return FunctionScan([self.pairs[i] for i in kept], [self.loops[i] for i in loops], self.attribute_writes,
                            self.global_writes, [self.pair_nodes[i] for i in kept], [self.loop_nodes[i] for i in loops])


def scan_function(func: cst.FunctionDef) -> FunctionScan:
    scan = FunctionScan()
    global_names: set[str] = set()
    named_writes: list[tuple[str, cst.CSTNode]] = []
    for node in nodes(func):
        kind = type(node)
        if kind is cst.Assign:
            targets, augmented = [t.target for t in node.targets], False
            scan.pairs.append((targets, node.value))
            scan.pair_nodes.append(node)
        elif kind is cst.AnnAssign or kind is cst.NamedExpr:
            targets, augmented = [node.target], False
            scan.pairs.append((targets, node.value))
            scan.pair_nodes.append(node)
        elif kind is cst.AugAssign:
            targets, augmented = [node.target], True
            scan.pairs.append((targets, cst.BinaryOperation(node.target, cst.Add(), node.value)))
            scan.pair_nodes.append(node)
        elif kind is cst.For:
            scan.loops.append((node.target, node.iter))
            scan.loop_nodes.append(node.target)
            continue
        elif kind is cst.WithItem and node.asname is not None:
            scan.pairs.append(([node.asname.name], node.item))
            scan.pair_nodes.append(node)
            continue
        elif kind is cst.Global:
            global_names |= {n.name.value for n in node.names}
            continue
        else:
            continue
        if node.value is None:
            continue
        for target in targets:
            attr = self_attr(target)
            if attr is not None:
                scan.attribute_writes.append((attr, node, node.value, augmented))
            elif type(target) is cst.Name:
                named_writes.append((target.value, node))
    scan.global_writes = [(name, node) for name, node in named_writes if name in global_names]
    return scan

