"""GR305-GR307: persistent state a captured graph points at, replaced or moved by the step.

A graph holds the addresses it saw at capture. Python-side rebinding (`self.cache = torch.cat(...)`)
is invisible to a replay, so the graph keeps reading the old storage while eager code reads the
new one; `resize_`/`set_`/`.data =` move or free the storage the graph still points to.
"""

from __future__ import annotations

import libcst as cst

from graphready.lint.analysis.context import RuleContext
from graphready.lint.analysis.cstwalk import nodes
from graphready.lint.rules.base import Rule
from graphready.lint.inference.tensors import mentions_name, mentions_self_attr, positional, self_attr

CONSTRUCTORS = ("__init__", "__post_init__", "__new__", "__setstate__")
GROWING_METHODS = {"append", "extend", "insert", "appendleft", "add", "setdefault"}
STORAGE_METHODS = {"resize_", "set_", "resize_as_"}
CONVERSIONS = {"to", "cuda", "float", "half", "bfloat16", "contiguous", "type", "type_as"}


def _in_constructor(ctx: RuleContext) -> bool:
    return ctx.function.qualname.rsplit(".", 1)[-1] in CONSTRUCTORS


def _params(node: cst.FunctionDef) -> set[str]:
    params = node.params
    return {p.name.value for p in [*params.posonly_params, *params.params, *params.kwonly_params]}


def _persistent(node: cst.BaseExpression, ctx: RuleContext) -> str | None:
    """`self.x` / `self.x[...]` / a module global that holds state: its display name."""
    while isinstance(node, cst.Subscript):
        node = node.value
    attr = self_attr(node)
    if attr is not None:
        return f"self.{attr}"
    if isinstance(node, cst.Name) and (node.value in ctx.facts.tensor_globals or node.value in ctx.facts.frozen_globals):
        return node.value
    return None


def _container(node: cst.BaseExpression, ctx: RuleContext, local_names: set[str]) -> str | None:
    """`self.x` / a global known to hold a list, dict, set or deque (not shadowed by one of `local_names`):
    its display name."""
    attr = self_attr(node)
    if attr is not None:
        return f"self.{attr}" if attr in ctx.facts.containers else None
    if isinstance(node, cst.Name) and node.value in ctx.facts.containers and node.value not in local_names:
        return node.value
    return None


class _FreshTensors(Rule):
    """Shared: which values are tensors made by this call of the step (not its inputs or state)."""

    def __init__(self) -> None:
        self.params: set[str] = set()

    def visit_FunctionDef(self, node: cst.FunctionDef, ctx: RuleContext) -> None:
        if not self.params:
            self.params = _params(node)

    def fresh(self, value: cst.BaseExpression, ctx: RuleContext) -> bool:
        if isinstance(value, cst.Name) and value.value in self.params:
            return False
        return self_attr(value) is None and ctx.env.is_tensor(value) and not ctx.env.on_host(value)


class EscapingAlloc(_FreshTensors):
    code = "GR305"

    def __init__(self) -> None:
        super().__init__()
        self.local_names: set[str] = set()  # names the function binds itself (`cache = {}` shadows a global)
        self.regrown: set[int] = set()  # ids of a workspace's growth: its store (GR307's) and retiring the old one

    def visit_If(self, node: cst.If, ctx: RuleContext) -> None:
        names = _too_small(node.test)
        for inner in nodes(node.body) if names else ():
            values = [inner.value] if isinstance(inner, cst.Assign) else positional(inner) \
                if isinstance(inner, cst.Call) and isinstance(inner.func, cst.Attribute) \
                and inner.func.attr.value in GROWING_METHODS else []
            if any(isinstance(value, cst.Name) and value.value in names for value in values):
                self.regrown.add(id(inner))

    def visit_Call(self, node: cst.Call, ctx: RuleContext) -> None:
        func = node.func
        if not (isinstance(func, cst.Attribute) and func.attr.value in GROWING_METHODS) or self._once(ctx) \
                or id(node) in self.regrown:
            return
        holder = _container(func.value, ctx, self.local_names)
        if holder and any(self.fresh(arg, ctx) for arg in positional(node)):
            ctx.report(node, f"a tensor made in the step is kept in `{holder}`, which grows every step; inside a "
                             "graph it is pool memory the next replay overwrites; write into a preallocated buffer")

    @staticmethod
    def _once(ctx: RuleContext) -> bool:
        """A constructor, or a capture function that is not itself hot: it runs once per graph, and what its
        capture body makes and keeps (`self.outputs[bs] = out`) is that graph's static output."""
        return _in_constructor(ctx) or not ctx.hot

    def visit_Assign(self, node: cst.Assign, ctx: RuleContext) -> None:
        self.local_names.update(t.target.value for t in node.targets if isinstance(t.target, cst.Name))
        if self._once(ctx) or not self.fresh(node.value, ctx) or id(node) in self.regrown:
            return
        for target in node.targets:
            if isinstance(target.target, cst.Subscript):
                holder = _container(target.target.value, ctx, self.local_names)
                if holder:
                    ctx.report(target.target, f"a tensor made in the step is stored in `{holder}[...]` past the "
                                              "step; inside a graph it is pool memory the next replay overwrites; "
                                              "copy into a buffer allocated at load time")


