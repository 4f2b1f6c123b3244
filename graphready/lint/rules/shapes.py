"""GR201-GR203: output shapes that depend on device data."""

from __future__ import annotations

import re

import libcst as cst

from graphready.lint.analysis.context import RuleContext
from graphready.lint.rules.base import Rule
from graphready.lint.inference.tensors import BOOL, SCALAR, keyword, positional

CONSTANT_NAME = re.compile(r"_*[A-Z][A-Z0-9_]*")  # `DLLM_UNMASKED`, `_NEG_INF`
DYNAMIC_OPS = {"nonzero", "bincount", "unique", "unique_consecutive", "masked_select", "argwhere"}
ADVICE = {
    "nonzero": "use `torch.nonzero_static(x, size=N)` or keep a fixed-size mask",
    "argwhere": "use `torch.nonzero_static(x, size=N)` or keep a fixed-size mask",
    "bincount": "use `buf.zero_().scatter_add_(0, idx, ones)` into a preallocated fixed-size buffer",
    "unique": "keep fixed-size outputs (sort + mask) instead of compacting",
    "unique_consecutive": "keep fixed-size outputs (sort + mask) instead of compacting",
    "masked_select": "use `torch.where(mask, x, 0)` and keep the full shape",
}


class DynamicShape(Rule):
    code = "GR201"

    def visit_Call(self, node: cst.Call, ctx: RuleContext) -> None:
        name = ctx.qualname(node.func) or ""
        op = None
        if name.startswith("torch.") and name.count(".") == 1:
            op = name.split(".")[1]
        elif isinstance(node.func, cst.Attribute) and not ctx.env.on_host(node.func.value):
            if ctx.qualname(node.func.value) != "torch":
                op = node.func.attr.value
        if op in DYNAMIC_OPS:
            ctx.report(node, f"`{op}` returns a tensor sized by the data, which a graph cannot replay; {ADVICE[op]}")
        elif op == "where" and name == "torch.where" and len(node.args) == 1:
            ctx.report(node, "one-argument `torch.where(cond)` is `nonzero`: its size depends on the data; "
                             "use `torch.nonzero_static` or the three-argument form")
        elif op == "repeat_interleave" and keyword(node, "output_size") is None:
            args = positional(node)
            function_form = name == "torch.repeat_interleave"
            repeats = keyword(node, "repeats") or (args[1] if function_form and len(args) > 1
                                                   else args[0] if not function_form and args else None)
            self_repeats = repeats is None  # `torch.repeat_interleave(counts)`: the tensor is its own repeats
            if self_repeats or ctx.env.is_tensor(repeats):
                ctx.report(node, "`repeat_interleave` with tensor repeats and no `output_size=` sizes its output by "
                                 "the data; pass `output_size`")


class BoolMaskIndex(Rule):
    """Reading `x[mask]` compacts (a `nonzero`); `x[mask] = scalar` is `masked_fill_` and is fine."""

    code = "GR202"

    def __init__(self) -> None:
        self.fills: set[int] = set()  # ids of `x[mask]` targets assigned a scalar

    def visit_Assign(self, node: cst.Assign, ctx: RuleContext) -> None:
        if ctx.env.kind(node.value) == SCALAR or _is_scalar_value(node.value, ctx):
            self.fills.update(id(t.target) for t in node.targets if isinstance(t.target, cst.Subscript))

    def visit_Subscript(self, node: cst.Subscript, ctx: RuleContext) -> None:
        if ctx.env.on_host(node.value) or id(node) in self.fills:
            return
        for element in node.slice:
            if isinstance(element.slice, cst.Index) and ctx.env.kind(element.slice.value) == BOOL:
                ctx.report(node, "indexing with a boolean mask produces a data-dependent shape (it calls `nonzero`); "
                                 "use `torch.where(mask, value, x)` or `masked_fill_`")
                return


def _is_scalar_value(value: cst.BaseExpression, ctx: RuleContext) -> bool:
    """A Python number, or a 0-dim tensor spelled as one (`x.new_tensor(0.0)`, `float("-inf")`), or a named constant
    not known as a tensor (lmdeploy's `dllm_mask[is_masked] = DLLM_UNMASKED`, `consts.PAD`: PEP 8 constants)."""
    if isinstance(value, cst.UnaryOperation):
        return _is_scalar_value(value.expression, ctx)
    if isinstance(value, (cst.Name, cst.Attribute)) and ctx.env.kind(value) is None:
        name = value.value if isinstance(value, cst.Name) else value.attr.value
        if CONSTANT_NAME.fullmatch(name):
            return True
    if isinstance(value, cst.Call):
        name = ctx.qualname(value.func) or ""
        if name in ("float", "int", "bool") or name.startswith("math."):
            return True
    return isinstance(value, cst.Attribute) and (ctx.qualname(value) or "").startswith("math.")


class TensorSlice(Rule):
    code = "GR203"
    MESSAGE = "a {what} taken from a device tensor needs its value on the host; slice with Python ints " \
              "and mask the rest"

    def visit_Subscript(self, node: cst.Subscript, ctx: RuleContext) -> None:
        for element in node.slice:
            part = element.slice
            if isinstance(part, cst.Slice):
                for bound in (part.lower, part.upper, part.step):
                    if bound is not None and ctx.env.is_tensor(bound):
                        ctx.report(bound, self.MESSAGE.format(what="slice bound"))

    def visit_Call(self, node: cst.Call, ctx: RuleContext) -> None:
        name = ctx.qualname(node.func) or ""
        method = node.func.attr.value if isinstance(node.func, cst.Attribute) else ""
        args = positional(node)
        if name == "torch.narrow" or (method == "narrow" and name != "torch.narrow"):
            bounds = args[2:4] if name == "torch.narrow" else args[1:3]
            bounds += [v for v in (keyword(node, "start"), keyword(node, "length")) if v is not None]
            for bound in bounds:
                if ctx.env.is_tensor(bound):
                    ctx.report(bound, self.MESSAGE.format(what="`narrow` bound"))
        elif method in ("split", "tensor_split") or name in ("torch.split", "torch.tensor_split"):
            index = 1 if name.startswith("torch.") and name.count(".") == 1 else 0
            sizes = keyword(node, "split_size_or_sections") or keyword(node, "split_size") or \
                (args[index] if len(args) > index else None)
            parts = [e.value for e in sizes.elements] if isinstance(sizes, (cst.List, cst.Tuple)) else [sizes]
            for size in parts:
                if size is not None and ctx.env.is_tensor(size):
                    ctx.report(size, self.MESSAGE.format(what="split size"))
