"""Results of unknown calls that the code itself shows to be device tensors.

`y = layer(x)` says nothing about `y`: the callee is a module or helper whose return type the lint
cannot see. The code around it often settles the question. Only tensors have `copy_` and the other
in-place methods, take part in `@`, or come first in a torch op's arguments (later ones, and a
factory's, are often numbers: `torch.narrow(x, 0, start, n)`, `torch.arange(n)`); so a local that
meets one of those is a tensor wherever the step runs. Inside a capture body a reduction on it
(`y.sum()`, `y.max()`) is enough too: what a captured layer returns is its output tensor, and
nothing there is numpy.
"""

from __future__ import annotations

from keyword import iskeyword
from typing import Callable

import libcst as cst

from graphready.lint.analysis.cstwalk import walk
from graphready.lint.inference.torchnames import FACTORIES, GRAPH_CONTEXT, non_tensor_torch

SIZE_FACTORIES = {"scalar_tensor", "tril_indices", "triu_indices", "normal"}  # beyond FACTORIES: numbers in
REDUCTIONS = {"sum", "max", "min", "mean", "amax", "amin", "argmax", "argmin", "norm", "std", "var", "prod"}


def _torch_op(name: str | None) -> bool:
    """A torch function whose first argument is a tensor (`torch.cat`, `torch.argmax`, `F.silu`): not a class,
    a setting, a custom op, or a factory that takes sizes and values (`torch.arange(n)`, `torch.full((n,), v)`)."""
    if not name or not name.startswith("torch.") or name.startswith("torch.ops.") or non_tensor_torch(name):
        return False
    short = name.rsplit(".", 1)[-1]
    if short in FACTORIES or short in SIZE_FACTORIES or short.startswith("sym_") or short.endswith("_window"):
        return False
    return short[:1].islower() and (not name.startswith("torch.nn.") or name.startswith("torch.nn.functional."))


_SCOPES = {cst.FunctionDef, cst.Lambda, cst.ClassDef}


def _named(node: cst.BaseExpression) -> list[str]:
    """The local names an argument hands over: `y`, or the elements of `[y, z]` / `(y, z)`."""
    if isinstance(node, cst.Name):
        return [node.value]
    if isinstance(node, (cst.List, cst.Tuple)):
        return [e.value.value for e in node.elements if isinstance(e.value, cst.Name)]
    return []


def tensor_call_results(func: cst.FunctionDef, qualname: Callable[[cst.CSTNode], str | None],
                        unknown: Callable[[cst.BaseExpression], bool]) -> set[str]:
    """Locals bound to a call whose result `unknown` cannot type, that the function uses as tensors."""
    results: dict[str, bool] = {}  # name -> bound inside a capture body
    used: set[str] = set()  # names used as only a tensor can be
    reduced: set[str] = set()  # names reduced with a tensor method
    captures: list[cst.With] = []  # the capture bodies being walked

    def enter(node: cst.CSTNode) -> bool:
        # exact types (these node classes have no subclasses): `isinstance` on libcst's ABCs costs several
        # times more, on every node of every hot function
        kind = type(node)
        if kind in _SCOPES and node is not func:
            return False
        if kind is cst.With and any(
                isinstance(i.item, cst.Call) and qualname(i.item.func) == GRAPH_CONTEXT for i in node.items):
            captures.append(node)
        elif kind is cst.Assign and len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name) \
                and isinstance(node.value, cst.Call) and unknown(node.value):
            name = node.targets[0].target.value
            results[name] = results.get(name, False) or bool(captures)
        elif kind is cst.Call:
            _uses(node)
        elif kind is cst.BinaryOperation and isinstance(node.operator, cst.MatrixMultiply):
            used.update(_named(node.left) + _named(node.right))
        return True

    def _uses(call: cst.Call) -> None:
        func_node = call.func
        if isinstance(func_node, cst.Attribute):
            method = func_node.attr.value
            receiver = func_node.value
            if method == "copy_":
                used.update(name for arg in call.args for name in _named(arg.value))
            if method.endswith("_") and not method.startswith("_") and not iskeyword(method[:-1]) \
                    and isinstance(receiver, cst.Name):
                used.add(receiver.value)  # in-place tensor methods: `y.add_(b)`, `y.copy_(x)`; not `flags.is_(k)`
            elif method in REDUCTIONS and isinstance(receiver, cst.Name):
                reduced.add(receiver.value)
        first = next((arg.value for arg in call.args if arg.keyword is None and not arg.star), None)
        if first is not None and _torch_op(qualname(func_node)):  # later arguments are often numbers
            used.update(_named(first))

    def leave(node: cst.CSTNode) -> None:
        if captures and node is captures[-1]:
            captures.pop()

    walk(func, enter, leave, leave_types={cst.With})
    return {name for name, captured in results.items() if name in used or (captured and name in reduced)}
