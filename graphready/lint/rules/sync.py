"""GR101-GR103: anything that makes the host wait for or read a device value."""

from __future__ import annotations

import libcst as cst

from graphready.lint.analysis.context import RuleContext
from graphready.lint.analysis.cstwalk import nodes
from graphready.lint.rules.base import Rule
from graphready.lint.inference.libraries import (
    FLASHINFER_FLOAT_ARGUMENTS, FLASHINFER_RUN_METHODS, flashinfer_function, flashinfer_wrapper,
)
from graphready.lint.inference.tensors import device_kind, positional, keyword


DEVICE_SYNCS = {"torch.cuda.synchronize", "torch.accelerator.synchronize"}


class HostSync(Rule):
    code = "GR101"

    def visit_Call(self, node: cst.Call, ctx: RuleContext) -> None:
        name = ctx.qualname(node.func)
        if name in DEVICE_SYNCS:
            ctx.report(node, f"`{name}()` blocks the host until the GPU is idle; it cannot be captured")
            return
        if not isinstance(node.func, cst.Attribute):
            return
        method, receiver = node.func.attr.value, node.func.value
        if ctx.env.on_host(receiver):
            return
        if method == "numpy":
            if _forced(node):  # without force=True a device tensor's `.numpy()` raises: it only reads host tensors
                ctx.report(node, "`.numpy(force=True)` copies a device value to the host and waits for the GPU")
        elif method in ("item", "tolist"):
            if node.args and not (name or "").startswith("torch."):
                return  # not a tensor's: `t.item()`/`.tolist()` take no argument (but `torch.Tensor.item(t)` and
                #         `torch._prims.item(t)` read a tensor passed to them)
            ctx.report(node, f"`.{method}()` copies a device value to the host and waits for the GPU")
        elif method == "cpu" and not node.args:
            ctx.report(node, "`.cpu()` copies a device tensor to the host and waits for the GPU")
        elif method == "to" and device_kind(keyword(node, "device") or next(iter(positional(node)), None), ctx.env) == "cpu":
            ctx.report(node, "`.to(\"cpu\")` copies a device tensor to the host and waits for the GPU")
        elif method == "synchronize" and ctx.qualname(receiver) != "torch.cuda":
            ctx.report(node, "`.synchronize()` on a stream or event blocks the host; use `wait_stream`/`wait_event`")


def _forced(node: cst.Call) -> bool:
    """`.numpy(force=...)` with anything but a literal False: a tensor's only argument (a positional one is not a
    tensor's `.numpy`)."""
    value = keyword(node, "force")
    return value is not None and len(node.args) == 1 and not (isinstance(value, cst.Name) and value.value == "False")


STRINGS = (cst.SimpleString, cst.ConcatenatedString)


def _string_method(func: cst.BaseExpression, method: str) -> bool:
    """`"...".method` on a string literal."""
    return isinstance(func, cst.Attribute) and func.attr.value == method and isinstance(func.value, STRINGS)


SCALAR_CASTS = {"int", "float", "bool", "complex"}
COMPARING_BUILTINS = {"max", "min", "sorted", "any", "all"}  # compare or test elements with Python's bool()
TEXT_CALLS = {"print", "str", "repr", "format"}


class ImplicitScalar(Rule):
    code = "GR102"

    def __init__(self) -> None:
        self.wrappers: set[str] = set()  # locals bound to a FlashInfer attention wrapper

    def visit_Assign(self, node: cst.Assign, ctx: RuleContext) -> None:
        """`decode_wrapper = self.forward_metadata.decode_wrappers[i]`: a wrapper by the attribute it comes from."""
        if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name) and _flashinfer_wrapper(
                node.value, ctx, self.wrappers):
            self.wrappers.add(node.targets[0].target.value)

    def visit_Call(self, node: cst.Call, ctx: RuleContext) -> None:
        library = _flashinfer_call(node, ctx, self.wrappers)
        if library is not None:
            for arg in node.args:
                if arg.keyword is not None and arg.keyword.value in FLASHINFER_FLOAT_ARGUMENTS and _may_be_tensor(
                        arg.value, ctx):
                    ctx.report(arg.value, f"{library} takes `{arg.keyword.value}` as a Python float and reads a "
                                          f"tensor given there on the host (a sync); pass a float kept at load "
                                          f"(`layer.k_scale_float`)")
            return
        name = ctx.qualname(node.func)
        if name is None:
            if _string_method(node.func, "format") and any(ctx.env.is_tensor(a.value) for a in node.args):
                ctx.report(node, "`str.format()` of a tensor formats its values on the host, syncing with the GPU")
            return
        args = [a.value for a in node.args]
        tensors = [a for a in args if ctx.env.is_tensor(a)]
        if not tensors:
            return
        if name in SCALAR_CASTS and ctx.env.is_tensor(args[0]):
            ctx.report(node, f"`{name}(tensor)` reads the device value on the host (an implicit `.item()`)")
        elif name.startswith("math."):
            ctx.report(node, f"`{name}()` of a tensor converts it to a Python number (an implicit `.item()`)")
        elif name in TEXT_CALLS:
            ctx.report(node, f"`{name}()` of a tensor formats its values on the host, syncing with the GPU")
        elif name == "range":
            ctx.report(node, "`range()` of a tensor reads its value on the host; loop bounds must be Python ints")
        elif name in COMPARING_BUILTINS:
            method = "sort" if name == "sorted" else name
            ctx.report(node, f"Python's `{name}()` over a tensor tests its elements with `bool()` on the host, one "
                             f"sync per comparison; use `t.{method}()` and keep the result on the device")

    def visit_BinaryOperation(self, node: cst.BinaryOperation, ctx: RuleContext) -> None:
        """`"%s" % y`, `"%d/%d" % (a, y)`: printf-style formatting reads every tensor it is given."""
        if not (isinstance(node.operator, cst.Modulo) and isinstance(node.left, STRINGS)):
            return
        right = node.right
        values = [e.value for e in right.elements] if isinstance(right, cst.Tuple) else [right]
        if any(ctx.env.is_tensor(value) for value in values):
            ctx.report(node, "`%`-formatting a tensor reads its values on the host, syncing with the GPU")

    def visit_FormattedStringExpression(self, node: cst.FormattedStringExpression, ctx: RuleContext) -> None:
        if ctx.env.is_tensor(node.expression):
            ctx.report(node, "formatting a tensor in an f-string reads its values on the host")

    def visit_For(self, node: cst.For, ctx: RuleContext) -> None:
        """`for e in t:` itself only unbinds views (no sync); using `e` as a Python index reads it."""
        if not (isinstance(node.target, cst.Name) and ctx.env.is_tensor(node.iter)):
            return
        name = node.target.value
        for use in nodes(node.body):
            if isinstance(use, cst.Subscript) and not ctx.env.is_tensor(use.value) and any(
                isinstance(e.slice, cst.Index) and isinstance(e.slice.value, cst.Name) and e.slice.value.value == name
                for e in use.slice
            ):
                ctx.report(node.iter, f"each `{name}` from this tensor is a device value; indexing a Python "
                                      f"container with it reads it on the host (one sync per element)")
                return


