"""Eager-only predicates: the tests whose one branch never runs inside a graph.

Configured names (`eager-if`: `if VERBOSE:`, `if forward_mode.is_extend():`; `captured-if`: the `else`
of `if forward_mode.is_decode():`), the engines' capability tests evaluated for the GPU the graphs run
on (`gpu-capability`), `torch.cuda.is_current_stream_capturing()`, and the module's own predicate
functions built from them. `Guards.platform()` keeps only what the hardware decides.
"""

from __future__ import annotations

import ast
import fnmatch
import re
from typing import Callable
from dataclasses import dataclass, field, replace

from graphready.lint.scope.assume import Facts
from graphready.lint.scope.astwalk import BodyNodes, walk_body
from graphready.lint.scope.resolve import ImportMap, callee_name

CAPTURING = "torch.cuda.is_current_stream_capturing"
NO_CUDA_WHEN_FALSE = {CAPTURING, "torch.cuda.is_available"}  # false: not capturing, or no GPU at all
ENV_READS = {"get", "value", "is_set", "get_bool"}  # `envs.DEBUG_X.get()` reads the switch DEBUG_X
ALIAS_ROUNDS = 3  # variables built from variables built from a guard: deeper chains are not followed
PLATFORM_PREDICATES = {"is_hip", "is_rocm", "is_xpu", "is_cpu", "is_npu", "is_hpu", "is_mps", "is_tpu", "is_cuda"}


def is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


@dataclass(frozen=True)
class Guards:
    """Eager-only predicates: names (or globs: `SGLANG_TRACE_*`) whose true (`eager_if`) or false
    (`captured_if`) branch never runs inside a graph. A name matches a variable, an attribute, a call
    or an enum member compared against: `VERBOSE`, `envs.DEBUG.get()`, `mode.is_extend()`,
    `mode == ForwardMode.EXTEND`."""

    eager_if: frozenset[str] = frozenset()
    captured_if: frozenset[str] = frozenset()
    # the globs of each polarity as one pattern (None: no globs); guards are matched ~100k times a tree
    _globs: tuple[re.Pattern | None, re.Pattern | None] = field(default=(None, None), compare=False, repr=False)
    capability: int | None = None  # `gpu-capability`: the GPU the graphs run on, for capability tests
    hardware_only: bool = False  # `platform()`: capture state is not a property of the machine
    # `assume-true` / `assume-false` (scope/assume.py): a branch they rule out never runs
    assumed: Facts = field(default_factory=Facts, compare=False, repr=False)

    @classmethod
    def of(cls, eager_if, captured_if, capability: int | None = None, assumed: Facts | None = None) -> "Guards":
        eager, captured = frozenset(eager_if), frozenset(captured_if)
        globs = (_one_pattern(p for p in eager if is_glob(p)), _one_pattern(p for p in captured if is_glob(p)))
        return cls(eager, captured, globs, capability, assumed=assumed or Facts())

    def adding(self, eager_if=frozenset(), captured_if=frozenset()) -> "Guards":
        """These guards plus plain (non-glob) names of either polarity."""
        return replace(self, eager_if=self.eager_if | frozenset(eager_if), captured_if=self.captured_if | frozenset(captured_if))

    def matches(self, name: str, eager: bool) -> bool:
        """Is `name` a predicate whose true branch is eager (`eager`) or captured (not `eager`)?"""
        if name in (self.eager_if if eager else self.captured_if):
            return True
        globs = self._globs[0 if eager else 1]
        return globs is not None and globs.match(name) is not None

    def platform(self) -> "Guards":
        """Only the predicates the hardware decides (`is_hip`, `is_xpu`, `_is_cuda`, capability tests): a
        branch these rule out never runs on this machine at all, not just outside the graph."""
        def fixed(names: frozenset[str]) -> list[str]:
            return [n for n in names if n.lstrip("_") in PLATFORM_PREDICATES or n.lstrip("_").startswith("use_aiter")]
        return replace(Guards.of(fixed(self.eager_if), fixed(self.captured_if), self.capability), hardware_only=True)

    def with_aliases(self, statements: list[ast.AST], names: ImportMap) -> "Guards":
        """These guards plus variables that hold a guard's value (`capturing = get_is_capture_mode()`).

        A variable counts only when every assignment to it in `statements` is a guard of one polarity; one built
        from another (`cg = bufs if capturing else None`, then `use_naive = cg is None and small`) counts too."""
        assignments = [(target.id, stmt.value) for stmt in statements
                       if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and stmt.value is not None
                       for target in (stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target])
                       if isinstance(target, ast.Name)]
        guards = self
        for _ in range(ALIAS_ROUNDS):
            seen: dict[str, bool | None] = {}
            for name, value in assignments:
                polarity = True if eager_when(value, True, guards, names) else (
                    False if eager_when(value, False, guards, names) else None)
                previous = seen.get(name, polarity)
                seen[name] = polarity if previous == polarity else None
            eager = {n for n, p in seen.items() if p is True}
            captured = {n for n, p in seen.items() if p is False}
            widened = self.adding(eager, captured)
            if widened == guards:
                break
            guards = widened
        return guards


def _one_pattern(globs) -> re.Pattern | None:
    """One regular expression that matches what any of the globs matches (as `fnmatchcase`)."""
    globs = sorted(globs)
    return re.compile("|".join(map(fnmatch.translate, globs))) if globs else None


def with_predicates(guards: Guards, tree: ast.Module, names: ImportMap,
                    body_of: Callable[[ast.AST], BodyNodes] | None = None) -> Guards:
    """These guards plus the module's own predicate functions built from them: a function or method
    whose every `return` is eager when true (`return self.enabled and mode.is_extend()`) is an
    eager-only predicate itself, so `if self._can_run_tbo(batch):` is an eager branch. Same-named
    functions must agree."""
    verdicts: dict[str, set[bool | None]] = {}
    for func in _module_functions(tree.body):
        returned = [n.value for n in (body_of(func) if body_of else walk_body(func.body)).of(ast.Return)]
        verdict = None
        if returned and all(v is not None for v in returned):
            for polarity in (True, False):
                if all(eager_when(v, polarity, guards, names) for v in returned):
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


def eager_when(test: ast.AST, truth: bool, guards: Guards, names: ImportMap) -> bool:
    """Does `test` evaluating to `truth` mean this code is eager (not inside a graph)?"""
    if isinstance(test, ast.NamedExpr):  # `if prefill_meta := attn_metadata.prefill_metadata:`
        test = test.value
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return eager_when(test.operand, not truth, guards, names)
    if isinstance(test, ast.IfExp) and (arm := none_arm(test)) is not None:
        # `bufs if capturing else None` (SGLang's LoRA MoE runner): set exactly when the test holds, taking the
        # other arm (a buffer, a table) for something that is not None
        return eager_when(test.test, truth == (arm == "orelse"), guards, names)
    if isinstance(test, ast.BoolOp):  # `a and b` true needs both; `a or b` false needs both
        parts = [eager_when(v, truth, guards, names) for v in test.values]
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
    name = callee_name(call.func)
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


def none_arm(test: ast.IfExp) -> str | None:
    """Which arm of `a if t else b` is a literal None ("body" or "orelse"), if exactly one is."""
    body, orelse = (isinstance(arm, ast.Constant) and arm.value is None for arm in (test.body, test.orelse))
    return None if body == orelse else ("body" if body else "orelse")


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
