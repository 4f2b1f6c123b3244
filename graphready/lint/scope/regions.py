"""Line ranges inside a function that are not hot, and the bodies of graph captures.

Not hot: the eager-only branch of a configured predicate (`eager-if`: `if VERBOSE:`,
`if forward_mode.is_extend():`, `if mode == ForwardMode.EXTEND:`; `captured-if`: the `else` of
`if forward_mode.is_decode():`), the non-capturing branch of `torch.cuda.is_current_stream_capturing()`,
everything after an early exit taken when capturing (`if not x.is_cuda: ... return` is fine, but
`if get_is_capture_mode(): return ...` leaves the rest eager), `except` handlers (an exception inside
a capture invalidates it, so a handler never becomes part of a working graph), and memoized one-time
initialisation (an `if X is None:` / `if k not in cache:` / `if not self._ready:` block, or the rest of
a function after `if cached is not None: return cached`, that stores its result in a global, an
attribute or a dict). Calls there do not make their callees hot and no rule fires there.

A predicate can be named through a variable: `capturing = get_is_capture_mode()` or a module-level
`_VERIFY = envs.SGLANG_VERIFY.get()` makes `if not capturing:` / `if _VERIFY:` guards too.
"""

from __future__ import annotations

import ast
import re
from typing import Callable
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase

from graphready.lint.scope.astwalk import walk_body
from graphready.lint.scope.attrtypes import self_attr
from graphready.lint.scope.resolve import ImportMap
from graphready.lint.inference.torchnames import is_tensor_callee

CAPTURING = "torch.cuda.is_current_stream_capturing"
NO_CUDA_WHEN_FALSE = {CAPTURING, "torch.cuda.is_available"}  # false: not capturing, or no GPU at all
GRAPH_CONTEXT = "torch.cuda.graph"
TENSOR_METHODS = {"to", "cuda", "contiguous", "clone", "t", "float", "half", "bfloat16", "view", "reshape",
                  "new_zeros", "new_ones", "new_empty", "new_full", "new_tensor", "pin_memory"}
ENV_READS = {"get", "value", "is_set", "get_bool"}  # `envs.DEBUG_X.get()` reads the switch DEBUG_X
EXITS = (ast.Return, ast.Raise, ast.Continue, ast.Break)
PLATFORM_PREDICATES = {"is_hip", "is_rocm", "is_xpu", "is_cpu", "is_npu", "is_hpu", "is_mps", "is_tpu", "is_cuda"}


def within(line: int, ranges: list[tuple[int, int]]) -> bool:
    """`line` falls in one of the inclusive (first, last) line ranges."""
    return any(start <= line <= end for start, end in ranges)


def _block_range(statements: list[ast.stmt]) -> tuple[int, int] | None:
    if not statements:
        return None
    return statements[0].lineno, max(s.end_lineno or s.lineno for s in statements)


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


