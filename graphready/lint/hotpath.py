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
    callers: dict[str, set[str]] = field(default_factory=dict)  # function key -> who calls it hot (fan-in)
    roots: dict[str, int] = field(default_factory=dict)  # why functions are roots -> how many
    excluded: set[str] = field(default_factory=set)  # matched by exclude-roots and left cold
    unwarmed: set[str] = field(default_factory=set)  # first reached from a capture with no warm-up call
    warmed: set[str] = field(default_factory=set)  # first reached from a capture after a warm-up call

    def __contains__(self, key: str) -> bool:
        return key in self.chains

    def scope(self) -> dict:
        """How many functions are hot and why, for `--statistics` and the JSON summary."""
        rooted = sum(self.roots.values())
        return {"hot_functions": len(self.chains), "roots": dict(sorted(self.roots.items())),
                "reached_by_calls": len(self.chains) - rooted, "excluded_by_exclude_roots": len(self.excluded)}


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
    """'module-glob:qualname-glob' against a function key; a pattern without ':' names modules.

    A qualname glob also matches the methods of a matching class (`*Vision*` covers
    `Qwen2VisionBlock.forward`), so exclusions can name classes."""
    module_glob, sep, qual_glob = pattern.partition(":")
    module, _, qualname = key.partition(":")
    if not fnmatchcase(module, module_glob):
        return False
    return not sep or fnmatchcase(qualname, qual_glob)


def _excluded(patterns: list[str], key: str) -> bool:
    """Matched by an exclude-roots entry (the function or a class it is in). As in .gitignore, the
    last entry that matches decides: a later `!entry` keeps what an earlier entry dropped, and a later
    plain entry drops again what a `!entry` kept."""
    module, _, qualname = key.partition(":")
    owners = qualname.split(".")
    candidates = [f"{module}:{'.'.join(owners[:i])}" for i in range(1, len(owners) + 1)]
    for pattern in reversed(patterns):
        keep = pattern.startswith("!")
        if any(_matches(pattern[1:] if keep else pattern, c) for c in candidates):
            return not keep
    return False


def find_hot(project: Project, patterns: list[str], exclude: list[str] | None = None) -> HotSet:
    """Roots (config patterns, markers, capture bodies), then everything they call.

    Functions matching `exclude` are neither roots nor entered by the walk, unless a capture body
    calls them directly (then they are captured whatever the configuration says)."""
    hot = HotSet()
    queue: deque[str] = deque()
    exclude = exclude or []

    def add(key: str, chain: list[str], why: str | None = None) -> None:
        if key not in hot.chains:
            hot.chains[key] = chain
            queue.append(key)
            if why:
                hot.roots[why] = hot.roots.get(why, 0) + 1

    def cold(key: str) -> bool:
        if _excluded(exclude, key):
            hot.excluded.add(key)
            return True
        return False

    for key, info in sorted(project.functions.items()):
        if info.marked_hot and not cold(key):
            add(key, [key], "marked in code")
            continue
        pattern = next((p for p in patterns if _matches(p, key)), None)
        if pattern and not cold(key):
            add(key, [key], f"hot-paths {pattern}")
    unwarmed_roots: set[str] = set()
    warmed_roots: set[str] = set()
    for key, info in sorted(project.functions.items()):
        captured = [(site, project.resolve_call(info, site)) for site in info.calls if site.capture]
        warmed = {project.resolve_call(info, site) for site in info.calls if not site.capture} if captured else set()
        for site, target in captured:
            if target:
                add(target, [f"{key} [graph capture]", target], "graph capture bodies")
                hot.callers.setdefault(target, set()).add(key)
                if hot.chains[target][0] == f"{key} [graph capture]":
                    (warmed_roots if target in warmed else unwarmed_roots).add(target)
    while queue:
        key = queue.popleft()
        caller = project.functions[key]
        for site in caller.calls:
            target = project.resolve_call(caller, site)
            if target and target not in hot.chains and not project.functions[target].memoized and not cold(target):
                add(target, [*hot.chains[key], target])
            if target in hot.chains and target != key:
                hot.callers.setdefault(target, set()).add(key)
    from_capture = {key: chain[1] for key, chain in hot.chains.items()
                    if len(chain) > 1 and chain[0].endswith("[graph capture]")}
    hot.unwarmed = {key for key, root in from_capture.items() if root in unwarmed_roots}
    hot.warmed = {key for key, root in from_capture.items() if root in warmed_roots}
    return hot
