"""Line ranges inside a function that are not hot, and the bodies of graph captures.

Not hot: the eager-only branch of a configured predicate (`eager-if`: `if VERBOSE:`,
`if forward_mode.is_extend():`, `if mode == ForwardMode.EXTEND:`; `captured-if`: the `else` of
`if forward_mode.is_decode():`), the non-capturing branch of `torch.cuda.is_current_stream_capturing()`,
everything after an early exit taken when capturing (`if not x.is_cuda: ... return` is fine, but
`if get_is_capture_mode(): return ...` leaves the rest eager), `except` handlers (an exception inside
a capture invalidates it, so a handler never becomes part of a working graph), and memoized one-time
initialisation (an `if X is None:` / `if k not in cache:` / `if not self._ready:` block, or the rest of
a function after `if cached is not None: return cached`, that stores its result in a global, an
attribute or a dict that outlives the call; a block behind a `self` flag that it clears, as in
`if self.calculate_kv_scales: self.calc_kv_scales(k)`). Calls there do not make their callees hot and
no rule fires there. Separately, `never_run` finds the branches this machine never takes at all
(another platform's, a capability it lacks): what is built only there is never built, and
`absent_argument_regions` finds the fallbacks for an optional argument left out (`if k_scale is None:`),
which the hot walk makes cold where every hot caller passes that argument. `Regions.assumed` holds the
branches a configured fact rules out (`assume-true` / `assume-false`, scope/assume.py), apart from the
rest so the hot walk can count what each fact made cold.

A predicate can be named through a variable: `capturing = get_is_capture_mode()` or a module-level
`_VERIFY = envs.SGLANG_VERIFY.get()` makes `if not capturing:` / `if _VERIFY:` guards too.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from graphready.lint.scope.astwalk import BodyNodes
from graphready.lint.scope.attrtypes import self_attr
from graphready.lint.scope.guards import Guards, eager_when, none_arm
from graphready.lint.scope.resolve import ImportMap
from graphready.lint.inference.torchnames import GRAPH_CONTEXT, is_tensor_callee

TENSOR_METHODS = {"to", "cuda", "contiguous", "clone", "t", "float", "half", "bfloat16", "view", "reshape",
                  "new_zeros", "new_ones", "new_empty", "new_full", "new_tensor", "pin_memory"}
EXITS = (ast.Return, ast.Raise, ast.Continue, ast.Break)


def within(line: int, ranges: list[tuple[int, int]]) -> bool:
    """`line` falls in one of the inclusive (first, last) line ranges."""
    return any(start <= line <= end for start, end in ranges)


def _block_range(statements: list[ast.stmt]) -> tuple[int, int] | None:
    if not statements:
        return None
    return statements[0].lineno, max(s.end_lineno or s.lineno for s in statements)


def memo_state(test: ast.AST, kept: Callable[[str], bool]) -> str | None:
    """The state a one-time-init test guards: `self.x is None`, `key not in self.cache`, `not self.ready`,
    `not getattr(self, "_compiled", False)`; with other conditions (`ep and self.map_gpu is None`) the
    block still runs at most once, since it sets the state. Growth (`ws is None or ws.numel() < need`) is
    no one-time init: the block runs again whenever a step needs more. `kept`: whether the block sets a state
    (the first one it sets is the answer)."""
    if isinstance(test, ast.BoolOp):
        if isinstance(test.op, ast.Or) and any(map(size_test, test.values)):
            return None
        return next((s for s in (memo_state(value, kept) for value in test.values) if s), None)
    state = _tested_state(test)
    return state if state is not None and kept(state) else None


def _tested_state(test: ast.AST) -> str | None:
    """The state one comparison or negation of a one-time test reads (see `memo_state`)."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        operand = test.operand
        if (isinstance(operand, ast.Call) and isinstance(operand.func, ast.Name)
                and operand.func.id in ("hasattr", "getattr") and len(operand.args) >= 2):
            name = operand.args[1]  # `hasattr(self, "_w")` guards `self._w`
            attr = name.value if isinstance(name, ast.Constant) else f"<{ast.unparse(name)}>"
            return f"{ast.unparse(operand.args[0])}.{attr}"
        return ast.unparse(operand) if isinstance(operand, (ast.Name, ast.Attribute)) else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op, right = test.ops[0], test.comparators[0]
        if isinstance(op, ast.Is) and isinstance(right, ast.Constant) and right.value is None:
            return ast.unparse(test.left)
        if isinstance(op, ast.NotIn):
            return ast.unparse(right)
    return None


