"""Phase 2: resolve call sites across the project and walk the call graph from the hot roots.

Each hot function keeps the chain of callers that made it hot (root first), which every finding
in it carries, so a reader sees why load-time-looking code is in the decode step.
"""

from __future__ import annotations

import functools
import re
from collections import deque
from dataclasses import dataclass, field
from fnmatch import translate
from typing import TYPE_CHECKING

from graphready.lint.scope.attrtypes import looks_like_class
from graphready.lint.scope.index import CallSite, ClassInfo, FunctionInfo, ModuleIndex

if TYPE_CHECKING:
    from graphready.lint.lazyindex import LazyFacts
from graphready.lint.scope.guards import is_glob
from graphready.lint.scope.regions import within

MAX_ALIAS_DEPTH = 8
CAPTURE_STEP = " [graph capture]"  # the first step of a chain that starts in a capture body: "<function> [graph capture]"
AUTOGRAD_FUNCTION = "torch.autograd.Function"


@dataclass
class HotSet:
    chains: dict[str, list[str]] = field(default_factory=dict)  # function key -> root..function
    via: dict[str, int] = field(default_factory=dict)  # function key -> line of the call its chain makes
    callers: dict[str, set[str]] = field(default_factory=dict)  # function key -> who calls it hot (fan-in)
    roots: dict[str, int] = field(default_factory=dict)  # why functions are roots -> how many
    excluded: set[str] = field(default_factory=set)  # matched by exclude-roots and left cold
    never_built: set[str] = field(default_factory=set)  # pattern roots of classes never built here
    unwarmed: set[str] = field(default_factory=set)  # first reached from a capture with no warm-up call
    warmed: set[str] = field(default_factory=set)  # first reached from a capture after a warm-up call
    uncompiled: set[str] = field(default_factory=set)  # hot only through functions torch.compile never traces
    host_params: dict[str, set[str]] = field(default_factory=dict)  # parameters every hot call passes host data
    given_params: dict[str, set[str]] = field(default_factory=dict)  # optional parameters every hot call passes
    # a configured fact's label -> the calls its ruled-out branches hold that the walk did not follow:
    # (caller, line, callee), the caller hot or a capture body
    cut: dict[str, set[tuple[str, int, str]]] = field(default_factory=dict)

    def __contains__(self, key: str) -> bool:
        return key in self.chains

    def scope(self) -> dict:
        """How many functions are hot and why, for `--statistics` and the JSON summary."""
        rooted = sum(self.roots.values())
        return {"hot_functions": len(self.chains), "roots": dict(sorted(self.roots.items())),
                "reached_by_calls": len(self.chains) - rooted, "excluded_by_exclude_roots": len(self.excluded),
                "roots_of_classes_never_built": len(self.never_built)}


