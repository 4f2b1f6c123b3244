"""Rows of a persistent graph input that a replay preparation leaves stale (GR605).

A replay preparation pads the real batch (`raw_bs` requests) up to a captured size (`bs`) and refreshes
the graph's persistent input buffers on the real rows only (`buffers.positions[:raw_num_token].copy_(...)`):
the padded rows keep what an earlier replay left there, and the graph reads them. The engines reset the
rows that matter in a pad branch (`if bs != raw_bs: self.out_cache_loc.zero_()`), and a buffer missing
from that branch has shipped as silent KV corruption and illegal memory accesses (SGLang PRs #10892,
#23037, #24743). Stale rows are often harmless (the outputs of padded rows are dropped), so a buffer
refreshed only on its real rows is flagged only where the function itself says those rows are read: it
hands the padded extent on (`forward_batch.positions = self.positions[:num_tokens]`), or a pad branch
resets a buffer of the same family and not it (`out_cache_loc`, not `out_cache_loc_swa`). Without a pad
branch, a buffer refreshed only on the rows of its source (`buf[:len(src)].copy_(src)`) and then handed
on whole hands its stale tail to the graph too (SGLang PR #32555)."""

from __future__ import annotations

import ast
import re

from graphready.lint.scope.astwalk import BodyNodes
from graphready.lint.scope.resolve import callee_name, dotted_name

# the real (unpadded) size, by its name: `raw_bs`, `real_num_tokens`, `num_tokens_unpadded`
REAL = re.compile(r"(?:^|_)(?:raw|real|actual|unpadded)(?:_|$)")
# what a buffer holds, by its name: locations, indices, positions or lengths, the values kernels address
# memory with (stale ones write and gather out of place); not activations or token ids, whose stale rows
# only spoil the padded rows' own outputs, which are dropped
ADDRESSES = re.compile(r"(?:^|_)(?:locs?|locations?|index|indices|indexes|idx|positions?|pos|slots?|mapping|"
                       r"tables?|lens|seqlens|lengths|offsets|indptr)(?:_|$)")
WRITES = {"copy_", "fill_", "zero_"}  # in-place writes of the tensor (or slice) they are called on
BUILDERS = {"SimpleNamespace", "dict"}  # calls that only hold what they are given
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def stale_padded_rows(body_nodes: BodyNodes) -> list[tuple[int, str, str]]:
    """(line, message, severity: "" for the rule's own, or "info") for each persistent buffer the function
    refreshes only on some of its rows, that no write of the function resets, and whose other rows the
    function shows are read; `body_nodes` are the function's own nodes in source order."""
    pads = [(node, side) for node in body_nodes.of(ast.If)
            for side in [_pad_test(node.test)] if side is not None]
    if not pads and not any(_source_rows(node) for node in body_nodes.of(ast.Subscript)):
        return []
    real, padded = _sizes(body_nodes, {real for _, (real, _) in pads}, {padded for _, (_, padded) in pads})
    aliases = _aliases(body_nodes)
    writes = _writes(body_nodes, aliases, real, padded)
    handed = _handed_on(body_nodes, aliases, real, padded, {id(target) for *_, target in writes})
    partial: dict[str, tuple[ast.AST, str, ast.AST]] = {}  # buffer -> its first partial refresh
    for buffer, node, extent, target in writes:
        if extent in ("head", "source"):
            partial.setdefault(buffer, (node, extent, target))
    for buffer, _, extent, _ in writes:
        if extent not in ("head", "source"):
            partial.pop(buffer, None)  # written in full (or in a way not tracked) somewhere in the function
    found = _unpadded(body_nodes, pads, writes, partial, handed) if pads else []
    for buffer, (node, extent, target) in partial.items():
        kind, line = handed.get(buffer, ("", 0))
        if extent == "source" and kind == "whole" and _addresses(buffer):
            local = _name(target.value) if isinstance(target, ast.Subscript) else None
            at = (_binding(body_nodes, local) if local in aliases else None) or node
            found.append((at.lineno, f"`{_short(buffer)}` is refreshed only on the rows of its source at line "
                                     f"{node.lineno} (`[:len(...)]`), and line {line} hands the whole buffer on: "
                                     "the rows past the source keep what an earlier call left, and whatever "
                                     "reads the buffer past them (a padded batch, a slice from the end) reads "
                                     "stale values; hand on only the refreshed rows, or reset the rest", ""))
    return sorted(found)


