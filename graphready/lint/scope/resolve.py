"""Name resolution from a module's imports: `F.linear` -> `torch.nn.functional.linear`.

The same map serves the ast index and the libcst rules (TorchFix-style qualified-name matching
without libcst's slower scope analysis): a local name is looked up in the module's imports and
top-level definitions, and attribute chains are appended.
"""

from __future__ import annotations

import ast


def _absolute(module: str, is_package: bool, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, target] if target else base)


class ImportMap:
    def __init__(self, module: str, is_package: bool = False):
        self.module = module
        self.is_package = is_package
        self.aliases: dict[str, str] = {}

    def collect(self, tree: ast.Module) -> None:
        """Imports anywhere in the module (function-level ones too) and top-level definitions."""
        for stmt in tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.aliases[stmt.name] = f"{self.module}.{stmt.name}"
        for node in _statements(tree.body):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.aliases[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".")[0]
                        self.aliases.setdefault(top, top)
            elif isinstance(node, ast.ImportFrom):
                source = _absolute(self.module, self.is_package, node.level, node.module)
                for alias in node.names:
                    if alias.name != "*":
                        self.aliases[alias.asname or alias.name] = f"{source}.{alias.name}" if source else alias.name
        for stmt in tree.body:  # `DecoderLayer = CudaDecoderLayer if _is_cuda else OtherDecoderLayer`
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                name, value = stmt.targets[0].id, stmt.value
                value = value.body if isinstance(value, ast.IfExp) else value
                target = dotted_name(value) if isinstance(value, (ast.Name, ast.Attribute)) else None
                if target and name[:1].isupper() and name not in self.aliases:
                    self.aliases[name] = self.resolve_dotted(target)

    def resolve_dotted(self, dotted: str) -> str:
        head, _, rest = dotted.partition(".")
        base = self.aliases.get(head, head)
        return f"{base}.{rest}" if rest else base

    def resolve(self, node: ast.AST) -> str | None:
        dotted = dotted_name(node)
        return self.resolve_dotted(dotted) if dotted else None


def _statements(body: list[ast.stmt]):
    """Every statement, in nested blocks and function bodies too, without entering expressions."""
    stack = list(reversed(body))
    while stack:
        node = stack.pop()
        yield node
        for name in ("cases", "finalbody", "handlers", "orelse", "body"):
            block = getattr(node, name, None)
            if type(block) is list:
                stack.extend(reversed(block))


def callee_name(func: ast.AST | None) -> str:
    """The last name of what a call calls: `f` for `f(...)` and `obj.f(...)`; "" for anything else."""
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def dotted_name(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None