def _flashinfer_wrapper(value: cst.BaseExpression, ctx: RuleContext, wrappers: set[str]) -> bool:
    """A FlashInfer wrapper: built here, a local bound to one, or read from an attribute (or list) that a class of
    this file fills with them (`self.decode_wrappers.append(BatchDecodeWithPagedKVCacheWrapper(...))`)."""
    while isinstance(value, cst.Subscript):
        value = value.value
    if isinstance(value, cst.Call):
        return flashinfer_wrapper(ctx.qualname(value.func))
    if isinstance(value, cst.Name):
        return value.value in wrappers
    return isinstance(value, cst.Attribute) and value.attr.value in ctx.facts.flashinfer_holders


def _flashinfer_call(node: cst.Call, ctx: RuleContext, wrappers: set[str]) -> str | None:
    """`wrapper.run` / `flashinfer.single_decode_with_kv_cache` for a call of FlashInfer attention, else None."""
    func = node.func
    if isinstance(func, cst.Attribute) and func.attr.value in FLASHINFER_RUN_METHODS and _flashinfer_wrapper(
            func.value, ctx, wrappers):
        return f"a FlashInfer wrapper's `.{func.attr.value}()`"
    name = ctx.qualname(func)
    return f"`flashinfer.{name.rsplit('.', 1)[-1]}()`" if flashinfer_function(name) else None


def _may_be_tensor(value: cst.BaseExpression, ctx: RuleContext) -> bool:
    """A tensor, or an attribute the project makes a parameter tensor on some object (`layer.k_scale`, set to
    `torch.nn.Parameter(...)` by the quantization method that loads it)."""
    return ctx.env.is_tensor(value) or (isinstance(value, cst.Attribute)
                                        and value.attr.value in ctx.facts.parameter_attrs)


BRANCH_CALLS = {"torch.equal", "torch.allclose"}


class DeviceBranch(Rule):
    code = "GR103"
    MESSAGE = "branching on a tensor value reads it on the host; use `torch.where` or masking"

    def __init__(self) -> None:
        self.inner_chains: set[int] = set()  # ids of `and`/`or` nodes already reported as part of a chain

    def _test(self, test: cst.BaseExpression, ctx: RuleContext) -> None:
        if not isinstance(test, cst.BooleanOperation) and ctx.env.is_tensor(test):
            ctx.report(test, self.MESSAGE)

    def visit_If(self, node: cst.If, ctx: RuleContext) -> None:
        self._test(node.test, ctx)

    def visit_While(self, node: cst.While, ctx: RuleContext) -> None:
        self._test(node.test, ctx)

    def visit_Assert(self, node: cst.Assert, ctx: RuleContext) -> None:
        self._test(node.test, ctx)

    def visit_IfExp(self, node: cst.IfExp, ctx: RuleContext) -> None:
        self._test(node.test, ctx)

    def visit_BooleanOperation(self, node: cst.BooleanOperation, ctx: RuleContext) -> None:
        """One finding per `and`/`or` chain (`a and b or c`, over several lines too), at its first tensor
        operand: the condition is one fix, however many tensors it tests."""
        if id(node) in self.inner_chains:
            return
        operands, stack = [], [node]
        while stack:
            part = stack.pop()
            if isinstance(part, cst.BooleanOperation):
                self.inner_chains.add(id(part))
                stack += [part.right, part.left]
            else:
                operands.append(part)
        first = next((operand for operand in operands if ctx.env.is_tensor(operand)), None)
        if first is not None:
            ctx.report(first, "`and`/`or` on a tensor reads its truth value on the host; use `&`/`|`")

    def visit_UnaryOperation(self, node: cst.UnaryOperation, ctx: RuleContext) -> None:
        if isinstance(node.operator, cst.Not) and ctx.env.is_tensor(node.expression):
            ctx.report(node, "`not` on a tensor reads its truth value on the host; use `~` or `torch.logical_not`")

    def visit_Call(self, node: cst.Call, ctx: RuleContext) -> None:
        name = ctx.qualname(node.func)
        method = node.func.attr.value if isinstance(node.func, cst.Attribute) else None
        if name in BRANCH_CALLS or (method in ("equal", "allclose") and ctx.env.is_tensor(node.func.value)):
            ctx.report(node, f"`{name or method}` returns a Python bool, so it syncs with the GPU")