SIZE_METHODS = {"numel", "nelement", "size", "__len__"}


def size_read(node: ast.AST) -> ast.AST | None:
    """The object whose size `node` reads: `ws.numel()`, `ws.size(0)`, `ws.shape[0]`, `ws.nbytes`, `len(ws)`."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SIZE_METHODS:
        return node.func.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len" and node.args:
        return node.args[0]
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "shape":
        return node.value.value
    if isinstance(node, ast.Attribute) and node.attr == "nbytes":
        return node.value
    return None


def size_test(test: ast.AST) -> bool:
    """`ws.numel() < need`, `need > ws.shape[0]`: a test for whether something is too small."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False
    op, left, right = test.ops[0], test.left, test.comparators[0]
    return (isinstance(op, (ast.Lt, ast.LtE)) and size_read(left) is not None) or \
        (isinstance(op, (ast.Gt, ast.GtE)) and size_read(right) is not None)


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


def _flag_writes(assignments: list[ast.Assign]):
    """(attribute, set false?) for each `self.x = ...` among a function's assignments."""
    for node in assignments:
        falsy = isinstance(node.value, ast.Constant) and node.value.value in (False, None, 0)
        yield from ((attr, falsy) for target in node.targets if (attr := self_attr(target)))


@dataclass(frozen=True)
class OneTimeFlags:
    """Per class: the `self` flags each method sets false (`self.calculate_kv_scales = False`), less those a
    method other than `__init__` sets to anything else (re-armed flags run again)."""

    cleared_by: dict[str, frozenset[str]] = field(default_factory=dict)
    rearmed: frozenset[str] = frozenset()

    @classmethod
    def of(cls, methods: dict[str, BodyNodes]) -> "OneTimeFlags":
        rearmed = frozenset(attr for name, nodes in methods.items() if name != "__init__"
                            for attr, falsy in _flag_writes(nodes.of(ast.Assign)) if not falsy)
        return cls({name: frozenset(attr for attr, falsy in _flag_writes(nodes.of(ast.Assign))
                                    if falsy and attr not in rearmed)
                    for name, nodes in methods.items()}, rearmed)

    def clears(self, test: ast.AST, body: list[ast.stmt]) -> bool:
        """`if self.calculate_kv_scales and ...: self.calc_kv_scales(k, v)` where the block, or a method it
        calls, sets that flag false: the block runs on the first step that takes it and never again (vLLM's
        kv-scale calibration), unlike `if self.use_x:`, a setting no step changes."""
        parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
        flags = {attr for part in parts if (attr := self_attr(part))} - self.rearmed
        if not flags:  # most tests name no `self` flag: no need to walk the block (an `if` per nesting level)
            return False
        nodes = [node for stmt in body for node in ast.walk(stmt)]
        cleared = {attr for attr, falsy in _flag_writes([n for n in nodes if isinstance(n, ast.Assign)]) if falsy}
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
    """Every assignment target under `statements` (`=`, `+=`, annotated), each element of a tuple target apart."""
    for stmt in statements:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Assign):
                yield from _elements(node.targets)
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                yield node.target


def _elements(targets: list[ast.expr]):
    """`self.w, self.s = ...` as `self.w` and `self.s`; `*rest` as `rest`."""
    for target in targets:
        if isinstance(target, (ast.Tuple, ast.List)):
            yield from _elements(target.elts)
        else:
            yield target.value if isinstance(target, ast.Starred) else target


def _set_states(statements: list[ast.stmt]) -> set[str]:
    """What the statements set: each assignment target's container (`self.x`, `self.cache` for `self.cache[key] =
    ...`, each element of `self.x, self.y = ...`) and each container a method fills in place (`self.seen.add(key)`)."""
    return ({ast.unparse(_container(target)) for target in _assigned(statements)}
            | {ast.unparse(node.func.value) for stmt in statements for node in ast.walk(stmt)
               if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in FILLING_METHODS})