@dataclass(frozen=True)
class Guards:
    """Eager-only predicates: names (or globs: `SGLANG_TRACE_*`) whose true (`eager_if`) or false
    (`captured_if`) branch never runs inside a graph. A name matches a variable, an attribute, a call
    or an enum member compared against: `VERBOSE`, `envs.DEBUG.get()`, `mode.is_extend()`,
    `mode == ForwardMode.EXTEND`."""

    eager_if: frozenset[str] = frozenset()
    captured_if: frozenset[str] = frozenset()
    _globs: tuple[tuple[str, ...], tuple[str, ...]] = field(default=((), ()), compare=False, repr=False)
    capability: int | None = None  # `gpu-capability`: the GPU the graphs run on, for capability tests
    hardware_only: bool = False  # `platform()`: capture state is not a property of the machine

    @classmethod
    def of(cls, eager_if, captured_if, capability: int | None = None) -> "Guards":
        eager, captured = frozenset(eager_if), frozenset(captured_if)
        globs = (tuple(p for p in eager if _is_glob(p)), tuple(p for p in captured if _is_glob(p)))
        return cls(eager, captured, globs, capability)

    def adding(self, eager_if=frozenset(), captured_if=frozenset()) -> "Guards":
        """These guards plus plain (non-glob) names of either polarity."""
        return replace(self, eager_if=self.eager_if | frozenset(eager_if), captured_if=self.captured_if | frozenset(captured_if))

    def matches(self, name: str, eager: bool) -> bool:
        """Is `name` a predicate whose true branch is eager (`eager`) or captured (not `eager`)?"""
        if name in (self.eager_if if eager else self.captured_if):
            return True
        return any(fnmatchcase(name, p) for p in self._globs[0 if eager else 1])

    def platform(self) -> "Guards":
        """Only the predicates the hardware decides (`is_hip`, `is_xpu`, `_is_cuda`, capability tests): a
        branch these rule out never runs on this machine at all, not just outside the graph."""
        def fixed(names: frozenset[str]) -> list[str]:
            return [n for n in names if n.lstrip("_") in PLATFORM_PREDICATES or n.lstrip("_").startswith("use_aiter")]
        return replace(Guards.of(fixed(self.eager_if), fixed(self.captured_if), self.capability), hardware_only=True)

    def with_aliases(self, statements: list[ast.AST], names: ImportMap) -> "Guards":
        """These guards plus variables that hold a guard's value (`capturing = get_is_capture_mode()`).

        A variable counts only when every assignment to it in `statements` is a guard of one polarity."""
        seen: dict[str, bool | None] = {}
        for stmt in statements:
            if not isinstance(stmt, (ast.Assign, ast.AnnAssign)) or stmt.value is None:
                continue
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                if not isinstance(target, ast.Name):
                    continue
                polarity = True if _eager_when(stmt.value, True, self, names) else (
                    False if _eager_when(stmt.value, False, self, names) else None)
                previous = seen.get(target.id, polarity)
                seen[target.id] = polarity if previous == polarity else None
        eager = {n for n, p in seen.items() if p is True}
        captured = {n for n, p in seen.items() if p is False}
        if not eager and not captured:
            return self
        return self.adding(eager, captured)


def with_predicates(guards: Guards, tree: ast.Module, names: ImportMap,
                    body_of: Callable[[ast.AST], list[ast.AST]] | None = None) -> Guards:
    """These guards plus the module's own predicate functions built from them: a function or method
    whose every `return` is eager when true (`return self.enabled and mode.is_extend()`) is an
    eager-only predicate itself, so `if self._can_run_tbo(batch):` is an eager branch. Same-named
    functions must agree."""
    verdicts: dict[str, set[bool | None]] = {}
    for func in _module_functions(tree.body):
        returned = [n.value for n in (body_of(func) if body_of else walk_body(func.body)) if isinstance(n, ast.Return)]
        verdict = None
        if returned and all(v is not None for v in returned):
            for polarity in (True, False):
                if all(_eager_when(v, polarity, guards, names) for v in returned):
                    verdict = polarity
        verdicts.setdefault(func.name, set()).add(verdict)
    eager = {name for name, seen in verdicts.items() if seen == {True}}
    captured = {name for name, seen in verdicts.items() if seen == {False}}
    if not eager and not captured:
        return guards
    return guards.adding(eager, captured)


def _module_functions(body: list[ast.stmt]):
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield stmt
        elif isinstance(stmt, ast.ClassDef):
            yield from (s for s in stmt.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)))


def _named(test: ast.AST, guards: Guards, eager: bool) -> bool:
    if isinstance(test, ast.Call):
        test = test.func
        if isinstance(test, ast.Attribute) and test.attr in ENV_READS and not guards.matches(test.attr, eager):
            test = test.value
    if isinstance(test, ast.Name):
        return guards.matches(test.id, eager)
    if isinstance(test, ast.Attribute):
        return guards.matches(test.attr, eager)
    return False


EQUALITY = (ast.Eq, ast.Is)
INEQUALITY = (ast.NotEq, ast.IsNot)


