"""What class an object attribute holds, learned from the methods that set it.

The hot-path walk follows `self.mlp(x)` into `MoE.forward` only if it knows `self.mlp` is a `MoE`.
Engines build their modules in many ways, and each one missed leaves a decoder layer unlinted:
`self.layers = make_layers(n, lambda i, prefix: Layer(...))`, a local `def layer_fn(...)` handed to
the factory, `layer_type=Layer` parameters a subclass overrides through `super().__init__`,
`attention_cls = Attention` class attributes, `self.attn = self._build_attn()` builder methods,
`self.layers.append(layer)`, and `self.mlp = MoE(...) if sparse else MLP(...)` (both are kept).
"""

from __future__ import annotations

import ast
from typing import Protocol

from graphready.lint.scope.astwalk import BodyNodes, walk_body
from graphready.lint.scope.resolve import ImportMap
from graphready.lint.inference.torchnames import FACTORIES

MODULE_CONTAINERS = {"torch.nn.ModuleList", "torch.nn.Sequential", "torch.nn.ModuleDict", "list", "tuple"}
MODULE_CHAIN_METHODS = {"to", "cuda", "cpu", "eval", "train", "half", "float", "bfloat16", "requires_grad_"}
CONTAINER_CALLS = {"list", "dict", "set", "collections.deque", "collections.defaultdict", "collections.OrderedDict"}


class AttributeTable(Protocol):
    """The parts of index.ClassInfo this module fills."""

    attr_types: dict[str, str]
    attr_elem_types: dict[str, str]
    attr_alternatives: dict[str, list[str]]
    attr_elem_alternatives: dict[str, list[str]]
    attr_builders: dict[str, str]
    attr_elem_params: dict[str, str]
    attr_params: dict[str, str]
    super_init_classes: dict[str, str]
    class_attrs: dict[str, str]
    tensor_attrs: set[str]
    attr_calls: dict[str, list[str]]
    host_attrs: dict[str, str]
    container_attrs: set[str]


def looks_like_class(dotted: str) -> bool:
    return dotted.rsplit(".", 1)[-1][:1].isupper()


def is_name(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def self_attr(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute) and is_name(node.value, "self"):
        return node.attr
    return None


def unwrap_module_chain(value: ast.AST) -> ast.AST:
    """`Model(...).to(dev).eval()` -> `Model(...)`: these methods return the module itself."""
    while (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)
           and value.func.attr in MODULE_CHAIN_METHODS and isinstance(value.func.value, ast.Call)):
        value = value.func.value
    return value


def is_container(value: ast.AST | None, names: ImportMap) -> bool:
    """An empty (or literal) list, dict or set, or a container constructor: state that can grow."""
    if isinstance(value, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp)):
        return True
    return isinstance(value, ast.Call) and names.resolve(value.func) in CONTAINER_CALLS


def class_attributes(body: list[ast.stmt], names: ImportMap) -> dict[str, str]:
    """`attention_cls = Attention` in a class body: attributes that hold a class."""
    held: dict[str, str] = {}
    for stmt in body:  # `block_cls = Block` or `block_cls: type[nn.Module] = Block`
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
        if isinstance(getattr(stmt, "value", None), (ast.Name, ast.Attribute)):
            value = names.resolve(stmt.value)
            if value and looks_like_class(value):
                held.update((t.id, value) for t in targets if isinstance(t, ast.Name))
    return held


def class_tables(body: list[ast.stmt], names: ImportMap) -> dict[str, list[str]]:
    """`LAYER_TYPES = {"attention": AttnLayer, "mamba": MambaLayer}` at module level: a name -> its classes."""
    tables: dict[str, list[str]] = {}
    for stmt in body:
        target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else getattr(stmt, "target", None)
        value = getattr(stmt, "value", None)
        if isinstance(target, ast.Name) and isinstance(value, ast.Dict) and value.values:
            held = [names.resolve(v) if isinstance(v, (ast.Name, ast.Attribute)) else None for v in value.values]
            if all(h and looks_like_class(h) for h in held):
                tables[f"{names.module}.{target.id}"] = list(dict.fromkeys(held))
    return tables


def note_type(info: AttributeTable, attr: str, held: str) -> None:
    """The first class seen for self.<attr> is its type; other branches' classes are alternatives."""
    first = info.attr_types.setdefault(attr, held)
    if first != held and held not in info.attr_alternatives.setdefault(attr, []):
        info.attr_alternatives[attr].append(held)