class Project:
    """All module indexes of one lint run, with cross-module name resolution. `lazy` fills in the call sites and
    eager-only regions of a lazy index's functions as the walk reaches them (lint/lazyindex.py)."""

    def __init__(self, modules: dict[str, ModuleIndex], lazy: LazyFacts | None = None):
        self.modules = modules
        self.lazy = lazy
        self.functions: dict[str, FunctionInfo] = {}
        self._lookups: dict[str, tuple | None] = {}
        for index in modules.values():
            for info in index.functions.values():
                self.functions[info.key] = info
        self.autograd_functions = self._autograd_functions()
        self._class_arguments: dict[tuple[str, str], list[str]] | None = None
        self.class_uses: dict[str, list[tuple[str, int]]] = {}
        for index in modules.values():
            for name, uses in index.class_uses.items():
                self.class_uses.setdefault(name, []).extend(uses)
        weight_attrs: dict[str, bool] = {}
        for index in modules.values():
            for name, host in index.weight_attrs.items():
                weight_attrs[name] = weight_attrs.get(name, True) and host
        # parameter attributes the loader attaches with host values only (`bnb_shard_offsets`, a CPU tensor)
        self.host_weight_attrs = frozenset(name for name, host in weight_attrs.items() if host)
        self._never_built: dict[str, bool] = {}
        self._entries: frozenset[str] = frozenset()
        # class-like names other modules import: a class imported for a call, an annotation or a type check
        # exists at run time even when its builder is outside the linted paths (a runner built by a worker)
        self.imported_classes = {target.rsplit(".", 1)[-1] for index in modules.values()
                                 for alias, target in index.imports.items()
                                 if target != f"{index.module}.{alias}" and looks_like_class(target)}

    def never_built(self, key: str, entries: frozenset[str] = frozenset()) -> bool:
        """The function is a method of a class that this machine never instantiates: every use of the
        class's name is a call `Foo(...)` in a branch for another platform (`if current_platform.is_xpu():`)
        or in a method of a class that is itself never built, or nothing in the project names the class at
        all (no other module imports it, no string a registry finds it by) and it is no entry class
        (`entries`: classes the hot-path patterns name a method of, which a server builds from a checkpoint's
        config): a reference implementation only tests build. Any other use (a registry, a subclass, a
        module-level call) counts as built."""
        info = self.functions.get(key)
        if info is None or info.class_qualname is None:
            return False
        if entries is not self._entries:  # find_hot passes one set for all its roots: the memo holds for it
            self._entries, self._never_built = entries, {}
        return self._class_never_built(info.class_qualname)

    def want_builders(self, keys: list[str]) -> None:
        """`never_built` will be asked about these functions' classes: start on the first function using each class's
        name, which it reads first (and, for a class built where the code runs, only), rather than waiting on each
        in turn."""
        for key in keys:
            info = self.functions.get(key)
            if info is not None and info.class_qualname is not None:
                uses = self.class_uses.get(info.class_qualname.rsplit(".", 1)[-1])
                if uses and uses[0][0] in self.functions:
                    self.want(uses[0][0])

    def _class_never_built(self, class_qualname: str) -> bool:
        name = class_qualname.rsplit(".", 1)[-1]  # uses are recorded by the name as written: `Foo`, `mod.Foo`
        if name not in self._never_built:
            self._never_built[name] = False  # a cycle (a class built only by itself) counts as built
            uses = self.class_uses.get(name)
            self._never_built[name] = (all(self._call_never_runs(key, line) for key, line in uses) if uses
                                       else name not in self._entries and name not in self.imported_classes)
        return self._never_built[name]

    def deep(self, key: str) -> FunctionInfo:
        """The function with its call sites and eager-only regions worked out."""
        info = self.functions[key]
        if not info.deep:
            self.lazy.fill(self.modules[key.partition(":")[0]].path, info)
        return info

    def want(self, key: str) -> None:
        """`deep(key)` will be asked for: start on it."""
        info = self.functions[key]
        if not info.deep:
            self.lazy.want(self.modules[key.partition(":")[0]].path, info)

    def _call_never_runs(self, key: str, line: int) -> bool:
        if key not in self.functions:
            return False
        caller = self.deep(key)
        if within(line, caller.never_runs):
            return True
        return caller.class_qualname is not None and self._class_never_built(caller.class_qualname)

    def _autograd_functions(self) -> set[str]:
        """Dotted names of the project's `torch.autograd.Function` subclasses (through project bases)."""
        found: set[str] = set()
        changed = True
        while changed:
            changed = False
            for index in self.modules.values():
                for info in index.classes.values():
                    dotted = f"{index.module}.{info.qualname}"
                    if dotted not in found and any(b == AUTOGRAD_FUNCTION or b in found for b in info.bases):
                        found.add(dotted)
                        changed = True
        return found

    def autograd_method(self, key: str) -> bool:
        """A method of an autograd.Function: entered through `Function.apply(...)`, never as a module."""
        module, _, qualname = key.partition(":")
        owner = qualname.rpartition(".")[0]
        return bool(owner) and f"{module}.{owner}" in self.autograd_functions

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
            owner, _, method = rest.rpartition(".")
            if method == "apply" and f"{module}.{owner}" in self.autograd_functions:
                forward = self.find_method(f"{module}.{owner}", "forward")  # `Fn.apply(x)` runs `Fn.forward`
                return ("function", forward) if forward else None
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

    def class_attr_types(self, dotted_class: str, attr: str, elements: bool, origin: str | None = None) -> list[str]:
        """The classes `self.<attr>` (or its elements) may hold in an instance of `origin` (default
        dotted_class), looked up along dotted_class's bases."""
        found = self.class_named(dotted_class)
        if not found:
            return []
        info, _ = found
        origin = origin or dotted_class
        if elements and attr in info.attr_elem_params:  # built from `__init__(layer_type=Default)`
            param = info.attr_elem_params[attr]
            made = self._init_class(origin, param) or info.attr_elem_types.get(attr)
            return list(dict.fromkeys(filter(None, [made, *self.classes_given(origin, param)])))
        if not elements and attr in info.attr_params:  # `self.attn = attn_type(...)`, `attn_type=Default`
            param = info.attr_params[attr]
            made = self._init_class(origin, param) or info.attr_types.get(attr)
            return list(dict.fromkeys(filter(None, [made, *self.classes_given(origin, param)])))
        if elements and attr in info.attr_elem_types:
            return [info.attr_elem_types[attr], *info.attr_elem_alternatives.get(attr, [])]
        if not elements and attr in info.attr_types:
            return [info.attr_types[attr], *info.attr_alternatives.get(attr, [])]
        if not elements and attr in info.attr_builders:  # `self.attn = self._build_attn(...)`
            builder = self.find_method(origin, info.attr_builders[attr])
            made = self.functions[builder].returns_class if builder else None
            return [made] if made else []
        for base in info.bases:
            resolved = self.class_attr_types(base, attr, elements, origin)
            if resolved:
                return resolved
        return []

    def classes_given(self, dotted_class: str, param: str) -> list[str]:
        """The classes callers hand to `dotted_class(..., param=Cls)`, by keyword or by position."""
        found = self.class_named(dotted_class)
        if not found:
            return []
        if self._class_arguments is None:
            self._class_arguments = self._given_classes()
        return self._class_arguments.get((f"{found[1]}.{found[0].qualname}", param), [])

    def _given_classes(self) -> dict[tuple[str, str], list[str]]:
        """(class, `__init__` parameter) -> the classes constructor calls across the project pass to it."""
        given: dict[tuple[str, str], list[str]] = {}
        for index in self.modules.values():
            for callee, param, held in index.class_arguments:
                found = self.class_named(callee)
                if not found:
                    continue
                dotted = f"{found[1]}.{found[0].qualname}"
                if param.startswith("#"):  # by position: after `self` in the `__init__` the class runs
                    init = self.find_method(dotted, "__init__")
                    params = self.functions[init].params[1:] if init else []
                    position = int(param[1:])
                    if position >= len(params):
                        continue
                    param = params[position]
                classes = given.setdefault((dotted, param), [])
                if held not in classes:
                    classes.append(held)
        return given

    def _init_class(self, dotted_class: str, param: str, depth: int = 0) -> str | None:
        """The class a subclass hands to its base's `__init__(param=...)` through `super().__init__`."""
        found = self.class_named(dotted_class)
        if not found or depth > MAX_ALIAS_DEPTH:
            return None
        if param in found[0].super_init_classes:
            return found[0].super_init_classes[param]
        return next((c for c in (self._init_class(b, param, depth + 1) for b in found[0].bases) if c), None)

    def _instance_call(self, dotted_class: str, method: str) -> str | None:
        if method == "__call__":
            return self.find_method(dotted_class, "__call__") or self.find_method(dotted_class, "forward")
        return self.find_method(dotted_class, method)

    def resolve_call(self, caller: FunctionInfo, site: CallSite) -> str | None:
        bound = self.resolve_bound(caller, site)
        return bound[0][0] if bound else None

    def resolve_bound(self, caller: FunctionInfo, site: CallSite, self_class: str | None = None
                      ) -> list[tuple[str, str | None]]:
        """[(callee, the class of `self` inside it)]: several where an attribute holds one of several
        classes. `self_class` is the runtime class of the caller's `self` when the walk knows it (an
        inherited method runs with the subclass's attributes: `Qwen3Model` reuses `Qwen2Model.forward`
        over Qwen3 layers)."""
        module = caller.key.split(":", 1)[0]
        own_class = self_class or (f"{module}.{caller.class_qualname}" if caller.class_qualname else None)
        if site.kind == "key":
            return [(site.target, None)] if site.target in self.functions else []
        if site.kind == "name":
            found = self._lookup(site.target)
            if not found:
                return []
            if found[0] == "function":
                return [(found[1], None)]
            return self._instances([f"{found[2]}.{found[1].qualname}"], "__init__")
        if site.kind == "class":
            return self._instances([site.target], site.method)
        if own_class is None:
            return []
        if site.kind == "self":  # self.m(...): a method, or calling the object held in self.m
            method = self.find_method(own_class, site.target)
            if method:
                return [(method, own_class)]
            return self._instances(self.class_attr_types(own_class, site.target, elements=False), "__call__")
        if site.kind == "super":
            found = self.class_named(own_class)
            for base in found[0].bases if found else []:
                key = self.find_method(base, site.target)
                if key:
                    return [(key, own_class)]
            return []
        if site.kind in ("attr", "elem"):
            held = self.class_attr_types(own_class, site.target, elements=site.kind == "elem")
            return self._instances(held, site.method)
        return []

    def _instances(self, classes: list[str], method: str) -> list[tuple[str, str | None]]:
        bound = [(self._instance_call(made, method), made) for made in classes]
        return [(key, made) for key, made in bound if key]


