"""Phase 2: resolve call sites across the project and walk the call graph from the hot roots.

Each hot function keeps the chain of callers that made it hot (root first), which every finding
in it carries, so a reader sees why load-time-looking code is in the decode step.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from graphready.lint.index import CallSite, ClassInfo, FunctionInfo, ModuleIndex

MAX_ALIAS_DEPTH = 8


@dataclass
class HotSet:
    chains: dict[str, list[str]] = field(default_factory=dict)  # function key -> root..function

    def __contains__(self, key: str) -> bool:
        return key in self.chains


class Project:
    """All module indexes of one lint run, with cross-module name resolution."""

    def __init__(self, modules: dict[str, ModuleIndex]):
        self.modules = modules
        self.functions: dict[str, FunctionInfo] = {}
        self._lookups: dict[str, tuple | None] = {}
        for index in modules.values():
            for info in index.functions.values():
                self.functions[info.key] = info

    def _lookup(self, dotted: str, depth: int = 0):
        """dotted name -> ("function", key) | ("class", ClassInfo, module) | None, following re-exports."""
        if dotted not in self._lookups:
            self._lookups[dotted] = self._resolve(dotted, depth)
        return self._lookups[dotted]

    def _resolve(self, dotted: str, depth: int):
        if depth > MAX_ALIAS_DEPTH:
            return None
        parts = dotted.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            module = ".".join(parts[:cut])
            index = self.modules.get(module)
            if index is None:
                continue
            rest = ".".join(parts[cut:])
            if rest in index.functions:
                return ("function", index.functions[rest].key)
            if rest in index.classes:
                return ("class", index.classes[rest], module)
            head, _, tail = rest.partition(".")
            if head in index.imports and index.imports[head] != dotted:
                target = index.imports[head] + (f".{tail}" if tail else "")
                return self._lookup(target, depth + 1)
            return None
        return None

    def class_named(self, dotted: str) -> tuple[ClassInfo, str] | None:
        found = self._lookup(dotted)
        if found and found[0] == "class":
            return found[1], found[2]
        return None

    def find_method(self, dotted_class: str, method: str, seen: set[str] | None = None) -> str | None:
        seen = seen if seen is not None else set()
        found = self.class_named(dotted_class)
        if not found or dotted_class in seen:
            return None
        seen.add(dotted_class)
        info, module = found
        if method in info.methods:
            return f"{module}:{info.qualname}.{method}"
        for base in info.bases:
            key = self.find_method(base, method, seen)
            if key:
                return key
        return None

    def class_attr_type(self, dotted_class: str, attr: str, elements: bool) -> str | None:
        found = self.class_named(dotted_class)
        if not found:
            return None
        info, _ = found
        table = info.attr_elem_types if elements else info.attr_types
        if attr in table:
            return table[attr]
        for base in info.bases:
            resolved = self.class_attr_type(base, attr, elements)
            if resolved:
                return resolved
        return None

    def _instance_call(self, dotted_class: str, method: str) -> str | None:
        if method == "__call__":
            return self.find_method(dotted_class, "__call__") or self.find_method(dotted_class, "forward")
        return self.find_method(dotted_class, method)

    def resolve_call(self, caller: FunctionInfo, site: CallSite) -> str | None:
        module = caller.key.split(":", 1)[0]
        own_class = f"{module}.{caller.class_qualname}" if caller.class_qualname else None
        if site.kind == "key":
            return site.target if site.target in self.functions else None
        if site.kind == "name":
            found = self._lookup(site.target)
            if not found:
                return None
            if found[0] == "function":
                return found[1]
            return self._instance_call(f"{found[2]}.{found[1].qualname}", "__init__")
        if site.kind == "class":
            return self._instance_call(site.target, site.method)
        if own_class is None:
            return None
        if site.kind == "self":  # self.m(...): a method, or calling the object held in self.m
            method = self.find_method(own_class, site.target)
            if method:
                return method
            attr_class = self.class_attr_type(own_class, site.target, elements=False)
            return self._instance_call(attr_class, "__call__") if attr_class else None
        if site.kind == "super":
            found = self.class_named(own_class)
            for base in found[0].bases if found else []:
                key = self.find_method(base, site.target)
                if key:
                    return key
            return None
        if site.kind in ("attr", "elem"):
            attr_class = self.class_attr_type(own_class, site.target, elements=site.kind == "elem")
            return self._instance_call(attr_class, site.method) if attr_class else None
        return None


def _matches(pattern: str, key: str) -> bool:
    module_glob, _, qual_glob = pattern.partition(":")
    module, _, qualname = key.partition(":")
    return fnmatchcase(module, module_glob) and fnmatchcase(qualname, qual_glob)


def find_hot(project: Project, patterns: list[str]) -> HotSet:
    hot = HotSet()
    queue: deque[str] = deque()

    def add(key: str, chain: list[str]) -> None:
        if key not in hot.chains:
            hot.chains[key] = chain
            queue.append(key)

    for key, info in sorted(project.functions.items()):
        if info.marked_hot or any(_matches(p, key) for p in patterns):
            add(key, [key])
    for key, info in sorted(project.functions.items()):
        for site in info.calls:
            if site.capture:
                target = project.resolve_call(info, site)
                if target:
                    add(target, [f"{key} [graph capture]", target])
    while queue:
        key = queue.popleft()
        caller = project.functions[key]
        for site in caller.calls:
            target = project.resolve_call(caller, site)
            if target and target not in hot.chains and not project.functions[target].memoized:
                add(target, [*hot.chains[key], target])
    return hot