class AttributeTyper:
    """Learns the attribute types one method of a class sets."""

    def __init__(self, names: ImportMap, info: AttributeTable, func: ast.FunctionDef | ast.AsyncFunctionDef,
                 body_nodes: BodyNodes, tables: dict[str, list[str]]):
        self.names, self.info, self.body_nodes, self.tables = names, info, body_nodes, tables
        args = func.args
        self.params = {a.arg: names.resolve(a.annotation) for a in [*args.args, *args.kwonlyargs]
                       if a.annotation is not None}
        positional = [*args.posonlyargs, *args.args]
        defaults = [*zip(positional[len(positional) - len(args.defaults):], args.defaults),
                    *((a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None)]
        self.class_params = {  # `layer_type=DecoderLayer`: a parameter that holds a class
            a.arg: names.resolve(d) for a, d in defaults
            if isinstance(d, (ast.Name, ast.Attribute)) and looks_like_class(names.resolve(d) or "")
        }
        self.builders = {n.name: n for n in body_nodes.of(ast.FunctionDef)}
        self.local_classes: dict[str, list[str]] = {}  # `attn_cls = MLAAttention` (one per branch)
        self.local_values: dict[str, ast.AST] = {}
        for node in body_nodes.of(ast.Assign):
            if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                name, value = node.targets[0].id, node.value
                self.local_values.setdefault(name, value)
                for option in (value.body, value.orelse) if isinstance(value, ast.IfExp) else (value,):
                    held = names.resolve(option) if isinstance(option, (ast.Name, ast.Attribute)) else None
                    if held and looks_like_class(held):
                        self.local_classes.setdefault(name, []).append(held)

    def learn(self) -> None:
        info = self.info
        built = {t.id: n.value for n in self.body_nodes.of(ast.Assign) if isinstance(n.value, ast.Call)
                 for t in n.targets if isinstance(t, ast.Name)}
        for node in self.body_nodes:
            if isinstance(node, ast.Call):
                self._learn_call(node, built)
            if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
                continue
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Call):
                    # `self.layers, self.start, self.end = make_pp_layers(n, lambda i, p: Layer(...))` (SGLang)
                    # `self.start, self.end, self.layers = make_layers(n, lambda prefix: Layer(...))` (vLLM):
                    # which element is the list is unknown, and typing the indices too is harmless
                    for attr in filter(None, map(self_attr, target.elts)):
                        self._learn_elements(attr, node.value)
                    continue
                attr = self_attr(target)
                if attr:
                    record_attribute_calls(self.names, attr, node.value, info)
                    if is_container(node.value, self.names):
                        info.container_attrs.add(attr)
                    self._learn_value(attr, unwrap_module_chain(node.value))

    def _learn_call(self, node: ast.Call, built: dict[str, ast.AST]) -> None:
        func, info = node.func, self.info
        if not isinstance(func, ast.Attribute):
            return
        if func.attr in ("register_buffer", "register_parameter") and is_name(func.value, "self") and node.args \
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
            info.tensor_attrs.add(node.args[0].value)
        elif func.attr == "append" and self_attr(func.value) and len(node.args) == 1:
            item = node.args[0]  # `self.layers.append(Layer(...))`, or of a local built just before
            item = built.get(item.id, item) if isinstance(item, ast.Name) else item
            element = self.element_class([item])
            if element:
                info.attr_elem_types.setdefault(self_attr(func.value), element)
        elif func.attr == "__init__" and isinstance(func.value, ast.Call) and is_name(func.value.func, "super"):
            for keyword in node.keywords:  # `super().__init__(..., decoder_layer_type=Qwen3DecoderLayer)`
                passed = self.names.resolve(keyword.value) if keyword.arg else None
                if passed and looks_like_class(passed):
                    info.super_init_classes[keyword.arg] = passed

    def _learn_value(self, attr: str, value: ast.AST) -> None:
        info = self.info
        if isinstance(value, ast.IfExp):  # `MoE(...) if sparse else MLP(...)`: either may be called
            self._learn_value(attr, unwrap_module_chain(value.body))
            self._learn_value(attr, unwrap_module_chain(value.orelse))
        elif isinstance(value, ast.Call) and self_attr(value.func):
            held = self_attr(value.func)
            if held in info.class_attrs:  # `self.attn = self.attention_cls(...)`
                note_type(info, attr, info.class_attrs[held])
            else:  # `self.attn = self._build_attn(...)`
                info.attr_builders.setdefault(attr, held)
        elif isinstance(value, ast.Name) and self.params.get(value.id):
            note_type(info, attr, self.params[value.id])
        elif isinstance(value, (ast.Name, ast.Attribute)) and looks_like_class(self.names.resolve(value) or ""):
            info.class_attrs[attr] = self.names.resolve(value)  # `self.block_cls = TransformerBlock`
        elif isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in self.class_params:
            info.attr_params.setdefault(attr, value.func.id)  # `self.attn = attn_layer_type(...)`
            note_type(info, attr, self.class_params[value.func.id])
        elif isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id in self.local_classes:
            for held in self.local_classes[value.func.id]:
                note_type(info, attr, held)
        elif isinstance(value, ast.Call):
            callee = self.names.resolve(value.func)
            if callee in MODULE_CONTAINERS:
                self._learn_listed(attr, value)
            elif not self._learn_elements(attr, value) and callee:
                note_type(info, attr, callee)
        elif isinstance(value, (ast.List, ast.ListComp, ast.Tuple)):
            self._learn_listed(attr, value)

    def _learn_listed(self, attr: str, value: ast.AST) -> None:
        """`nn.ModuleList([layer_type(...) for i in ...])`, `[Layer(...), ...]`: the elements' class, and the
        class parameter they are built from, if any."""
        element = self.element_class([value])
        if element:
            self.info.attr_elem_types.setdefault(attr, element)
        param = self._class_param_called(value)
        if param:
            self.info.attr_elem_params.setdefault(attr, param)

    def _learn_elements(self, attr: str, call: ast.Call) -> bool:
        """A factory call that builds a list of modules; True if it names their class."""
        made = self._built_by_factory(call)
        if made:
            self.info.attr_elem_types.setdefault(attr, made[0])
            self.info.attr_elem_alternatives.setdefault(attr, made[1:])
        param = self._class_param_called(call)
        if param:
            self.info.attr_elem_params.setdefault(attr, param)
        return bool(made or param)

    def _class_param_called(self, value: ast.AST) -> str | None:
        """The class parameter `value` instantiates (`layer_type(...)` with `layer_type=Layer` in the signature)."""
        if not self.class_params:  # most methods have none: no walk of the value
            return None
        return next((c.func.id for c in ast.walk(value) if isinstance(c, ast.Call)
                     and isinstance(c.func, ast.Name) and c.func.id in self.class_params), None)

    def _built_by_factory(self, call: ast.Call) -> list[str]:
        """`make_layers(n, lambda idx, prefix: DecoderLayer(...))`: a function (not a class) handed a
        lambda or a local function that builds the elements, as engines build their layer lists."""
        callee = self.names.resolve(call.func)
        if not callee or looks_like_class(callee):
            return []
        for arg in [*call.args, *(k.value for k in call.keywords)]:
            if isinstance(arg, ast.Lambda):
                return self.element_classes([arg.body])
            if isinstance(arg, ast.Name) and arg.id in self.builders:  # a local `def layer_fn(idx, prefix)`
                body = self.builders[arg.id].body
                return self.element_classes(returned_values(body), _local_names(body))
        return []

    def element_class(self, nodes: list[ast.AST]) -> str | None:
        return next(iter(self.element_classes(nodes)), None)

    def element_classes(self, nodes: list[ast.AST], local: dict[str, ast.AST] | None = None) -> list[str]:
        """The classes instantiated in nodes: `Layer(...)`, `layer_type(...)` of a class parameter,
        `LAYER_TYPES[kind](...)` or `layer_class(...)` after `layer_class = LAYER_TYPES[kind]`."""
        found: list[str] = []
        for node in nodes:
            for child in ast.walk(node):
                if isinstance(child, ast.Call):
                    found += self._instantiated(child.func, local or {})
        return [c for c in dict.fromkeys(found) if c not in MODULE_CONTAINERS]

    def _instantiated(self, func: ast.AST, local: dict[str, ast.AST]) -> list[str]:
        if isinstance(func, ast.Name) and func.id in self.class_params:
            return [self.class_params[func.id]]
        if isinstance(func, ast.Name) and func.id in local:  # `layer_class = A if attn else B; layer_class(...)`
            func = local[func.id]
        if isinstance(func, ast.IfExp):
            return [*self._instantiated(func.body, {}), *self._instantiated(func.orelse, {})]
        if isinstance(func, ast.Subscript):
            return self._table_classes(func.value, local)
        if self_attr(func) in self.info.class_attrs:  # `self.block_cls(...)`
            return [self.info.class_attrs[self_attr(func)]]
        callee = self.names.resolve(func)
        return [callee] if callee and looks_like_class(callee) else []

    def _table_classes(self, table: ast.AST, local: dict[str, ast.AST], depth: int = 0) -> list[str]:
        """The classes in a {kind: Class} table named by `table`: a module-level table, a class attribute
        holding one, or a local (`layer_types = decoder_layer_types or ALL_DECODER_LAYER_TYPES`)."""
        if isinstance(table, ast.BoolOp) and depth < 4:
            return [c for value in table.values for c in self._table_classes(value, local, depth + 1)]
        if isinstance(table, ast.Name) and depth < 4:
            bound = local.get(table.id, self.local_values.get(table.id))
            if bound is not None and bound is not table:
                return self._table_classes(bound, local, depth + 1)
        name = self.names.resolve(table) if isinstance(table, (ast.Name, ast.Attribute)) else None
        held = self.info.class_attrs.get(self_attr(table) or "", name) or ""
        return self.tables.get(held) or self.tables.get(f"{self.names.module}.{held}", [])