def _conversion_of(value: cst.BaseExpression, attr: str) -> bool:
    """`self.x.to(device)`, `self.x.float()`: idempotent after the first call, so one-time work (GR603's
    concern), not state that evolves step by step."""
    while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value in CONVERSIONS:
        value = value.func.value
    return self_attr(value) == attr


def _device_mismatch(test: cst.BaseExpression) -> str | None:
    """`self.x.device != y.device` (either side): the attribute `x` it tests, else None."""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1
            and isinstance(test.comparisons[0].operator, cst.NotEqual)):
        return None
    for side in (test.left, test.comparisons[0].comparator):
        if isinstance(side, cst.Attribute) and side.attr.value == "device":
            attr = self_attr(side.value)
            if attr is not None:
                return attr
    return None


class StateRebind(_FreshTensors):
    """State that evolves every step (`self.t = self.t + 1`, `self.cache = torch.cat([self.cache, kv])`),
    a graph's static input or a registered buffer replaced by a new tensor, and (a note unless a capture
    is the first call) a lazy conversion `self.x = self.x.to(...)`. A per-forward hand-off
    (`self.gate_in = x`, read later in the same forward) is not state: every replay reads what the
    capture wrote."""

    code = "GR306"

    def __init__(self) -> None:
        super().__init__()
        self.device_checked: set[int] = set()  # ids of `self.x = ...` under `if self.x.device != y.device:`

    def visit_If(self, node: cst.If, ctx: RuleContext) -> None:
        attr = _device_mismatch(node.test)
        if attr is None:
            return
        for inner in nodes(node.body):  # nested blocks run under the test too; `else:` does not
            if isinstance(inner, (cst.Assign, cst.AnnAssign)):
                targets = [t.target for t in inner.targets] if isinstance(inner, cst.Assign) else [inner.target]
                self.device_checked.update(id(t) for t in targets if self_attr(t) == attr)

    def visit_Assign(self, node: cst.Assign, ctx: RuleContext) -> None:
        for target in node.targets:
            self._check_target(target.target, node.value, ctx)

    def visit_AnnAssign(self, node: cst.AnnAssign, ctx: RuleContext) -> None:
        if node.value is not None:  # `self.cache: torch.Tensor = self.cache.to(x.device)` re-binds all the same
            self._check_target(node.target, node.value, ctx)

    def _check_target(self, target: cst.BaseExpression, value: cst.BaseExpression, ctx: RuleContext) -> None:
        if _in_constructor(ctx) or not ctx.env.is_tensor(value):
            return
        attr = self_attr(target)
        if attr is not None:
            self._check_attr(target, attr, value, ctx)
        elif isinstance(target, cst.Name) and target.value in ctx.facts.frozen_globals \
                and mentions_name(value, target.value):
            ctx.report(target, f"global `{target.value}` is re-bound to a new tensor in the step; "
                               "a captured graph keeps the old storage; update it in place")

    def _check_attr(self, target: cst.BaseExpression, attr: str, value: cst.BaseExpression, ctx: RuleContext) -> None:
        if _conversion_of(value, attr):
            # a registered buffer under a device test: `model.to(device)` moved it at load, so the test stays false
            moved_with_module = attr in ctx.facts.buffers and id(target) in self.device_checked
            if attr in ctx.facts.buffers and ctx.function.key not in ctx.facts.uncompiled and not moved_with_module:
                ctx.report(target, f"registered buffer `self.{attr}` is converted and re-bound in the step: under "
                                   "torch.compile the assignment is a graph output written back to the module's "
                                   "buffers, new storage every step, which a CUDA graph over the compiled code does "
                                   f"not follow; move or convert `self.{attr}` at load time")
                return
            first_call_captured = ctx.function.key in ctx.facts.unwarmed
            if (moved_with_module or ctx.function.key in ctx.facts.warmed) and not first_call_captured:
                return  # the first call, the one that converts, is not a capture
            ctx.report(target, f"`self.{attr}` is converted and re-bound in the step: a no-op after the first call, "
                               "but if that call is a capture (or the target device/dtype changes) the graph copies "
                               f"from storage that is then freed; convert `self.{attr}` at load time",
                       severity=None if first_call_captured else "info")
            return
        persistent = attr in ctx.facts.buffers or attr in ctx.facts.graph_inputs or ctx.function.mentions_graph
        static_output = not ctx.hot  # kept from the capture body of a function that only captures: the graph's output
        if mentions_self_attr(value, attr) or (persistent and not static_output
                                               and (self.fresh(value, ctx) or self.handed_in(value, ctx))):
            ctx.report(target, f"`self.{attr}` is re-bound to a new tensor in the step; a captured graph keeps "
                               f"reading the storage it saw at capture; update it in place (`self.{attr}.copy_(...)`, "
                               "`add_`) or build it at load time")

    def handed_in(self, value: cst.BaseExpression, ctx: RuleContext) -> bool:
        return isinstance(value, cst.Name) and value.value in self.params and ctx.env.is_tensor(value)