def _binding(body_nodes: list[ast.AST], local: str) -> ast.AST | None:
    """The statement that binds a local alias of a buffer (`track_buf = self.track_indices_buf`)."""
    return next((node for node in body_nodes if isinstance(node, ast.Assign) and _dotted(node.value)
                 and any(_name(t) == local for t in node.targets)), None)


def _unpadded(body_nodes, pads, writes, partial, handed) -> list[tuple[int, str, str]]:
    """The real-rows refreshes a pad branch leaves out, where the function shows the padded rows matter:
    warnings, or info where the refresh serves an input only some batches carry."""
    in_branch = {id(n): branch for branch, _ in pads for stmt in branch.body for n in _own_nodes(stmt)}
    resets: dict[str, ast.If] = {}
    for buffer, node, extent, _ in writes:
        if extent != "head" and id(node) in in_branch:
            resets.setdefault(buffer, in_branch[id(node)])
    if not resets:
        return []  # no padding policy: the function resets nothing for padded rows
    optional = _optional(body_nodes)
    found = []
    for buffer, (node, extent, _) in partial.items():
        if extent != "head":
            continue
        sibling = next((b for b in resets if _siblings(b, buffer)), None)
        kind, line = handed.get(buffer, ("", 0))
        severity = ""
        if sibling is not None:
            why = f"they pair with the rows of `{_short(sibling)}`, which the pad branch resets"
        elif kind and _addresses(buffer):
            why = f"line {line} hands " + ("the whole buffer" if kind == "whole" else "its padded extent") + " on"
            if id(node) in optional:  # whether the graph reads an optional input depends on the model served
                why += ", stale rows included, to the models that read this input (it is refreshed only when given)"
                severity = "info"
            else:
                why += ", stale rows included"
        else:
            continue
        branch = resets[sibling] if sibling is not None else min(resets.values(), key=lambda b: b.lineno)
        reset = ", ".join(f"`{_short(b)}`" for b, at in resets.items() if at is branch)
        found.append((node.lineno, f"`{_short(buffer)}` is refreshed only on the real rows here, and the pad branch "
                                   f"at line {branch.lineno} resets {reset} but not it: its padded rows keep what "
                                   f"an earlier replay left, and {why}; reset it in the pad branch too", severity))
    return found


def _optional(body_nodes: list[ast.AST]) -> set[int]:
    """Nodes that run only when some input is present: under `if forward_batch.mrope_positions is not None:`."""
    found: set[int] = set()
    for node in body_nodes:
        if isinstance(node, ast.If) and any(
                isinstance(c, ast.Compare) and any(isinstance(op, ast.IsNot) for op in c.ops)
                and any(isinstance(v, ast.Constant) and v.value is None for v in c.comparators)
                for c in ast.walk(node.test)):
            found |= {id(n) for stmt in node.body for n in _own_nodes(stmt)}
    return found


def _own_nodes(stmt: ast.AST):
    stack = [stmt]
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, _SCOPES):
            stack.extend(ast.iter_child_nodes(node))


def _name(node: ast.AST | None) -> str | None:
    return node.id if isinstance(node, ast.Name) else None