def _read_from(state: str) -> str:
    """The container a state is looked up in (`_CACHE.get(key)`, `self.cache[key]` -> the cache), else the state."""
    try:
        return ast.unparse(_container(ast.parse(state, mode="eval").body))
    except SyntaxError:  # `self.<name>`: a getattr test whose name is not a literal
        return state


def _container(node: ast.AST) -> ast.AST:
    """What `table.get(key)`, `table.pop(key, None)` or `table[key]` reads from; other expressions themselves."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "pop"):
        node = node.func.value
    while isinstance(node, ast.Subscript):
        node = node.value
    return node


def _sets_or_alias(statements: list[ast.stmt], body_nodes: list[ast.AST], state: str) -> bool:
    """The statements set the tested state, the table it is looked up in (`_CACHE.get(key) is None`), or what the
    local it names was read from (`_aliased`): what makes a block guarded by it run once. A block that sets other
    state runs on every call its test lets through: `if not inputs.is_dummy:` (lmdeploy's agent, a per-call flag)
    or `if next_token.item() in self.stop_tokens: return ...` (exllamav2's streaming generator, a lookup), and its
    code is hot."""
    states = _set_states(statements)
    return any(_read_from(held) in states for held in {state} | _aliased(state, body_nodes))


def _aliased(state: str, body_nodes: list[ast.AST]) -> set[str]:
    """What a local the test reads was read from: `cache = self._axis_map` -> `self._axis_map`, `cached =
    _compiled.get(key)`, `_compiled.pop(key, None)` or `_compiled[key]` -> `_compiled`, `cached = None if
    self._ref is None else self._ref()` (a weak reference) -> `self._ref` (a cache hit or a one-time test made
    through a local)."""
    return {ast.unparse(source) for node in body_nodes
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == state
            and isinstance(source := _container(_dereferenced(node.value)), (ast.Name, ast.Attribute))}


def _dereferenced(value: ast.AST) -> ast.AST:
    """The value a local takes when it is not None: the other arm of `None if ... else x` and the reference
    itself for a weak reference called (`self._ref()`)."""
    if isinstance(value, ast.IfExp) and (arm := none_arm(value)) is not None:
        value = value.orelse if arm == "body" else value.body
    if isinstance(value, ast.Call) and not value.args and not value.keywords and isinstance(value.func, (ast.Name, ast.Attribute)):
        value = value.func
    return value


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


def nested_blocks(stmt: ast.stmt) -> tuple[list[list[ast.stmt]], list[list[ast.stmt]]]:
    """The statement lists nested in `stmt`: its bodies (body, else, finally, match cases), then its
    `except` handlers' bodies apart."""
    blocks = [getattr(stmt, name, None) or [] for name in ("body", "orelse", "finalbody")]
    blocks += [case.body for case in getattr(stmt, "cases", None) or []]
    return blocks, [handler.body for handler in getattr(stmt, "handlers", None) or []]


def _exits(statements: list[ast.stmt]) -> bool:
    return bool(statements) and isinstance(statements[-1], EXITS)


@dataclass
class Regions:
    """What the index keeps of one function's control flow."""

    excluded: list[tuple[int, int]] = field(default_factory=list)  # lines that never run in a graph
    memo: list[tuple[int, str]] = field(default_factory=list)  # (line of the one-time test, state it guards)
    # operands evaluated only eagerly: `B` in `if meta is not None and B:` or `B if meta is not None else C`
    # when `meta` is eager-if
    cold_spans: list[tuple[int, int, int, int]] = field(default_factory=list)
    assumed: list[tuple[str, int, int]] = field(default_factory=list)  # (fact's label, lines it rules out)
    matched: list[str] = field(default_factory=list)  # the label of a fact, once per test here it names


def function_regions(func: ast.FunctionDef | ast.AsyncFunctionDef, guards: Guards, names: ImportMap,
                     global_names: set[str], body_nodes: list[ast.AST],
                     one_time: OneTimeFlags = OneTimeFlags()) -> Regions:
    """`one_time`: the one-time flags of the function's class."""
    regions = Regions()
    arguments = func.args
    parameters = {a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]}
    # worked out when a test first needs them: most functions have no test that does
    assigned_locals = functools.cache(
        lambda: {name for target in _assigned_names(body_nodes) for name in _names(target)})
    flags = functools.cache(lambda: identity_flags(body_nodes))

    def cold(statements: list[ast.stmt]) -> None:
        block = _block_range(statements)
        if block:
            regions.excluded.append(block)

    def ruled_out(label: str, statements: list[ast.stmt]) -> None:
        block = _block_range(statements)
        if block:
            regions.assumed.append((label, *block))

    facts = guards.assumed
    tracked = bool(facts.clauses)  # an entry of several tests: know which tests each block sits under

    def decided(test: ast.AST, given: frozenset) -> tuple[bool, str] | None:
        """The value configured facts give the test (a single-test fact, or one about several tests that
        one branch would contradict), with the fact's label."""
        known = facts.decide(test, regions.matched) if facts else None
        if known is None and tracked:
            for holds in (False, True):  # false where the body contradicts the facts, true where the else does
                if label := facts.contradicted(given | facts.literals(test, not holds)):
                    regions.matched.append(label)
                    return holds, label
        return known

    def visit(statements: list[ast.stmt], given: frozenset = frozenset()) -> None:
        """`given`: the tests (with their values) the statements sit under, when facts of several tests need them."""
        for position, stmt in enumerate(statements):
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(stmt, ast.If):
                rest = statements[position + 1:]
                known = decided(stmt.test, given)
                # a configured fact: the branch it rules out never runs; what is cold without it stays cold apart
                # (the walk without the facts, for --statistics, must see the code as a run without them does)
                if known is not None:
                    holds, label = known
                    ruled_out(label, stmt.orelse if holds else stmt.body)
                    if _exits(stmt.body if holds else stmt.orelse):  # `if fused: return out`: nor does the rest
                        ruled_out(label, rest)
                if eager_when(stmt.test, True, guards, names):
                    cold(stmt.body)
                elif eager_when(stmt.test, False, guards, names):
                    cold(stmt.orelse)
                    if _exits(stmt.body) and not stmt.orelse:  # `if capturing: return ...`: the rest is eager
                        cold(rest)
                        visit(stmt.body, given | facts.literals(stmt.test, True) if tracked else given)
                        return
                elif ((_rebinds_on_change(stmt.test, stmt.body, flags()) or one_time.clears(stmt.test, stmt.body))
                      and not stmt.orelse):
                    cold(stmt.body)
                elif ((state := memo_state(stmt.test, functools.partial(_sets_or_alias, stmt.body, body_nodes)))
                      and _stores_result(stmt.body, global_names, assigned_locals())):
                    cold(stmt.body)
                    if _builds_tensors(stmt.body, names):
                        regions.memo.append((stmt.test.lineno, state))
                elif ((state := _cached_state(stmt.test)) not in (None, *parameters) and _exits(stmt.body)
                      and not stmt.orelse and _stores_state(rest, global_names, assigned_locals() | parameters)
                      and _sets_or_alias(rest, body_nodes, state)):  # `if cached is not None: return cached`
                    cold(rest)
                    if _builds_tensors(rest, names):
                        regions.memo.append((stmt.test.lineno, state))
                    return
                if tracked:
                    visit(stmt.body, given | facts.literals(stmt.test, True))
                    visit(stmt.orelse, given | facts.literals(stmt.test, False))
                    continue
            blocks, handlers = nested_blocks(stmt)
            for block in blocks:
                visit(block, given)
            for block in handlers:
                cold(block)

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
        bodies, handlers = nested_blocks(stmt)
        blocks = bodies + handlers
        if isinstance(stmt, ast.If):
            if eager_when(stmt.test, True, platform, names):
                ranges.append(_block_range(stmt.body))
                blocks = [stmt.orelse]
            elif stmt.orelse and eager_when(stmt.test, False, platform, names):
                ranges.append(_block_range(stmt.orelse))
                blocks = [stmt.body]
        for block in blocks:
            ranges += never_run(block, platform, names)
    return [r for r in ranges if r]


def _none_test(test: ast.AST, optional: set[str]) -> tuple[list[str], bool] | None:
    """`([p], True)` for `p is None`, `([p], False)` for `p is not None`, where p is an optional parameter;
    `([p, q], True)` for `p is None or q is None` and `([p, q], False)` for `p is not None and q is not
    None` (a fallback that builds what either argument left out: `if kv_indices is None or plan is None:`)."""
    if isinstance(test, ast.BoolOp):
        tested = [_none_test(value, optional) for value in test.values]
        if all(t is not None for t in tested):
            polarity = {absent for _, absent in tested}
            if polarity == {isinstance(test.op, ast.Or)}:
                return [name for names, _ in tested for name in names], polarity.pop()
        return None
    if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name)
            and test.left.id in optional and isinstance(test.ops[0], (ast.Is, ast.IsNot))
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None):
        return [test.left.id], isinstance(test.ops[0], ast.Is)
    return None


