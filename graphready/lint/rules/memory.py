"""GR301-GR304: allocations, host copies, frozen Python values and allocator calls in the step."""

from __future__ import annotations

import libcst as cst

from graphready.lint.analysis.context import RuleContext
from graphready.lint.analysis.cstwalk import nodes
from graphready.lint.rules.base import Rule
from graphready.lint.inference.tensors import (HOST_BUILTINS, PAGEABLE, PYTHON_SCALAR_BUILTINS, SCALAR, TensorEnv,
                                               device_kind, dotted, keyword, positional, self_attr)
from graphready.lint.inference.torchnames import FACTORIES

ALLOCATING_FACTORIES = FACTORIES - {"from_numpy", "asarray"}
NEW_METHODS = {"new_zeros", "new_ones", "new_empty", "new_full", "new_tensor", "new_empty_strided"}
DEVICE_TARGETS = ("cuda", "explicit", "device")


def _empty_literal(data: cst.BaseExpression | None) -> bool:
    """The `[]` of `torch.tensor([])`: a zero-size tensor, which neither allocates nor copies anything."""
    return isinstance(data, (cst.List, cst.Tuple)) and not data.elements


class HotAlloc(Rule):
    code = "GR301"

    def visit_Call(self, node: cst.Call, ctx: RuleContext) -> None:
        name = ctx.qualname(node.func) or ""
        short = name.rsplit(".", 1)[-1]
        if keyword(node, "out") is not None or (short == "tensor" and _empty_literal(next(iter(positional(node)), None))):
            return  # writes into an existing buffer, or makes an empty placeholder
        if name.startswith("torch.") and name.count(".") == 1 and (short in ALLOCATING_FACTORIES or short.endswith("_like")):
            ctx.report(node, f"`{name}` allocates every step; preallocate once and reuse it (`out=`, `copy_`, `fill_`, `zero_`)")
        elif isinstance(node.func, cst.Attribute) and node.func.attr.value in NEW_METHODS:
            if not ctx.env.on_host(node.func.value):
                ctx.report(node, f"`.{node.func.attr.value}()` allocates every step; preallocate once and reuse it")


class PageableH2D(Rule):
    code = "GR302"
    ADVICE = "stage it in a pinned buffer (`pin_memory=True`) and `copy_(..., non_blocking=True)`"

    def visit_Call(self, node: cst.Call, ctx: RuleContext) -> None:
        name = ctx.qualname(node.func) or ""
        if name in ("torch.tensor", "torch.as_tensor"):
            device = keyword(node, "device")
            data = next(iter(positional(node)), None)
            empty = (isinstance(data, cst.Name) and data.value in ctx.function.empty_when_captured) or _empty_literal(data)
            if device_kind(device, ctx.env) in DEVICE_TARGETS and data is not None and not ctx.env.is_tensor(data) and not empty:
                ctx.report(node, f"`{name}(<host data>, device=...)` copies from pageable host memory; {self.ADVICE}")
            return
        if not isinstance(node.func, cst.Attribute):
            return
        method, receiver = node.func.attr.value, node.func.value
        if method == "copy_":
            source = next(iter(positional(node)), None)
            if source is not None and ctx.env.host_status(source) == PAGEABLE and not ctx.env.host_status(receiver):
                ctx.report(node, f"`copy_` from a pageable host tensor synchronises and cannot be captured; {self.ADVICE}")
            return
        if ctx.env.host_status(receiver) != PAGEABLE:
            return
        if method == "cuda" or (
            method == "to" and device_kind(keyword(node, "device") or next(iter(positional(node)), None), ctx.env) in DEVICE_TARGETS
        ):
            ctx.report(node, f"copying a pageable host tensor to the GPU synchronises and cannot be captured; {self.ADVICE}")


NON_KERNEL_CALLS = PYTHON_SCALAR_BUILTINS | HOST_BUILTINS | {
    "print", "isinstance", "getattr", "setattr", "hasattr", "enumerate", "zip", "iter", "next", "reversed", "repr",
    "format", "divmod", "type", "callable",
}  # builtins: none launches a kernel


