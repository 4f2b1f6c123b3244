"""GR501-GR503: compilers, locks and opaque wrappers that do not belong in a captured step."""

from __future__ import annotations

import libcst as cst

from graphready.lint.analysis.context import RuleContext
from graphready.lint.rules.base import Rule
from graphready.lint.inference.tensors import self_attr
from graphready.lint.inference.torchnames import LOCK_TYPES

JIT_CALLS = {
    "torch.utils.cpp_extension.load": "`cpp_extension.load`",
    "torch.utils.cpp_extension.load_inline": "`cpp_extension.load_inline`",
    "torch.compile": "`torch.compile`",
    "triton.compile": "`triton.compile`",
}


class HotJit(Rule):
    """Compiles run per step; a decorator compiles once and is cached, so it is not one.
    A callable compiled at load time but first called in hot code compiles on that first call:
    info, since an engine's warm-up usually makes that call before capture."""

    code = "GR501"

    def __init__(self) -> None:
        self.decorator_depth = 0

    def visit_Decorator(self, node: cst.Decorator, ctx: RuleContext) -> None:
        self.decorator_depth += 1

    def leave_Decorator(self, node: cst.Decorator, ctx: RuleContext) -> None:
        self.decorator_depth -= 1

    def visit_Call(self, node: cst.Call, ctx: RuleContext) -> None:
        if self.decorator_depth:
            return
        name = ctx.qualname(node.func) or ""
        what = "`cute.compile`" if name.endswith("cute.compile") else JIT_CALLS.get(name)
        if name == "torch.compile" and not _fresh_backend(node, ctx):
            if ctx.function.key in ctx.facts.warmed:
                return  # the first call, the one that compiles, is the warm-up
            ctx.report(node, "`torch.compile` in the step makes a new wrapper each call, but Dynamo reuses the code it "
                             "compiled on the first call (same function, same backend), so only that first call "
                             "compiles, and inside a capture that fails; make it in warm-up before capturing, or "
                             "compile once at load time", severity="info")
            return
        if what:
            ctx.report(node, f"{what} in the step compiles on every call (the log measured ~100 ms each, ~500 "
                             "per token); compile once at load time and cache the result")
            return
        attr = self_attr(node.func)
        held = f"self.{attr}" if attr is not None else node.func.value if isinstance(node.func, cst.Name) else None
        if held and (attr or held) in ctx.facts.lazy_compiled and ctx.function.key not in ctx.facts.warmed:
            ctx.report(node, f"`{held}` is `torch.compile`d lazily: its first call compiles, and inside a "
                             "capture that fails; call it once in warm-up before capturing", severity="info")


def _fresh_backend(call: cst.Call, ctx: RuleContext) -> bool:
    """`backend=aot_autograd(...)` or a lambda: a new backend object on every call, which Dynamo's backend
    guard does not match, so every call recompiles (pytorch/pytorch#168373). A backend string, or a call
    that returns one (`get_compiler_backend()`), matches."""
    backend = next((arg.value for arg in call.args if arg.keyword and arg.keyword.value == "backend"), None)
    if isinstance(backend, cst.Lambda):
        return True
    return isinstance(backend, cst.Call) and (ctx.qualname(backend.func) or "").endswith("aot_autograd")


class HotLock(Rule):
    code = "GR502"

    def __init__(self) -> None:
        self.local_locks: set[str] = set()

    def visit_Assign(self, node: cst.Assign, ctx: RuleContext) -> None:
        if isinstance(node.value, cst.Call) and ctx.qualname(node.value.func) in LOCK_TYPES:
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    self.local_locks.add(target.target.value)

    def _is_lock(self, node: cst.BaseExpression, ctx: RuleContext) -> bool:
        attr = self_attr(node)
        if attr is not None:
            return attr in ctx.facts.lock_names
        return isinstance(node, cst.Name) and (node.value in self.local_locks or node.value in ctx.facts.lock_names)

    def visit_WithItem(self, node: cst.WithItem, ctx: RuleContext) -> None:
        if self._is_lock(node.item, ctx):
            ctx.report(node.item, "a threading lock in the step is host-side synchronisation that graphs and "
                                  "`torch.compile` cannot hold ('Unsupported context manager'); populate the "
                                  "guarded state at warm-up so the step reads it lock-free")

    def visit_Call(self, node: cst.Call, ctx: RuleContext) -> None:
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "acquire" and self._is_lock(node.func.value, ctx):
            ctx.report(node, "acquiring a threading lock in the step is host-side synchronisation; "
                             "populate the guarded state at warm-up")


DISABLE_DECORATORS = {"torch.compiler.disable", "torch._dynamo.disable"}


class CompilerOpaque(Rule):
    """A torch.compile concern, not a CUDA-graph hazard: opt-in (`select = ["GR503"]`)."""

    code = "GR503"

    def visit_Decorator(self, node: cst.Decorator, ctx: RuleContext) -> None:
        target = node.decorator.func if isinstance(node.decorator, cst.Call) else node.decorator
        if ctx.qualname(target) in DISABLE_DECORATORS:
            ctx.report(node, "a compiler-disabled hot function splits `torch.compile(fullgraph=True)` and its "
                             "graph; register the kernel with `torch.library.custom_op` instead")

    def visit_Call(self, node: cst.Call, ctx: RuleContext) -> None:
        if isinstance(node.func, cst.Attribute) and node.func.attr.value == "apply":
            if ctx.qualname(node.func.value) in ctx.facts.autograd_functions:
                ctx.report(node, "an `autograd.Function.apply` wrapper around a kernel is traced into by Dynamo; "
                                 "register the kernel with `torch.library.custom_op` so it is opaque")