def _pad_test(test: ast.AST) -> tuple[str, str] | None:
    """(real, padded) names of a pad test: `bs != raw_bs`, `bs > raw_bs`, `raw_bs < bs`, also as an
    operand of `or` (`if bs != raw_bs or positions is None:`)."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or):
        return next((side for side in map(_pad_test, test.values) if side is not None), None)
    if not isinstance(test, ast.Compare) or len(test.ops) != 1 or len(test.comparators) != 1:
        return None
    left, op, right = _name(test.left), test.ops[0], _name(test.comparators[0])
    if left is None or right is None:
        return None
    pairs = {ast.Gt: [(right, left)], ast.Lt: [(left, right)], ast.NotEq: [(left, right), (right, left)]}
    for real, padded in pairs.get(type(op), []):
        if REAL.search(real) and not REAL.search(padded):
            return real, padded
    return None


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _sizes(body_nodes: list[ast.AST], real: set[str], padded: set[str]) -> tuple[set[str], set[str]]:
    """Names of the real size and of the padded one: the pad tests' operands, names spelled as a real
    size (`raw_num_token`), and locals computed from one side only (`num_tokens = bs * tokens_per_bs`)."""
    real = real | {n.id for n in body_nodes if isinstance(n, ast.Name) and REAL.search(n.id)}
    padded = padded - real
    fixed = real | padded
    for node in body_nodes:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name, used = node.targets[0].id, _names(node.value)
            if name in fixed:
                continue
            if used & real and not used & padded:
                real.add(name)
            elif used & padded and not used & real:
                padded.add(name)
    return real, padded


def _dotted(node: ast.AST) -> str | None:
    """`self.a.b` for an attribute chain from `self`."""
    name = dotted_name(node) if isinstance(node, ast.Attribute) else None
    return name if name and name.startswith("self.") else None


def _aliases(body_nodes: list[ast.AST]) -> dict[str, str]:
    """Locals bound to one `self` attribute chain (`buffers = self.buffers`, `buf = self.track_buf`) and
    to nothing else but None."""
    bound: dict[str, set[str | None]] = {}
    for node in body_nodes:
        if isinstance(node, ast.Assign):
            if isinstance(node.value, ast.Constant) and node.value.value is None:
                continue
            for target in node.targets:
                value = _dotted(node.value) if isinstance(target, ast.Name) else None
                for name in _bound(target):
                    bound.setdefault(name, set()).add(value)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.NamedExpr)):
            for name in _bound(node.target):
                bound.setdefault(name, set()).add(None)
        elif isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                for name in _bound(item.optional_vars):
                    bound.setdefault(name, set()).add(None)
    return {name: next(iter(values)) for name, values in bound.items() if len(values) == 1 and None not in values}


def _bound(target: ast.AST | None) -> list[str]:
    """The local names an assignment target binds: `x`, `(x, *rest)`; none for `x[i]` or `obj.x`."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Starred):
        return _bound(target.value)
    if isinstance(target, (ast.Tuple, ast.List)):
        return [name for element in target.elts for name in _bound(element)]
    return []


