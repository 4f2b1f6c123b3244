"""A fast walk over one function's own statements (the index's hottest loop)."""

from __future__ import annotations

import ast

_SCOPE_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
# fields that never hold a node (names, flags, `ctx`): not worth a `getattr` per node
_LEAF_FIELDS = {"ctx", "id", "attr", "arg", "name", "asname", "module", "kind", "type_comment", "conversion",
                "level", "is_async", "simple"}
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}  # node type -> fields that may hold nodes, last first


class BodyNodes(list):
    """A function's own nodes in walk order, with those of a type at hand: the index filters each function's nodes
    by type a dozen times, and an `isinstance` test over every node each time was a tenth of indexing."""

    __slots__ = ("_by_type",)

    def of(self, *kinds: type) -> list[ast.AST]:
        """The nodes of these exact types (a parsed tree holds no subclasses of a node type), in walk order.
        Not to be changed: the list may be the one kept for the type."""
        by_type: dict[type, list[ast.AST]] | None = getattr(self, "_by_type", None)
        if by_type is None:
            by_type = self._by_type = {}
            for node in self:
                by_type.setdefault(type(node), []).append(node)
        found = [by_type[kind] for kind in kinds if kind in by_type]
        if len(found) <= 1:
            return found[0] if found else []
        return [node for node in self if type(node) in kinds]  # several types met: keep their interleaving


def walk_body(statements: list[ast.stmt]) -> BodyNodes:
    """Every node under `statements` in pre-order (as `ast.walk` would meet them depth first), not
    descending into nested function, class or lambda bodies.

    A hand-rolled walk into one list: `ast.iter_child_nodes` (a generator per node) is the single largest
    cost of indexing a big tree.
    """
    found = BodyNodes()
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