def absent_argument_regions(func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[str, int, int]]:
    """Blocks that run only when the caller left out an argument that defaults to None: the body of
    `if scale is None:`, the `else` of `if scale is not None:`, and the rest of the block after
    `if scale is not None: return ...`. Whether they are hot depends on the callers (hotpath's
    `given_params`): where every hot caller passes the argument, they are a fallback the graph never takes.
    A block that runs when any of several arguments is left out (`if a is None or b is None:`) is named
    by all of them, comma-separated: it is a fallback only where the callers pass every one."""
    arguments = func.args
    positional = [*arguments.posonlyargs, *arguments.args]
    defaults = [None] * (len(positional) - len(arguments.defaults)) + list(arguments.defaults)
    pairs = [*zip(positional, defaults), *zip(arguments.kwonlyargs, arguments.kw_defaults)]
    optional = {arg.arg for arg, default in pairs
                if isinstance(default, ast.Constant) and default.value is None}
    regions: list[tuple[str, int, int]] = []
    if not optional:
        return regions

    def add(name: str, statements: list[ast.stmt]) -> None:
        block = _block_range(statements)
        if block:
            regions.append((name, *block))

    def visit(statements: list[ast.stmt]) -> None:
        for position, stmt in enumerate(statements):
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if isinstance(stmt, ast.If) and (tested := _none_test(stmt.test, optional)):
                name, absent = ",".join(tested[0]), tested[1]
                if absent:
                    add(name, stmt.body)
                else:
                    add(name, stmt.orelse)
                    if _exits(stmt.body) and not stmt.orelse:
                        add(name, statements[position + 1:])
            blocks, handlers = nested_blocks(stmt)
            for block in blocks + handlers:
                visit(block)

    visit(func.body)
    return regions


