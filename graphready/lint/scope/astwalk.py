"""A fast walk over one function's own statements (the index's hottest loop)."""

from __future__ import annotations

import ast

_SCOPE_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
# fields that never hold a node (names, flags, `ctx`): not worth a `getattr` per node
_LEAF_FIELDS = {"ctx", "id", "attr", "arg", "name", "asname", "module", "kind", "type_comment", "conversion",
                "level", "is_async", "simple"}
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}  # node type -> fields that may hold nodes, last first


def walk_body(statements: list[ast.stmt]) -> list[ast.AST]:
    """Every node under `statements` in pre-order (as `ast.walk` would meet them depth first), not
    descending into nested function, class or lambda bodies.

    A hand-rolled walk into one list: `ast.iter_child_nodes` (a generator per node) is the single largest
    cost of indexing a big tree.
    """
    found: list[ast.AST] = []
    stack = list(reversed(statements))
    pop, push, add, node_type = stack.pop, stack.append, found.append, ast.AST
    while stack:
        node = pop()
        add(node)
        kind = type(node)
        fields = _CHILD_FIELDS.get(kind)
        if fields is None:
            fields = _CHILD_FIELDS[kind] = () if kind in _SCOPE_TYPES else tuple(
                name for name in reversed(kind._fields) if name not in _LEAF_FIELDS)
        for name in fields:  # pushed last field first, last element first: popped in source order
            value = getattr(node, name, None)
            if type(value) is list:
                for element in reversed(value):
                    if isinstance(element, node_type):
                        push(element)
            elif isinstance(value, node_type):
                push(value)
    return found