def _object_counters(func: cst.FunctionDef, env: TensorEnv) -> set[str]:
    """`state.step` in `state.step += 1` / `state.step = state.step + n`: a Python number the function steps on
    an object other than `self` (whose counters the class facts hold), or deeper in one (`self.state.step`).
    A tensor field (by annotation, name or increment) is updated on the device, not frozen."""
    counters: set[str] = set()
    for node in nodes(func):
        kind = type(node)  # exact types, no subclasses: cheaper than `isinstance` on libcst's ABCs per node
        if kind is cst.AugAssign and isinstance(node.operator, (cst.AddAssign, cst.SubtractAssign)):
            target, step = node.target, node.value
        elif kind is cst.Assign and len(node.targets) == 1 and isinstance(node.value, cst.BinaryOperation) \
                and isinstance(node.value.operator, (cst.Add, cst.Subtract)):
            target, step = node.targets[0].target, node.value.right
            if dotted(node.value.left) != dotted(target):
                continue
        else:
            continue
        name = dotted(target) if isinstance(target, cst.Attribute) else None
        if name is None or self_attr(target) is not None or env.kind(target) not in (SCALAR, None) \
                or env.kind(step) not in (SCALAR, None) or env.is_tensor(target.value):
            continue
        counters.add(name)
    return counters


class FrozenScalar(Rule):
    code = "GR303"

    def __init__(self) -> None:
        self.counters: set[str] = set()

    def visit_FunctionDef(self, node: cst.FunctionDef, ctx: RuleContext) -> None:
        self.counters = _object_counters(node, ctx.env)

    def _frozen(self, node: cst.CSTNode, ctx: RuleContext) -> cst.CSTNode | None:
        attr = self_attr(node)
        if attr is not None and attr in ctx.facts.frozen_attrs:
            return node
        if isinstance(node, cst.Name) and node.value in ctx.facts.stepped_globals:
            return node
        if isinstance(node, cst.Attribute) and self.counters and dotted(node) in self.counters:
            return node
        if isinstance(node, cst.BinaryOperation):
            return self._frozen(node.left, ctx) or self._frozen(node.right, ctx)
        if isinstance(node, cst.UnaryOperation):
            return self._frozen(node.expression, ctx)
        return None

    def _report(self, leaf: cst.CSTNode, ctx: RuleContext) -> None:
        name = self_attr(leaf)
        what = f"`self.{name}`" if name else f"global `{leaf.value}`" if isinstance(leaf, cst.Name) \
            else f"`{dotted(leaf)}`"
        ctx.report(leaf, f"{what} changes between steps, but a graph keeps the value it saw at capture; "
                         "keep it in a device tensor updated in place")

    def visit_Call(self, node: cst.Call, ctx: RuleContext) -> None:
        if ctx.qualname(node.func) in NON_KERNEL_CALLS:
            return
        for arg in node.args:
            leaf = self._frozen(arg.value, ctx)
            if leaf is not None:
                self._report(leaf, ctx)

    def visit_BinaryOperation(self, node: cst.BinaryOperation, ctx: RuleContext) -> None:
        for operand, other in ((node.left, node.right), (node.right, node.left)):
            leaf = self._frozen(operand, ctx)
            if leaf is not None and ctx.env.is_tensor(other):
                self._report(leaf, ctx)

    def visit_Assign(self, node: cst.Assign, ctx: RuleContext) -> None:
        leaf = self._frozen(node.value, ctx)
        if leaf is None:
            return
        for target in node.targets:
            if isinstance(target.target, cst.Subscript) and ctx.env.is_tensor(target.target.value):
                self._report(leaf, ctx)


ALLOCATOR_CALLS = {
    "torch.cuda.empty_cache", "torch.cuda.memory.empty_cache", "gc.collect", "torch.cuda.ipc_collect",
    "torch.cuda.reset_peak_memory_stats", "torch.cuda.reset_max_memory_allocated",
    "torch.cuda.reset_accumulated_memory_stats", "torch.cuda.memory.reset_peak_memory_stats",
}


class AllocatorCall(Rule):
    code = "GR304"

    def visit_Call(self, node: cst.Call, ctx: RuleContext) -> None:
        name = ctx.qualname(node.func)
        if name == "gc.collect" and not ctx.hot:
            return  # in a capture body it runs once, at capture, and touches no CUDA state (vLLM's runners)
        if name in ALLOCATOR_CALLS:
            ctx.report(node, f"`{name}()` in the step stalls the allocator (and is not captured); "
                             "manage memory at load time")
