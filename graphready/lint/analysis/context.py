"""What a rule sees while it visits one function: types, facts, hotness, and `report()`."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from graphready.lint.analysis.candidate import Candidate
from graphready.lint.analysis.cstwalk import Span
from graphready.lint.scope.index import FunctionInfo
from graphready.lint.inference.tensors import Facts, TensorEnv
from graphready.lint.inference.torchnames import LOCK_TYPES


class FileFacts(Facts):
    """Facts for one file, plus the class facts of the class being analysed."""

    def __init__(self, names):
        super().__init__(names)
        self.lock_names: set[str] = set()  # globals / self attrs holding a threading lock
        self.compiled_names: set[str] = set()  # globals / self attrs holding a cute.compile() result
        self.lazy_compiled: set[str] = set()  # self attrs holding a torch.compile() result
        self.multi_device = False  # the file handles several devices (set_device, cuda:N, device loops)
        self.one_gpu_per_process = False  # config: the engine's processes each drive one GPU
        self.containers: set[str] = set()  # globals / self attrs holding a list, dict, set or deque
        self.unwarmed: set[str] = set()  # hot functions first reached from a capture with no warm-up call
        self.warmed: set[str] = set()  # ... and from a capture after a warm-up call
        self.uncompiled: set[str] = set()  # hot functions torch.compile never traces (profile `not-compiled`)
        self.buffers: set[str] = set()  # self attrs declared persistent: register_buffer / register_parameter
        self.graph_inputs: set[str] = set()  # self attrs a capture body of the class reads
        self.replay_only: dict[str, list[str]] = {}  # metadata attr -> [replay prep, capture prep] (graphprep.py)
        self.frozen_attrs: dict[str, int] = {}  # self attr -> line where hot code mutates it
        self.frozen_globals: dict[str, int] = {}  # globals hot code re-binds
        self.stepped_globals: set[str] = set()  # ... from their old value: step counters
        self.autograd_functions: set[str] = set()  # dotted names of autograd.Function classes
        self.parameter_attrs: set[str] = set()  # attributes the project makes parameter tensors, on any object
        self.flashinfer_holders: set[str] = set()  # attributes of the file's classes holding FlashInfer wrappers

    def for_class(self) -> "FileFacts":
        """A copy for one class: module facts shared, class attributes still to be learned."""
        facts = FileFacts(self.names)
        facts.tensor_globals, facts.tensor_functions = self.tensor_globals, self.tensor_functions
        facts.pageable_functions, facts.captured_device_fields = self.pageable_functions, self.captured_device_fields
        facts.class_fields = self.class_fields
        facts.autograd_functions, facts.frozen_globals = self.autograd_functions, self.frozen_globals
        facts.stepped_globals = self.stepped_globals
        facts.parameter_attrs, facts.flashinfer_holders = self.parameter_attrs, self.flashinfer_holders
        facts.lock_names, facts.compiled_names = set(self.lock_names), set(self.compiled_names)
        facts.lazy_compiled = set(self.lazy_compiled)
        facts.containers = set(self.containers)
        facts.unwarmed, facts.warmed, facts.uncompiled = self.unwarmed, self.warmed, self.uncompiled
        facts.multi_device, facts.one_gpu_per_process = self.multi_device, self.one_gpu_per_process
        return facts

    def record_holder(self, name: str, callee: str) -> None:
        """Remember that global/attribute `name` holds what `callee(...)` returns, if it matters."""
        if callee in LOCK_TYPES:
            self.lock_names.add(name)
        elif callee.endswith("cute.compile"):
            self.compiled_names.add(name)
        elif callee == "torch.compile":
            self.lazy_compiled.add(name)


@dataclass
class Pending:
    """A rule hit whose position is computed later, in one pass for the whole statement."""

    rule: str
    scope: str
    node: cst.CSTNode
    message: str
    context: "RuleContext"
    severity: str | None = None


class RuleContext:
    def __init__(self, function: FunctionInfo, hot: bool, env: TensorEnv, facts: FileFacts):
        self.function = function
        self.hot = hot
        self.env = env
        self.facts = facts
        self.with_stack: list[list[str]] = []  # resolved context-manager names of enclosing `with`s
        self.pending: list[Pending] = []
        self._current_rule = ""
        self._current_scope = "hot"
        self._reported: set[tuple[str, int]] = set()

    def qualname(self, node: cst.CSTNode) -> str | None:
        return self.env.qualname(node)

    def is_hot_line(self, line: int) -> bool:
        return not self.function.excludes(line) and (self.hot or self.function.captures(line))

    def in_with(self, *names: str) -> bool:
        return any(name in names for frame in self.with_stack for name in frame)

    def report(self, node: cst.CSTNode, message: str, rule: str | None = None, severity: str | None = None) -> None:
        """Report `node`; `severity` only for a case milder than the rule's catalog default."""
        rule = rule or self._current_rule
        if (rule, id(node)) in self._reported:
            return
        self._reported.add((rule, id(node)))
        self.pending.append(Pending(rule, self._current_scope, node, message, self, severity))

    def candidate(self, hit: Pending, span: Span, line_offset: int) -> Candidate | None:
        line = span.line + line_offset
        message = hit.message
        if hit.scope in ("hot", "memo") and (not self.is_hot_line(line)
                                             or self.function.short_circuits(line, span.column)):
            return None
        if hit.scope == "memo":  # a one-time-init test the index recorded, with the state it guards
            state = dict(self.function.memo).get(line)
            if state is None:
                return None
            message = message.format(state=state)
        severity = hit.severity
        if hit.scope == "padded-rows":  # a partial refresh the index recorded (scope/padding.py), by its line
            found = next((row for row in self.function.padded_rows if row[0] == line), None)
            if found is None:
                return None
            _, message, severity = found
        return Candidate(hit.rule, line, span.column, span.end_line + line_offset, span.end_column,
                         message, self.function.key, severity or None)

    def activate(self, rule_code: str, scope: str) -> None:
        self._current_rule = rule_code
        self._current_scope = scope