def _eager_when(test: ast.AST, truth: bool, guards: Guards, names: ImportMap) -> bool:
    """Does `test` evaluating to `truth` mean this code is eager (not inside a graph)?"""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _eager_when(test.operand, not truth, guards, names)
    if isinstance(test, ast.BoolOp):  # `a and b` true needs both; `a or b` false needs both
        parts = [_eager_when(v, truth, guards, names) for v in test.values]
        either = isinstance(test.op, ast.And) == truth
        return any(parts) if either else all(parts)
    if not truth and isinstance(test, ast.Call) and names.resolve(test.func) in NO_CUDA_WHEN_FALSE:
        return not (guards.hardware_only and names.resolve(test.func) == CAPTURING)
    if guards.capability is not None and isinstance(test, ast.Call):
        holds = capability_test(test, guards.capability)
        if holds is not None:
            return truth != holds  # the branch this GPU never takes is never captured on it
    if isinstance(test, ast.Compare):
        return _compare_eager(test, truth, guards)
    return _named(test, guards, eager=truth)


_SM_SUPPORTED = re.compile(r"is_sm(\d+)_supported")


def _capability_arg(call: ast.Call) -> int | None:
    """`90`, `(9, 0)` or `9.0`-style arguments as the capability times ten."""
    if len(call.args) != 1:
        return None
    arg = call.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, int) and not isinstance(arg.value, bool):
        return arg.value
    if (isinstance(arg, ast.Tuple) and len(arg.elts) == 2
            and all(isinstance(e, ast.Constant) and isinstance(e.value, int) for e in arg.elts)):
        return arg.elts[0].value * 10 + arg.elts[1].value
    return None


def capability_test(call: ast.Call, capability: int) -> bool | None:
    """The value of an engine's GPU-capability test on a GPU of `capability`, or None if it is not one:
    vLLM's `has_device_capability(80)` (at least), `is_device_capability(90)` (exactly),
    `is_device_capability_family(100)` (same major), SGLang's `is_sm90_supported()`, `is_blackwell()`."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    wanted = _capability_arg(call)
    if name == "has_device_capability" and wanted is not None:
        return capability >= wanted
    if name == "is_device_capability" and wanted is not None:
        return capability == wanted
    if name == "is_device_capability_family" and wanted is not None:
        return capability // 10 == wanted // 10
    if not call.args and (match := _SM_SUPPORTED.fullmatch(name)):
        return capability >= int(match.group(1))
    if not call.args and name in ("is_blackwell", "is_blackwell_supported"):
        return capability >= 100
    if not call.args and name == "is_hopper":
        return capability // 10 == 9
    return None


def _compare_eager(test: ast.Compare, truth: bool, guards: Guards) -> bool:
    """`if VERBOSE > 1:`, `if meta.num_prefills > 0:`, `if meta is None:`, `if mode == ForwardMode.EXTEND:`,
    `if "capture_inputs" not in kwargs:` (a key present or absent, like a name true or false)."""
    if (len(test.ops) == 1 and isinstance(test.ops[0], (ast.In, ast.NotIn))
            and isinstance(test.left, ast.Constant) and isinstance(test.left.value, str)):
        return guards.matches(test.left.value, eager=isinstance(test.ops[0], ast.In) == truth)
    if len(test.ops) == 1 and isinstance(test.ops[0], EQUALITY + INEQUALITY):
        member = test.comparators[0]
        if not isinstance(member, ast.Constant):  # compared with a named value: that name decides
            positive = isinstance(test.ops[0], EQUALITY) == truth
            if _named(member, guards, eager=positive):
                return True
    flipped = _says_absent(test) == truth
    return _named(test.left, guards, eager=not flipped)


def _says_absent(test: ast.Compare) -> bool:
    """`x is None`, `x == 0`, `x == False`: true when the named thing is absent (polarity flips)."""
    if len(test.ops) != 1 or not isinstance(test.ops[0], (ast.Is, ast.Eq)):
        return False
    right = test.comparators[0]
    return isinstance(right, ast.Constant) and right.value in (None, 0, False)


def memo_state(test: ast.AST) -> str | None:
    """The state a one-time-init test guards: `self.x is None`, `key not in self.cache`, `not self.ready`,
    `not getattr(self, "_compiled", False)`; with other conditions (`ep and self.map_gpu is None`) the
    block still runs at most once, since it sets the state."""
    if isinstance(test, ast.BoolOp):
        return next((s for s in map(memo_state, test.values) if s), None)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        operand = test.operand
        if isinstance(operand, ast.Call) and isinstance(operand.func, ast.Name) and operand.func.id == "hasattr":
            return "hasattr"
        if (isinstance(operand, ast.Call) and isinstance(operand.func, ast.Name) and operand.func.id == "getattr"
                and len(operand.args) >= 2 and isinstance(operand.args[1], ast.Constant)):
            return f"{ast.unparse(operand.args[0])}.{operand.args[1].value}"
        return ast.unparse(operand) if isinstance(operand, (ast.Name, ast.Attribute)) else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op, right = test.ops[0], test.comparators[0]
        if isinstance(op, ast.Is) and isinstance(right, ast.Constant) and right.value is None:
            return ast.unparse(test.left)
        if isinstance(op, ast.NotIn):
            return ast.unparse(right)
    return None


def _identity_pair(test: ast.AST, same: bool) -> tuple[ast.Attribute, ast.AST] | None:
    """(self.x, y) of `self.x is y` (`same`) or `self.x is not y` (not `same`)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Is if same else ast.IsNot)):
        return None
    left, right = test.left, test.comparators[0]
    if self_attr(left) and isinstance(right, (ast.Name, ast.Attribute)):
        return left, right
    return None