def _local_names(body: list[ast.stmt]) -> dict[str, ast.AST]:
    return {t.id: n.value for n in body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}


def returned_values(body: list[ast.stmt]) -> list[ast.AST]:
    return [n.value for n in walk_body(body) if isinstance(n, ast.Return) and n.value is not None]


def returned_class(names: ImportMap, node: ast.FunctionDef | ast.AsyncFunctionDef,
                   body_nodes: BodyNodes) -> str | None:
    """`-> Layer` or `return Layer(...)`: the class a builder method makes."""
    if node.returns is not None:
        annotated = names.resolve(node.returns)
        if annotated and looks_like_class(annotated):
            return annotated
    for returned in (n.value for n in body_nodes.of(ast.Return) if n.value is not None):
        for child in ast.walk(returned):
            callee = names.resolve(child.func) if isinstance(child, ast.Call) else None
            if callee and callee not in MODULE_CONTAINERS and looks_like_class(callee):
                return callee
    return None


def returns_pageable_tensor(names: ImportMap, body_nodes: BodyNodes) -> bool:
    """Every value returned is None or a pageable CPU tensor: a torch factory with `device="cpu"` or no
    device and no `pin_memory`, or `x.cpu()` (vLLM's `make_num_tokens_across_dp` returns
    `torch.full(..., device="cpu")`)."""
    returned = [n.value for n in body_nodes.of(ast.Return)]
    values = [v for v in returned if not (v is None or (isinstance(v, ast.Constant) and v.value is None))]
    return bool(values) and all(_pageable_tensor(names, v) for v in values)