def _buffer(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """The persistent buffer an expression names: `self.positions`, or `buffers.positions` / `buf` through
    a local bound to a `self` attribute."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    root = "self" if node.id == "self" and parts else aliases.get(node.id)
    return ".".join([root, *reversed(parts)]) if root else None


def _source_rows(node: ast.Subscript) -> bool:
    """`buf[:len(src)]`: the rows a source of that length fills."""
    index = node.slice
    return (isinstance(index, ast.Slice) and index.lower is None and index.step is None
            and isinstance(index.upper, ast.Call) and _name(index.upper.func) == "len")


def _extent(node: ast.Subscript, real: set[str], padded: set[str]) -> str:
    """"head" for the real rows (`[:raw_bs]`, `[: raw_num_token * steps]`, `[:, :raw_num_token]`), "source"
    for `[:len(src)]`, "padded" for the padded extent (`[:bs]`), "other" for anything else."""
    if _source_rows(node):
        return "source"
    index = node.slice
    if isinstance(index, ast.Tuple) and index.elts:
        if not all(isinstance(e, ast.Slice) and e.lower is None and e.upper is None and e.step is None
                   for e in index.elts[:-1]):
            return "other"
        index = index.elts[-1]
    if not isinstance(index, ast.Slice) or index.lower is not None or index.step is not None or index.upper is None:
        return "other"
    used = _names(index.upper)
    if used & real and not used & padded:
        return "head"
    return "padded" if used & padded and not used & real else "other"


def _writes(body_nodes: list[ast.AST], aliases: dict[str, str], real: set[str],
            padded: set[str]) -> list[tuple[str, ast.AST, str, ast.AST]]:
    """(buffer, node, extent, written expression) of each in-place write to a persistent buffer, in source
    order: a `copy_`/`fill_`/`zero_` receiver, a subscript assignment, an `out=` argument, and an element
    of a destination list handed to a copy (`_grouped_foreach_copy_(dsts, srcs)`); "full" for the whole
    buffer."""
    destinations = _copy_destinations(body_nodes)
    found: list[tuple[str, ast.AST, str, ast.AST]] = []

    def record(target: ast.AST, at: ast.AST) -> None:
        if isinstance(target, ast.Subscript):
            buffer = _buffer(target.value, aliases)
            if buffer is not None:
                found.append((buffer, at, _extent(target, real, padded), target))
        elif (buffer := _buffer(target, aliases)) is not None:
            found.append((buffer, at, "full", target))

    for node in body_nodes:
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in WRITES:
                record(func.value, node)
            for keyword in node.keywords:
                if keyword.arg == "out":
                    record(keyword.value, node)
            if (isinstance(func, ast.Attribute) and func.attr in ("append", "insert") and node.args
                    and _name(func.value) in destinations):
                record(node.args[-1], node)
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Subscript):
                    record(target, node)
            if (isinstance(node, ast.Assign) and isinstance(node.value, (ast.List, ast.Tuple))
                    and any(_name(t) in destinations for t in node.targets)):
                for element in node.value.elts:
                    record(element, element)
    return found


def _copy_destinations(body_nodes: list[ast.AST]) -> set[str]:
    """Local lists handed first to a copy (`torch._foreach_copy_(dsts, srcs)`): the tensors copied into."""
    found = set()
    for node in body_nodes:
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Name):
            if "copy" in callee_name(node.func).lower():
                found.add(node.args[0].id)
    return found


def _handed_on(body_nodes: list[ast.AST], aliases: dict[str, str], real: set[str], padded: set[str],
               written: set[int]) -> dict[str, tuple[str, int]]:
    """buffer -> ("padded" or "whole", line) where the function hands the buffer's padded extent
    (`self.x[:bs]`) or the whole buffer on: as an assigned value, a returned value or a call argument (a
    whole buffer only to what just holds it: `SimpleNamespace(x=buf)`, `Metadata(x=buf)`). A whole buffer
    given to any other call may be reset there: such a buffer maps to ("", line) and is never flagged."""
    found: dict[str, tuple[str, int]] = {}
    bindings = {id(node.value) for node in body_nodes if isinstance(node, ast.Assign)
                and all(_name(t) in aliases for t in node.targets)}

    def consider(value: ast.AST | None, line: int, holder: bool) -> None:
        for item in value.elts if isinstance(value, (ast.Tuple, ast.List)) else [value]:
            if item is None or id(item) in written or id(item) in bindings:
                continue
            if isinstance(item, ast.Subscript):
                buffer = _buffer(item.value, aliases)
                if buffer is not None and _extent(item, real, padded) == "padded":
                    found.setdefault(buffer, ("padded", line))
            elif (buffer := _buffer(item, aliases)) is not None:
                if holder:
                    found.setdefault(buffer, ("whole", line))
                else:
                    found[buffer] = ("", line)

    for node in body_nodes:
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.Return)):
            consider(node.value, node.lineno, True)
        elif isinstance(node, ast.Call) and (callee := callee_name(node.func)) not in WRITES:  # `dst.copy_(buf)` reads buf
            holder = callee in BUILDERS or callee[:1].isupper()
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                consider(arg, node.lineno, holder)
    return found


def _addresses(buffer: str) -> bool:
    return bool(ADDRESSES.search(buffer.rpartition(".")[2]))


def _short(buffer: str) -> str:
    return buffer[len("self."):] if buffer.startswith("self.") else buffer


def _siblings(reset: str, buffer: str) -> bool:
    """Buffers of one family on one object: `out_cache_loc` and `out_cache_loc_swa`, `seq_lens` and
    `seq_lens_cpu`."""
    a, _, name_a = reset.rpartition(".")
    b, _, name_b = buffer.rpartition(".")
    return a == b and (name_b.startswith(name_a + "_") or name_a.startswith(name_b + "_"))