def identity_flags(body_nodes: list[ast.AST]) -> dict[str, list[tuple[int, tuple[ast.Attribute, ast.AST] | None]]]:
    """Every assignment of each plain local, in line order, with the `self.x is y` it holds if any
    (`use_fused = self._norm is norm and ...`): a test reads the last one above it."""
    flags: dict[str, list] = {}
    for node in body_nodes:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = node.value
            parts = value.values if isinstance(value, ast.BoolOp) and isinstance(value.op, ast.And) else [value]
            pair = next((p for p in (_identity_pair(part, True) for part in parts) if p), None)
            flags.setdefault(node.targets[0].id, []).append((node.lineno, pair))
    return {name: sorted(seen, key=lambda item: item[0]) for name, seen in flags.items()
            if any(pair for _, pair in seen)}


def _changed_object(test: ast.AST, flags: dict):
    """The (self.x, y) pair a test is true for when y is no longer self.x: `self.x is not y`, `not same`,
    `not same and ...` where `same = self.x is y and ...` is the last assignment above the test."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        test = test.values[0]
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and isinstance(test.operand, ast.Name):
        above = [pair for line, pair in flags.get(test.operand.id, []) if line < test.lineno]
        return above[-1] if above else None
    return _identity_pair(test, False)


def _rebinds_on_change(test: ast.AST, body: list[ast.stmt], flags: dict) -> bool:
    """`if self.norm is not norm: self.norm = norm` (or `self.set_norm(norm)`, or behind a flag holding
    `self.norm is norm`): runs when the object handed in changes, which a steady decode step never does,
    so its body is one-time set-up like a memo."""
    pair = _changed_object(test, flags)
    if pair is None:
        return False
    state, handed_in = (ast.unparse(side) for side in pair)
    for node in (n for stmt in body for n in ast.walk(stmt)):
        if isinstance(node, ast.Assign) and any(ast.unparse(t) == state for t in node.targets):
            return True
        if isinstance(node, ast.Call) and self_attr(node.func) and any(ast.unparse(arg) == handed_in for arg in node.args):
            return True
    return False


def _flag_writes(body_nodes: list[ast.AST]):
    """(attribute, set false?) for each `self.x = ...` of a function."""
    for node in body_nodes:
        if isinstance(node, ast.Assign):
            falsy = isinstance(node.value, ast.Constant) and node.value.value in (False, None, 0)
            yield from ((attr, falsy) for target in node.targets if (attr := self_attr(target)))


@dataclass(frozen=True)
class OneTimeFlags:
    """Per class: the `self` flags each method sets false (`self.calculate_kv_scales = False`), less those a
    method other than `__init__` sets to anything else (re-armed flags run again)."""

    cleared_by: dict[str, frozenset[str]] = field(default_factory=dict)
    rearmed: frozenset[str] = frozenset()

    @classmethod
    def of(cls, methods: dict[str, list[ast.AST]]) -> "OneTimeFlags":
        rearmed = frozenset(attr for name, nodes in methods.items() if name != "__init__"
                            for attr, falsy in _flag_writes(nodes) if not falsy)
        return cls({name: frozenset(attr for attr, falsy in _flag_writes(nodes) if falsy and attr not in rearmed)
                    for name, nodes in methods.items()}, rearmed)

    def clears(self, test: ast.AST, body: list[ast.stmt]) -> bool:
        """`if self.calculate_kv_scales and ...: self.calc_kv_scales(k, v)` where the block, or a method it
        calls, sets that flag false: the block runs on the first step that takes it and never again (vLLM's
        kv-scale calibration), unlike `if self.use_x:`, a setting no step changes."""
        parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
        flags = {attr for part in parts if (attr := self_attr(part))} - self.rearmed
        nodes = [node for stmt in body for node in ast.walk(stmt)]
        cleared = {attr for attr, falsy in _flag_writes(nodes) if falsy}
        for node in nodes:
            if isinstance(node, ast.Call) and (method := self_attr(node.func)):
                cleared |= self.cleared_by.get(method, frozenset())
        return bool(flags & cleared)


def _cached_state(test: ast.AST) -> str | None:
    """The state a cache-hit test reads: `if self.x is not None:`, `if key in self.cache:`,
    `if cache.device == q.device:` (already converted), maybe `and ...`."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return _cached_state(test.values[0])
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op, left, right = test.ops[0], test.left, test.comparators[0]
        if isinstance(op, ast.IsNot) and isinstance(right, ast.Constant) and right.value is None:
            return ast.unparse(left)
        if isinstance(op, ast.In):
            return ast.unparse(right)
        if isinstance(op, ast.Eq) and isinstance(left, ast.Attribute) and left.attr in ("device", "dtype", "shape"):
            return ast.unparse(left.value)
    return None