def _matches(pattern: str, key: str) -> bool:
    """'module-glob:qualname-glob' against a function key; a pattern without ':' names modules.

    A qualname glob also matches the methods of a matching class (`*Vision*` covers
    `Qwen2VisionBlock.forward`), so exclusions can name classes."""
    return _pattern_regex(pattern).fullmatch(key) is not None


def _glob(pattern: str) -> str:
    """fnmatch's regex for a glob, without its `(?s:...)\\Z` wrapper (so several can be joined)."""
    translated = translate(pattern)
    return translated[translated.index(":") + 1:translated.rindex(")")]


@functools.lru_cache(maxsize=4096)
def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """One regex over the whole key: a key holds one ':', so the module glob cannot run past it."""
    return re.compile(_pattern_body(pattern), re.DOTALL)


def _pattern_body(pattern: str) -> str:
    module_glob, sep, qual_glob = pattern.partition(":")
    return f"(?:{_glob(module_glob)}):(?:{_glob(qual_glob) if sep else '.*'})"


@functools.lru_cache(maxsize=64)
def _first_match(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    """The patterns as one alternation, in order: a fullmatch takes the first alternative that matches, so its
    group names the first entry matching (one match per function instead of one per entry)."""
    if not patterns:
        return None
    return re.compile("|".join(f"(?P<p{i}>{_pattern_body(p)})" for i, p in enumerate(patterns)), re.DOTALL)


@functools.lru_cache(maxsize=64)
def _last_match(patterns: tuple[str, ...]) -> re.Pattern[str] | None:
    """The patterns as one alternation, last entry first: a fullmatch takes the first alternative that
    matches, so its group names the last entry matching (`k` a `!entry`, `d` a plain one)."""
    if not patterns:
        return None
    parts = [f"(?P<{'k' if p.startswith('!') else 'd'}{i}>{_pattern_body(p.removeprefix('!'))})"
             for i, p in reversed(list(enumerate(patterns)))]
    return re.compile("|".join(parts), re.DOTALL)


def _names_many(pattern: str) -> bool:
    """A module-only pattern or a glob in the qualname part (`*:*.apply`), not one function named outright
    (`pkg.mod:Impl.apply`)."""
    _, sep, qualname = pattern.partition(":")
    return not sep or is_glob(qualname)


def _excluded(patterns: list[str], key: str) -> bool:
    """Matched by an exclude-roots entry (the function or a class it is in). As in .gitignore, the
    last entry that matches decides: a later `!entry` keeps what an earlier entry dropped, and a later
    plain entry drops again what a `!entry` kept."""
    regex = _last_match(tuple(patterns))
    if regex is None:
        return False
    module, _, qualname = key.partition(":")
    owners = qualname.split(".")
    last = None  # (position from the end, drops) of the last entry matching the function or a class it is in
    for i in range(1, len(owners) + 1):
        found = regex.fullmatch(f"{module}:{'.'.join(owners[:i])}")
        if found is not None:
            rank = int(found.lastgroup[1:])
            if last is None or rank > last[0]:
                last = (rank, found.lastgroup[0] == "d")
    return last is not None and last[1]


def _positional_skip(target: FunctionInfo, site: CallSite) -> int | None:
    """How many of the target's parameters come before the call's first positional argument (`self`),
    or None for `Class.method(obj, ...)`, where it is not known where `self` goes."""
    bound = target.params[:1] in (["self"], ["cls"])
    if bound and site.kind == "name" and not target.qualname.endswith((".__init__", ".__call__")):
        return None
    return 1 if bound else 0


def _host_params(target: FunctionInfo, site: CallSite, caller_host: set[str] = frozenset(),
                 host_attrs: frozenset[str] = frozenset()) -> set[str]:
    """The target's parameters this call fills with host data (`f(meta.num_tokens_cpu)`), with the caller's
    own parameters that are host data (`caller_host`) passed on unchanged, or with reads of parameter
    attributes the loader attaches as host data (`host_attrs`)."""
    skip = _positional_skip(target, site)
    if skip is None:
        return set()
    params = target.params
    names = set()
    for arg in [*site.host_args, *(slot for slot, param in site.passed_params.items() if param in caller_host),
                *(slot for slot, attr in site.attr_args.items() if attr in host_attrs)]:
        if arg.isdigit():
            position = int(arg) + skip
            if position < len(params):
                names.add(params[position])
        else:
            names.add(arg)
    return names


def _pass_host_through(project: Project, hot: HotSet, calls: dict[str, list[tuple[str, CallSite]]]) -> None:
    """Host parameters passed on: where every hot call of a function passes a parameter host data its caller
    got as host data from every hot call of its own, so does the callee's. A least fixpoint from the calls'
    direct arguments, so a parameter only handed around a cycle stays unknown; a root's parameters pass
    nothing on (it is also called from outside the project)."""
    while True:
        passed = {}
        for target, sites in calls.items():
            info = project.functions[target]
            sets = [_host_params(info, site, hot.host_params.get(caller, set()) if len(hot.chains[caller]) > 1
                                 else set(), project.host_weight_attrs) for caller, site in sites]
            passed[target] = set.intersection(*sets)
        if all(passed[t] == hot.host_params.get(t, set()) for t in passed):
            return
        hot.host_params.update(passed)


def _given_params(target: FunctionInfo, site: CallSite) -> set[str]:
    """The target's optional parameters (those its `absent_regions` test) that this call surely passes."""
    optional = {name for names, _, _ in target.absent_regions for name in names.split(",")}
    skip = _positional_skip(target, site)
    given = set(site.given_keywords)
    if skip is not None:
        given.update(target.params[skip:skip + site.given_positions])
    return given & optional


def _note_given(hot: HotSet, target: FunctionInfo, site: CallSite) -> None:
    if target.absent_regions:
        given = _given_params(target, site)
        hot.given_params[target.key] = hot.given_params.get(target.key, given) & given


def find_hot(project: Project, patterns: list[str], exclude: list[str] | None = None,
             not_compiled: list[str] | None = None, warm_up_before_capture: bool = False,
             follow_assumed: bool = False) -> HotSet:
    """Roots (config patterns, markers, capture bodies), then everything they call.

    Functions matching `exclude` are neither roots nor entered by the walk, unless a capture body
    calls them directly (then they are captured whatever the configuration says). Functions matching
    `not_compiled`, and what only they reach, are marked `uncompiled`. With `warm_up_before_capture`
    (the engine runs each step eagerly before capturing it), what the configured roots and markers
    reach is `warmed`: its first call is never a capture. Calls in a branch a configured fact rules out
    (`assume-true` / `assume-false`) are not followed but kept in `cut`, unless `follow_assumed` (what
    the code would reach without the facts, for `--statistics`)."""
    hot = HotSet()
    queue: deque[tuple[str, str | None]] = deque()  # (function, runtime class of its self)
    exclude = exclude or []
    excluded = functools.cache(lambda key: _excluded(exclude, key))  # asked again for each call of a cold function

    def followed(caller: str, site: CallSite, targets: list[str]) -> bool:
        """Follow the call, unless a configured fact rules out the branch it is in: then note what it
        would have made hot."""
        if not site.assumed or follow_assumed:
            return True
        hot.cut.setdefault(site.assumed, set()).update(
            (caller, site.line, target) for target in targets
            if not project.functions[target].memoized and not excluded(target))
        return False

    def add(key: str, chain: list[str], why: str | None = None, line: int | None = None) -> None:
        if key not in hot.chains:
            project.want(key)
            hot.chains[key] = chain
            if line is not None:
                hot.via[key] = line
            queue.append((key, None))
            if why:
                hot.roots[why] = hot.roots.get(why, 0) + 1

    def cold(key: str) -> bool:
        if excluded(key):
            hot.excluded.add(key)
            return True
        return False

    first = _first_match(tuple(patterns))
    matched = {key: patterns[int(found.lastgroup[1:])] for key in project.functions
               if first is not None and (found := first.fullmatch(key)) is not None}
    project.want_builders(sorted(matched))
    entries = frozenset(info.class_qualname.rsplit(".", 1)[-1] for key in matched
                        if (info := project.functions[key]).class_qualname)
    for key, info in sorted(project.functions.items()):
        if info.marked_hot and not cold(key):
            add(key, [key], "marked in code")
            continue
        pattern = matched.get(key)
        if pattern and not project.autograd_method(key) and not cold(key):
            if project.never_built(key, entries) and all(_names_many(p) for p in patterns if _matches(p, key)):
                # dropped unless a pattern names the function outright: that is the user's say-so
                hot.never_built.add(key)
            else:
                add(key, [key], f"hot-paths {pattern}")
    unwarmed_roots: set[str] = set()
    warmed_roots: set[str] = set()
    for key, info in sorted(project.functions.items()):
        captured = [(site, target) for site in info.calls if site.capture
                    if followed(key, site, [target] if (target := project.resolve_call(info, site)) else [])]
        warmed = {project.resolve_call(info, site) for site in info.calls
                  if not site.capture and (follow_assumed or not site.assumed)} if captured else set()
        for site, target in captured:
            if target:
                add(target, [f"{key}{CAPTURE_STEP}", target], "graph capture bodies", site.line)
                _note_given(hot, project.functions[target], site)
                hot.callers.setdefault(target, set()).add(key)
                if hot.chains[target][0] == f"{key}{CAPTURE_STEP}":
                    (warmed_roots if target in warmed else unwarmed_roots).add(target)
    walked: set[tuple[str, str | None]] = set()
    edges: dict[str, set[tuple[str, int]]] = {}  # callee -> (caller, line of the call)
    calls: dict[str, list[tuple[str, CallSite]]] = {}  # callee -> the walked calls of it, for host parameters
    while queue:
        key, self_class = queue.popleft()
        if (key, self_class) in walked:
            continue
        walked.add((key, self_class))
        caller = project.deep(key)
        for site in caller.calls:
            bound = project.resolve_bound(caller, site, self_class)
            if not followed(key, site, [target for target, _ in bound]):
                continue
            for target, target_self in bound:
                if project.functions[target].memoized or (target not in hot.chains and cold(target)):
                    continue
                passed_host = _host_params(project.functions[target], site, host_attrs=project.host_weight_attrs)
                hot.host_params[target] = hot.host_params.get(target, passed_host) & passed_host
                calls.setdefault(target, []).append((key, site))
                _note_given(hot, project.functions[target], site)
                add(target, [*hot.chains[key], target], line=site.line)
                queue.append((target, target_self))
                edges.setdefault(target, set()).add((key, site.line))
                if target != key:
                    hot.callers.setdefault(target, set()).add(key)
    if any(site.passed_params for sites in calls.values() for _, site in sites):
        _pass_host_through(project, hot, calls)
    hot.host_params = {key: params for key, params in hot.host_params.items()
                       if params and len(hot.chains[key]) > 1}  # a root is also called from outside the project
    hot.given_params = {key: params for key, params in hot.given_params.items()
                        if params and len(hot.chains[key]) > 1}
    _drop_untaken_fallback_calls(project, hot, edges)
    from_capture = {key: chain[1] for key, chain in hot.chains.items()
                    if len(chain) > 1 and chain[0].endswith(CAPTURE_STEP)}
    hot.unwarmed = {key for key, root in from_capture.items() if root in unwarmed_roots}
    hot.warmed = {key for key, root in from_capture.items() if root in warmed_roots}
    if warm_up_before_capture:
        hot.warmed |= {key for key, chain in hot.chains.items() if not chain[0].endswith(CAPTURE_STEP)}
    hot.uncompiled = _uncompiled(hot, not_compiled or [])
    return hot


def untaken_fallbacks(info: FunctionInfo, given: set[str] | None) -> list[tuple[int, int]]:
    """Line ranges of `info`'s fallbacks for optional arguments (`if scale is None:`) that every hot caller
    passes (`given`): code the graph never runs."""
    return [(start, end) for names, start, end in info.absent_regions
            if given and given.issuperset(names.split(","))]


def _drop_untaken_fallback_calls(project: Project, hot: HotSet, edges: dict[str, set[tuple[str, int]]]) -> None:
    """What only untaken fallbacks call is not hot (`if kv_indices is None: kv_indices = build_meta(...)`,
    where every caller passes `kv_indices`): walk the calls again from the roots without those call sites,
    keep what is still reached, and give it a chain of calls that are made."""
    untaken = {key: ranges for key, params in hot.given_params.items()
               if (ranges := untaken_fallbacks(project.functions[key], params))}
    live: dict[str, dict[str, int]] = {}  # caller -> what it calls from lines that run -> first such line
    dropped = False
    for callee, calls in edges.items():
        for caller, line in calls:
            if any(start <= line <= end for start, end in untaken.get(caller, ())):
                dropped = True
            else:
                callees = live.setdefault(caller, {})
                callees[callee] = min(line, callees.get(callee, line))
    if not dropped:
        return
    roots = [key for key, chain in hot.chains.items()
             if len(chain) == 1 or (len(chain) == 2 and chain[0].endswith(CAPTURE_STEP))]
    chains = {key: hot.chains[key] for key in roots}
    via = {key: line for key, line in hot.via.items() if key in chains}
    queue = deque(roots)
    while queue:
        key = queue.popleft()
        for callee, line in sorted(live.get(key, {}).items()):
            if callee not in chains:
                chains[callee] = [*chains[key], callee]
                via[callee] = line
                queue.append(callee)
    hot.chains, hot.via = chains, via
    walked = {(caller, callee) for callee, calls in edges.items() for caller, _ in calls}
    hot.callers = {callee: {c for c in callers  # a capture body calling its root is no walked edge: kept
                            if (c, callee) not in walked or (c in chains and callee in live.get(c, ()))}
                   for callee, callers in hot.callers.items() if callee in chains}
    hot.host_params = {key: params for key, params in hot.host_params.items() if key in chains}
    hot.given_params = {key: params for key, params in hot.given_params.items() if key in chains}


def _uncompiled(hot: HotSet, not_compiled: list[str]) -> set[str]:
    """Hot functions no path from a root reaches without passing a `not-compiled` function: under
    torch.compile the engine runs them as eager kernels (`forward_cuda` swapped for `forward_native`)."""
    if not not_compiled:
        return set()
    callees: dict[str, set[str]] = {}
    for callee, callers in hot.callers.items():
        for caller in callers:
            callees.setdefault(caller, set()).add(callee)
    skipped = {key for key in hot.chains if _excluded(not_compiled, key)}
    traced = {key for key, chain in hot.chains.items() if key not in skipped
              and (len(chain) == 1 or (len(chain) == 2 and chain[0].endswith(CAPTURE_STEP)))}
    queue = deque(traced)
    while queue:
        for callee in callees.get(queue.popleft(), ()):
            if callee not in traced and callee not in skipped:
                traced.add(callee)
                queue.append(callee)
    return set(hot.chains) - traced