def _span(node: ast.AST) -> tuple[int, int, int, int]:
    return node.lineno, node.col_offset, node.end_lineno or node.lineno, node.end_col_offset or 0


def _short_circuited(body_nodes: list[ast.AST], guards: Guards, names: ImportMap) -> list[tuple[int, int, int, int]]:
    """Spans of the operands after `A and` where A true means eager (after `A or`: A false), and the branch
    of `B if A else C` that an eager-only A picks (`sum(x.tolist()) if meta.prefill_size is not None else 0`)."""
    spans = []
    for node in body_nodes:
        if isinstance(node, ast.BoolOp):
            truth = isinstance(node.op, ast.And)
            for position, value in enumerate(node.values[:-1]):
                if eager_when(value, truth, guards, names):
                    spans += [_span(later) for later in node.values[position + 1:]]
                    break
        elif isinstance(node, ast.IfExp):
            if eager_when(node.test, True, guards, names):
                spans.append(_span(node.body))
            elif eager_when(node.test, False, guards, names):
                spans.append(_span(node.orelse))
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
    if not excluded and not none_methods:  # no cold line, no method returning None when captured: none are
        return set()
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


def capture_bodies(body_nodes: BodyNodes, names: ImportMap) -> list[tuple[int, int]]:
    bodies = []
    for node in body_nodes.of(ast.With, ast.AsyncWith):
        for item in node.items:
            expr = item.context_expr
            if isinstance(expr, ast.Call) and names.resolve(expr.func) == GRAPH_CONTEXT:
                block = _block_range(node.body)
                if block:
                    bodies.append(block)
    return bodies