def _assigned_names(body_nodes: list[ast.AST]):
    """Targets that bind local names: `x = ...`, `for x in ...`, `with ... as x`, `x += 1`."""
    for node in body_nodes:
        if isinstance(node, ast.Assign):
            yield from node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor)):
            yield node.target
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            yield node.optional_vars
        elif isinstance(node, ast.NamedExpr):
            yield node.target


def _assigned(statements: list[ast.stmt]):
    """Every assignment target under `statements` (`=`, `+=`, annotated)."""
    for stmt in statements:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Assign):
                yield from node.targets
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                yield node.target


def _outlives(node: ast.AST, global_names: set[str], local_names: set[str]) -> bool:
    """`self.x[k]`, `GLOBAL.y`, `_module_cache[k]`: held by something that outlives the call, not by one of
    `local_names` (the function's own locals; with its parameters where a per-step object must not count)."""
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return isinstance(node, ast.Name) and (node.id == "self" or node.id in global_names or node.id not in local_names)


def _stores_result(statements: list[ast.stmt], global_names: set[str], local_names: set[str]) -> bool:
    """Assigns an attribute or item of something not in `local_names`, or a declared global: the block
    keeps what it computed (a cache made in the call does not: its block runs on every call)."""
    return any((isinstance(target, (ast.Attribute, ast.Subscript)) and _outlives(target, global_names, local_names))
               or (isinstance(target, ast.Name) and target.id in global_names) for target in _assigned(statements))


FILLING_METHODS = {"append", "extend", "insert", "update", "add"}  # calls that fill a container in place


def _stores_state(statements: list[ast.stmt], global_names: set[str], local_names: set[str]) -> bool:
    """Assigns `self.x`, `self.cache[k]`, a declared global or an item of a module-level container
    (`_kernel_cache[key] = compiled`), or fills a container held there (`self.seen.add(key)`): state
    that outlives the call."""
    if _stores_result(statements, global_names, local_names):
        return True
    return any(isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in FILLING_METHODS
               and _outlives(node.func.value, global_names, local_names) for stmt in statements for node in ast.walk(stmt))


