"""A fast walk over one function's own statements (the index's hottest loop)."""

from __future__ import annotations

import ast

_SCOPE_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}


def walk_body(statements: list[ast.stmt]):
    """Every node under `statements`, not descending into nested function or class bodies.

    A hand-rolled walk: `ast.iter_child_nodes` is the single largest cost of indexing a big tree.
    """
    stack = list(reversed(statements))
    while stack:
        node = stack.pop()
        yield node
        kind = type(node)
        if kind in _SCOPE_TYPES:
            continue
        fields = _CHILD_FIELDS.get(kind)
        if fields is None:
            fields = _CHILD_FIELDS[kind] = tuple(f for f in kind._fields if f != "ctx")
        children = []
        for name in fields:
            value = getattr(node, name, None)
            if type(value) is list:
                children.extend(v for v in value if isinstance(v, ast.AST))
            elif isinstance(value, ast.AST):
                children.append(value)
        stack.extend(reversed(children))