def _pageable_tensor(names: ImportMap, value: ast.AST) -> bool:
    if not isinstance(value, ast.Call):
        return False
    if isinstance(value.func, ast.Attribute) and value.func.attr == "cpu" and not value.args:
        return True
    callee = names.resolve(value.func) or ""
    if not (callee.startswith("torch.") and callee.count(".") == 1 and callee[6:] in FACTORIES):
        return False
    keywords = {k.arg: k.value for k in value.keywords}
    device, pinned = keywords.get("device"), keywords.get("pin_memory")
    if pinned is not None and not (isinstance(pinned, ast.Constant) and pinned.value in (False, None)):
        return False
    return device is None or (isinstance(device, ast.Constant) and device.value == "cpu")


def record_attribute_calls(names: ImportMap, attr: str, value: ast.AST, info: AttributeTable) -> None:
    """What `self.<attr>` is built by, so the rules know tensors, locks, graphs and kernels
    without parsing the (load-time) methods that set them."""
    calls = [value] if isinstance(value, ast.Call) else (
        [n for n in ast.walk(value) if isinstance(n, ast.Call)]
        if isinstance(value, (ast.List, ast.ListComp, ast.Tuple, ast.Dict, ast.DictComp)) else []
    )
    for call in calls:
        inner = unwrap_module_chain(call)
        callee = names.resolve(inner.func) if isinstance(inner, ast.Call) else None
        if callee:
            info.attr_calls.setdefault(attr, []).append(callee)
        keywords = {k.arg: k.value for k in getattr(inner, "keywords", [])}
        pinned = keywords.get("pin_memory")
        if (isinstance(pinned, ast.Constant) and pinned.value is True) or (
            isinstance(call.func, ast.Attribute) and call.func.attr == "pin_memory"
        ):
            info.host_attrs[attr] = "pinned"
        elif callee and callee.startswith("torch.") and callee.rsplit(".", 1)[-1] in FACTORIES:
            # only an explicit CPU device: engines build modules under a default-device context
            device = keywords.get("device")
            if isinstance(device, ast.Constant) and str(device.value).startswith("cpu"):
                info.host_attrs[attr] = "pageable"