def _builds_tensors(statements: list[ast.stmt], names: ImportMap) -> bool:
    """Calls torch or a tensor method: the one-time work GR603 is about (not a Python dict of ints)."""
    for stmt in statements:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call):
                if isinstance(node.func, ast.Attribute) and node.func.attr in TENSOR_METHODS:
                    return True
                if is_tensor_callee(names.resolve(node.func) or ""):
                    return True
    return False


def _exits(statements: list[ast.stmt]) -> bool:
    return bool(statements) and isinstance(statements[-1], EXITS)


@dataclass
class Regions:
    """What the index keeps of one function's control flow."""

    excluded: list[tuple[int, int]] = field(default_factory=list)  # lines that never run in a graph
    memo: list[tuple[int, str]] = field(default_factory=list)  # (line of the one-time test, state it guards)
    # operands evaluated only eagerly: `B` in `if meta is not None and B:` when `meta` is eager-if
    cold_spans: list[tuple[int, int, int, int]] = field(default_factory=list)


def function_regions(func: ast.FunctionDef | ast.AsyncFunctionDef, guards: Guards, names: ImportMap,
                     global_names: set[str], body_nodes: list[ast.AST],
                     one_time: OneTimeFlags = OneTimeFlags()) -> Regions:
    """`one_time`: the one-time flags of the function's class."""
    regions = Regions()
    arguments = func.args
    parameters = {a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]}
    assigned_locals = {name for target in _assigned_names(body_nodes) for name in _names(target)}
    flags = identity_flags(body_nodes)

    def cold(statements: list[ast.stmt]) -> None:
        block = _block_range(statements)
        if block:
            regions.excluded.append(block)

    def visit(statements: list[ast.stmt]) -> None:
        for position, stmt in enumerate(statements):
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(stmt, ast.If):
                rest = statements[position + 1:]
                if _eager_when(stmt.test, True, guards, names):
                    cold(stmt.body)
                elif _eager_when(stmt.test, False, guards, names):
                    cold(stmt.orelse)
                    if _exits(stmt.body) and not stmt.orelse:  # `if capturing: return ...`: the rest is eager
                        cold(rest)
                        visit(stmt.body)
                        return
                elif ((_rebinds_on_change(stmt.test, stmt.body, flags) or one_time.clears(stmt.test, stmt.body))
                      and not stmt.orelse):
                    cold(stmt.body)
                elif (state := memo_state(stmt.test)) and _stores_result(stmt.body, global_names, assigned_locals):
                    cold(stmt.body)
                    if _builds_tensors(stmt.body, names):
                        regions.memo.append((stmt.test.lineno, state))
                elif ((state := _cached_state(stmt.test)) not in (None, *parameters) and _exits(stmt.body)
                      and not stmt.orelse and _stores_state(rest, global_names, assigned_locals | parameters)):  # `if cached is not None: return cached`
                    cold(rest)
                    if _builds_tensors(rest, names):
                        regions.memo.append((stmt.test.lineno, state))
                    return
            for field_name in ("body", "orelse", "finalbody"):
                visit(getattr(stmt, field_name, []) or [])
            for handler in getattr(stmt, "handlers", []) or []:
                cold(handler.body)
            for case in getattr(stmt, "cases", []) or []:
                visit(case.body)

    visit(func.body)
    regions.cold_spans = _short_circuited(body_nodes, guards, names)
    return regions


def never_run(statements: list[ast.stmt], platform: Guards, names: ImportMap) -> list[tuple[int, int]]:
    """Line ranges of branches this machine never takes (`if current_platform.is_xpu(): ...`), given
    `Guards.platform()`: what is built there is never built here."""
    ranges: list[tuple[int, int]] = []
    for stmt in statements:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        blocks = [getattr(stmt, name, []) or [] for name in ("body", "orelse", "finalbody")]
        blocks += [handler.body for handler in getattr(stmt, "handlers", []) or []]
        if isinstance(stmt, ast.If):
            if _eager_when(stmt.test, True, platform, names):
                ranges.append(_block_range(stmt.body))
                blocks = [stmt.orelse]
            elif stmt.orelse and _eager_when(stmt.test, False, platform, names):
                ranges.append(_block_range(stmt.orelse))
                blocks = [stmt.body]
        for block in blocks:
            ranges += never_run(block, platform, names)
    return [r for r in ranges if r]