SIZE_METHODS = {"numel", "nelement", "size"}


def _size_of(node: cst.BaseExpression) -> str | None:
    """The name whose size `node` reads: `ws.numel()`, `ws.size(0)`, `ws.shape[0]`, `ws.nbytes`."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in SIZE_METHODS:
        node = node.func.value
    elif isinstance(node, cst.Subscript) and isinstance(node.value, cst.Attribute) and node.value.attr.value == "shape":
        node = node.value.value
    elif isinstance(node, cst.Attribute) and node.attr.value == "nbytes":
        node = node.value
    else:
        return None
    return node.value if isinstance(node, cst.Name) else None


def _too_small(test: cst.BaseExpression) -> set[str]:
    """Names a growth test finds too small: `ws.numel() < need`, `need > ws.shape[0]`, either side of `or`."""
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.Or):
        return _too_small(test.left) | _too_small(test.right)
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
        return set()
    operator, right = test.comparisons[0].operator, test.comparisons[0].comparator
    side = test.left if isinstance(operator, (cst.LessThan, cst.LessThanEqual)) else \
        right if isinstance(operator, (cst.GreaterThan, cst.GreaterThanEqual)) else None
    name = _size_of(side) if side is not None else None
    return {name} if name else set()


class StorageSwap(Rule):
    """Also a handed-in or looked-up workspace grown in place (`if ws.numel() < need: ws.resize_(need)`): a
    buffer kept across calls, so graphs captured before the growth hold the storage it frees."""

    code = "GR307"

    def __init__(self) -> None:
        self.grown: dict[int, str] = {}  # id of a `resize_` call under a growth test of its receiver -> name
        self.made_here: set[str] = set()  # locals bound to a tensor the step makes itself

    def visit_If(self, node: cst.If, ctx: RuleContext) -> None:
        names = _too_small(node.test)
        replaced: set[str] = set()  # `ws = torch.empty(need)`: a new buffer for a cached one that was too small
        body = list(nodes(node.body)) if names else []  # the body grows it; `else:` does not
        retired = {arg.value for inner in body if isinstance(inner, cst.Call) and isinstance(inner.func, cst.Attribute)
                   and inner.func.attr.value in GROWING_METHODS for arg in positional(inner)
                   if isinstance(arg, cst.Name)}  # `_retired.append(buf)`: the old one stays alive
        for inner in body:
            if isinstance(inner, cst.Call) and isinstance(inner.func, cst.Attribute) \
                    and inner.func.attr.value in ("resize_", "resize_as_") and isinstance(inner.func.value, cst.Name) \
                    and inner.func.value.value in names:
                self.grown[id(inner)] = inner.func.value.value
            elif isinstance(inner, cst.Assign) and len(inner.targets) == 1 and not retired & names:
                target, value = inner.targets[0].target, inner.value
                if isinstance(target, cst.Name) and target.value in names and ctx.env.is_tensor(value) \
                        and not ctx.env.on_host(value):
                    replaced.add(target.value)
                elif isinstance(target, cst.Subscript) and isinstance(value, cst.Name) and value.value in replaced \
                        and _container(target.value, ctx, set()):
                    ctx.report(target, f"replacing the cached `{value.value}` when it is too small drops the buffer "
                                       "that graphs captured before the growth still point to, and the allocator "
                                       "hands its memory to other tensors; allocate the workspace at its largest size "
                                       "before any capture, or keep the old buffer alive")

    def visit_Call(self, node: cst.Call, ctx: RuleContext) -> None:
        func = node.func
        if not isinstance(func, cst.Attribute) or func.attr.value not in STORAGE_METHODS:
            return
        receiver = func.value
        storage = isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Attribute) and \
            receiver.func.attr.value in ("untyped_storage", "storage")
        owner = _persistent(receiver.func.value if storage else receiver, ctx)
        if owner:
            ctx.report(node, f"`{func.attr.value}` on `{owner}` moves or frees storage that captured graphs still "
                             "point to; size persistent buffers once at load time and slice them")
        elif id(node) in self.grown and self.grown[id(node)] not in self.made_here:
            name = self.grown[id(node)]
            ctx.report(node, f"growing `{name}` in place when it is too small frees the storage that graphs captured "
                             f"before the growth still point to (`{name}` outlives the call: a workspace handed in or "
                             "cached); allocate it at its largest size before any capture, or allocate a new buffer "
                             "and keep the old one alive")

    def visit_Assign(self, node: cst.Assign, ctx: RuleContext) -> None:
        if (isinstance(node.value, cst.Call) and (ctx.qualname(node.value.func) or "").startswith("torch.")
                and ctx.env.is_tensor(node.value)):
            self.made_here.update(t.target.value for t in node.targets if isinstance(t.target, cst.Name))
        for target in node.targets:
            inner = target.target
            if isinstance(inner, cst.Attribute) and inner.attr.value == "data":
                owner = _persistent(inner.value, ctx)
                if owner:
                    ctx.report(inner, f"`{owner}.data = ...` swaps the storage behind a tensor that captured graphs "
                                      "point to; `copy_` into it instead")
