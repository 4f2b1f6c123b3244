"""GR401-GR404: devices and streams: where the work runs and whether the graph sees it."""

from __future__ import annotations

import libcst as cst

from graphready.lint.analysis.context import RuleContext
from graphready.lint.rules.base import Rule
from graphready.lint.inference.tensors import device_kind, keyword, positional, self_attr


class CrossDevice(Rule):
    code = "GR401"

    def visit_Call(self, node: cst.Call, ctx: RuleContext) -> None:
        if not isinstance(node.func, cst.Attribute) or ctx.env.on_host(node.func.value):
            return
        method = node.func.attr.value
        device = keyword(node, "device") or next(iter(positional(node)), None)
        if method == "to" and device_kind(device, ctx.env) == "explicit":
            ctx.report(node, "`.to()` an explicit device inside the step is a cross-device copy that a per-device "
                             "graph cannot hold; keep per-device buffers and copy between graphs")
        elif method == "cuda" and device is not None:
            ctx.report(node, "`.cuda(i)` to an explicit device inside the step is a cross-device copy; "
                             "keep per-device buffers and copy between graphs")


def _own_device(call: cst.Call, name: str) -> bool:
    """`torch.cuda.device(x.device)`, `(x.device.index)`, `device_of(x)`: the device a step input
    already lives on, which is the capturing device, so entering it switches nothing (the Triton
    launch idiom)."""
    if name == "torch.cuda.device_of":
        return True
    arg = next(iter(positional(call)), None)
    if isinstance(arg, cst.Attribute) and arg.attr.value == "index":
        arg = arg.value
    return isinstance(arg, cst.Attribute) and arg.attr.value == "device"


class SetDevice(Rule):
    code = "GR402"
    MESSAGE = "switching the current device inside the step or a capture breaks capture ('Capture must end on " \
              "the same stream it began on'); use an explicit `torch.cuda.Stream(device=...)` per device"

    def visit_Call(self, node: cst.Call, ctx: RuleContext) -> None:
        if ctx.qualname(node.func) == "torch.cuda.set_device":
            ctx.report(node, self.MESSAGE)

    def visit_WithItem(self, node: cst.WithItem, ctx: RuleContext) -> None:
        if not isinstance(node.item, cst.Call):
            return
        name = ctx.qualname(node.item.func)
        if name in ("torch.cuda.device", "torch.cuda.device_of") and not _own_device(node.item, name):
            ctx.report(node.item, self.MESSAGE)


class ImplicitCaptureStream(Rule):
    """Capture only: `replay()` sets the capture device and launches on that device's current stream
    (PyTorch's `CUDAGraph::replay`: "graph_exec_ may be replayed in any stream"), so where it replays
    is ordinary stream ordering, not a graph hazard."""

    code = "GR403"
    scope = "always"

    def visit_Call(self, node: cst.Call, ctx: RuleContext) -> None:
        explicit_stream = keyword(node, "stream") is not None or len(positional(node)) >= 3
        if ctx.qualname(node.func) != "torch.cuda.graph" or explicit_stream:
            return
        if ctx.facts.multi_device:
            ctx.report(node, "`torch.cuda.graph(g)` without `stream=` captures on one process-wide side stream, "
                             "made on the device that was current at the first capture; capturing for another GPU "
                             "records its work on the wrong device (an empty graph, or one that replays stale data); "
                             "pass `stream=torch.cuda.Stream(device=...)` for each device")
        elif not ctx.facts.one_gpu_per_process:  # PyTorch's documented usage while a process drives one GPU
            ctx.report(node, "`torch.cuda.graph(g)` without `stream=` captures on one process-wide side stream, "
                             "made on the first capturing device: fine while this process drives one GPU; pass "
                             "`stream=` before it captures on several", severity="info")


class DefaultStreamLaunch(Rule):
    code = "GR404"

    def __init__(self) -> None:
        self.dlpack_names: set[str] = set()
        self.compiled_locals: set[str] = set()

    def visit_Assign(self, node: cst.Assign, ctx: RuleContext) -> None:
        if not isinstance(node.value, cst.Call):
            return
        callee = ctx.qualname(node.value.func) or ""
        for target in node.targets:
            if not isinstance(target.target, cst.Name):
                continue
            if callee.endswith("from_dlpack"):
                self.dlpack_names.add(target.target.value)
            elif callee.endswith("cute.compile"):
                self.compiled_locals.add(target.target.value)

    def _is_dlpack(self, arg: cst.BaseExpression, ctx: RuleContext) -> bool:
        if isinstance(arg, cst.Name):
            return arg.value in self.dlpack_names
        if isinstance(arg, cst.Call):
            return (ctx.qualname(arg.func) or "").endswith("from_dlpack") or (
                isinstance(arg.func, cst.Attribute) and arg.func.attr.value == "mark_layout_dynamic"
                and self._is_dlpack(arg.func.value, ctx)
            )
        return False

    def _is_compiled(self, func: cst.BaseExpression, ctx: RuleContext) -> bool:
        if isinstance(func, cst.Name):
            return func.value in self.compiled_locals or func.value in ctx.facts.compiled_names
        attr = self_attr(func)
        return attr is not None and attr in ctx.facts.compiled_names

    def visit_Call(self, node: cst.Call, ctx: RuleContext) -> None:
        callee = ctx.qualname(node.func) or ""
        if callee.endswith(("from_dlpack", "compile")) or not node.args:
            return
        all_dlpack = all(self._is_dlpack(a.value, ctx) for a in node.args)
        if not (all_dlpack or self._is_compiled(node.func, ctx)):
            return
        has_stream = any(
            (a.keyword is not None and "stream" in a.keyword.value) or "stream" in cst.Module([]).code_for_node(a.value).lower()
            for a in node.args
        )
        if not has_stream:
            what = "a compiled CuTeDSL kernel" if self._is_compiled(node.func, ctx) else "a kernel given only `from_dlpack` tensors"
            ctx.report(node, f"{what} called without a stream runs on the default stream: during capture it "
                             "executes eagerly and escapes the graph ('The CUDA Graph is empty'); pass "
                             "`cuda.CUstream(torch.cuda.current_stream().cuda_stream)`")