def _short_circuited(body_nodes: list[ast.AST], guards: Guards, names: ImportMap) -> list[tuple[int, int, int, int]]:
    """Spans of the operands after `A and` where A true means eager (after `A or`: A false)."""
    spans = []
    for node in body_nodes:
        if isinstance(node, ast.BoolOp):
            truth = isinstance(node.op, ast.And)
            for position, value in enumerate(node.values[:-1]):
                if _eager_when(value, truth, guards, names):
                    for later in node.values[position + 1:]:
                        spans.append((later.lineno, later.col_offset, later.end_lineno or later.lineno,
                                      later.end_col_offset or 0))
                    break
    return spans


def _empty_literal(node: ast.AST) -> bool:
    return ((isinstance(node, ast.Constant) and not node.value)
            or (isinstance(node, (ast.List, ast.Tuple, ast.Set)) and not node.elts)
            or (isinstance(node, ast.Dict) and not node.keys))


def returns_none(value: ast.AST | None) -> bool:
    """`return`, `return None`, `return None, None`."""
    if value is None or (isinstance(value, ast.Constant) and value.value is None):
        return True
    return isinstance(value, ast.Tuple) and all(returns_none(element) for element in value.elts)


def _names(target: ast.AST) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [name for element in target.elts for name in _names(element)]
    return []


def _set_or_filled(node: ast.AST, none_methods: set[str]) -> list[tuple[str, bool, bool]]:
    """(name, stays falsy, takes an eager value) for each name this statement gives a value: `x = False`,
    `x = []`, `x.append(v)`, `a, b = self.collect(batch)` where `collect` returns None when captured (and
    its other values on eager lines)."""
    if isinstance(node, ast.Assign):
        value = node.value
        from_none_method = isinstance(value, ast.Call) and self_attr(value.func) in none_methods
        falsy = from_none_method or _empty_literal(value)
        filled = [(t.value.id, False, False) for t in node.targets  # `pad[:] = values` fills `pad`
                  if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name)]
        return [(name, falsy, from_none_method) for target in node.targets for name in _names(target)] + filled
    if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
        return [(node.target.id, False, False)]
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in FILLING_METHODS
            and isinstance(node.func.value, ast.Name)):
        return [(node.func.value.id, False, False)]
    return []


def falsy_when_captured(body_nodes: list[ast.AST], excluded: list[tuple[int, int]],
                        none_methods: set[str] = frozenset(), global_names: set[str] = frozenset()) -> set[str]:
    """Local variables given a value only on eager lines and False/None/0/empty on every captured one
    (`if not capturing: any_visual = mask.any() else: any_visual = False`; `pad = []` filled only under
    `if batch.mm_inputs is not None:`): their true branch is eager, and a copy of them copies nothing.
    A declared global keeps the value an earlier call gave it, so it is never one of them."""
    verdict: dict[str, tuple[bool, bool]] = {}  # name -> (every hot value falsy, some value on a cold line)
    for node in body_nodes:
        if not isinstance(node, (ast.Assign, ast.AugAssign, ast.Call)):
            continue
        for name, stays_falsy, eager_value in _set_or_filled(node, none_methods):
            falsy, eager = verdict.get(name, (True, False))
            if within(node.lineno, excluded):
                verdict[name] = (falsy, True)
            else:
                verdict[name] = (falsy and stays_falsy, eager or eager_value)
    return {name for name, (falsy, eager) in verdict.items() if falsy and eager and name not in global_names}


def capture_bodies(body_nodes: list[ast.AST], names: ImportMap) -> list[tuple[int, int]]:
    bodies = []
    for node in body_nodes:
        if isinstance(node, (ast.With, ast.AsyncWith)):
            for item in node.items:
                expr = item.context_expr
                if isinstance(expr, ast.Call) and names.resolve(expr.func) == GRAPH_CONTEXT:
                    block = _block_range(node.body)
                    if block:
                        bodies.append(block)
    return bodies
