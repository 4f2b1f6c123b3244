"""GD601 compile-skipped-cudagraphs, GD602 compile-graph-break, and the replay check of a unit that
`torch.compile(mode="reduce-overhead")` graphs by itself.

The compiler says why it skipped CUDA graphs ("skipping cudagraphs due to ...") and where each
graph break is through its artifact loggers (`cudagraphs`, `perf_hints` in older releases,
`graph_breaks`), which are off unless asked for. While a unit warms up (its compile), the watch
turns those loggers on, keeps their records to itself (nothing is printed) and reads the user
line from each message: a graph break names it ("... in user code at FILE:LINE"), a skip reason
carries the stack of the FX node it is about ('File "...", line N'). The compiler's counters
(`torch._dynamo.utils.counters`) back the logs up: a skip or break that was counted but not logged
is still a finding, at the unit's callable.

A reduce-overhead unit is not captured again by the harness (a capture around the compiler's own
graphs nests them): its calls after warm-up are the compiler's graph replays, compared with the
original Python callable on the same inputs and state.
"""

from __future__ import annotations

import functools
import logging
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from graphready.findings import Severity
from graphready.harness.checks.user_code import is_user_code
from graphready.harness.frames import Location, relative_path

ARTIFACTS = ("graph_breaks", "cudagraphs", "perf_hints")
_BREAK_AT = re.compile(r"in user code at (?P<file>.+?):(?P<line>\d+)\s*$", re.MULTILINE)
_BREAK_REASON = re.compile(r"Graph Break Reason:\s*(?P<reason>[^\n]+)(?:\n\s*)*(?P<detail>[^\n]*)")
_SKIP = re.compile(r"skipping cudagraphs due to (?P<reason>.+?)(?:\.?\s*Found from|\n|$)", re.DOTALL)
_STACK_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')


@dataclass(frozen=True)
class CompileFinding:
    rule: str
    message: str
    location: Location | None
    severity: Severity = Severity.WARNING


def graph_break_finding(text: str, root: Path | None, sites: dict[tuple[str, int], Location] | None = None,
                        ) -> CompileFinding | None:
    """GD602 from one `graph_breaks` log message (None if the message is not a graph break).

    The compiler's "user code" is whatever it traced, torch's own modules included (a buffer re-registered
    in `forward` breaks inside `Module.register_buffer`): the finding goes to the innermost user frame of
    the message's stack instead, or of an earlier message about the same site (`sites`, filled here) when
    the compiler suppressed a repeated stack; with neither, to the unit's callable (location None)."""
    where = _BREAK_AT.search(text.splitlines()[0] if text else "")
    if where is None:
        return None
    site = (where.group("file"), int(where.group("line")))
    if is_user_code(site[0]):
        location = Location(relative_path(site[0], root), site[1])
    else:
        frames = [m for m in _STACK_FRAME.finditer(text) if is_user_code(m.group("file"))]
        known = (sites or {}).get(site)
        location = Location(relative_path(frames[-1].group("file"), root), int(frames[-1].group("line"))) if frames \
            else known
        if location is not None and sites is not None:
            sites.setdefault(site, location)
    reason = _BREAK_REASON.search(text)
    why = "the compiler cannot trace this line"
    if reason:  # a reason ending in ':' is a heading; its first detail line says what happened
        why = reason.group("reason").strip()
        if why.endswith(":") and reason.group("detail").strip():
            why = f"{why} {reason.group('detail').strip()}"
    return CompileFinding(
        "GD602",
        f"torch.compile breaks the graph here: {why}; the code around it runs as separate graphs with "
        "Python in between (under reduce-overhead, separately captured CUDA graphs); make the line "
        "traceable or move it out of the step",
        location,
    )


def cudagraph_skip_finding(text: str, root: Path | None) -> CompileFinding | None:
    """GD601 from one "skipping cudagraphs due to ..." message, at the innermost user frame it names."""
    skip = _SKIP.search(text)
    if skip is None:
        return None
    frames = [m for m in _STACK_FRAME.finditer(text) if is_user_code(m.group("file"))]
    location = None
    if frames:
        last = frames[-1]
        location = Location(relative_path(last.group("file"), root), int(last.group("line")))
    reason = " ".join(skip.group("reason").split()).rstrip(".")
    return CompileFinding(
        "GD601",
        f"torch.compile(mode=\"reduce-overhead\") skipped CUDA graphs due to {reason}: the step runs "
        "without graphs and the speedup asked for is silently lost; fix the cause the compiler names",
        location,
    )


class _Keep(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.messages.append(record.getMessage())
        except Exception:  # a record whose arguments do not format: nothing to read from it
            pass


def _artifact_loggers() -> list[logging.Logger]:
    names = {"torch._dynamo.symbolic_convert.__graph_breaks", "torch._dynamo.exc.__graph_breaks",
             "torch._inductor.cudagraph_utils.__cudagraphs", "torch._inductor.cudagraph_utils.__perf_hints"}  # fmt: skip
    try:
        from torch._logging._internal import log_registry

        names |= {q for q in log_registry.artifact_log_qnames if q.rsplit(".__", 1)[-1] in ARTIFACTS}
    except Exception:  # the registry moved: the names above still cover the messages read here
        pass
    return [logging.getLogger(name) for name in sorted(names)]


def _counts() -> tuple[dict[str, int], int]:
    counters = sys.modules["torch._dynamo.utils"].counters
    return dict(counters["graph_break"]), int(counters["inductor"]["cudagraph_skips"])


class CompileWatch:
    """Collects the compiler's skip reasons and graph breaks while a unit compiles (its warm-up).

    Inert when the process never imported torch._dynamo: nothing was compiled, so nothing to read.
    """

    def __init__(self, root: Path | None, fallback: Location) -> None:
        self.root = root
        self.fallback = fallback
        self.handler = _Keep()
        self.active = False
        self._saved: list[tuple[logging.Logger, int, bool]] = []
        self._before: tuple[dict[str, int], int] | None = None
        self._after: tuple[dict[str, int], int] | None = None

    def __enter__(self) -> "CompileWatch":
        if "torch._dynamo" not in sys.modules:
            return self
        import torch._dynamo.utils  # noqa: F401  (the counters)

        for module in ("torch._dynamo.symbolic_convert", "torch._inductor.cudagraph_utils"):
            try:  # registers the artifact loggers, so that they exist before the compile runs
                __import__(module)
            except Exception:
                continue
        self.active = True
        for log in _artifact_loggers():
            self._saved.append((log, log.level, log.propagate))
            log.setLevel(logging.DEBUG)
            log.propagate = False
            log.addHandler(self.handler)
        self._before = _counts()
        return self

    def __exit__(self, *exc) -> None:
        if not self.active:
            return
        self._after = _counts()
        for log, level, propagate in self._saved:
            log.removeHandler(self.handler)
            log.setLevel(level)
            log.propagate = propagate
        self._saved.clear()

    def findings(self) -> list[CompileFinding]:
        found: list[CompileFinding] = []
        sites: dict[tuple[str, int], Location] = {}
        for text in self.handler.messages:
            finding = graph_break_finding(text, self.root, sites) or cudagraph_skip_finding(text, self.root)
            if finding is not None and finding not in found:
                found.append(finding)
        if self._before is None or self._after is None:
            return found
        (breaks_before, skips_before), (breaks_after, skips_after) = self._before, self._after
        new_breaks = [reason for reason, n in breaks_after.items() if n > breaks_before.get(reason, 0)]
        if new_breaks and not any(f.rule == "GD602" for f in found):
            found.append(CompileFinding("GD602", f"torch.compile breaks the graph in this step: {new_breaks[0]}", self.fallback))
        if skips_after > skips_before and not any(f.rule == "GD601" for f in found):
            found.append(CompileFinding("GD601", "torch.compile(mode=\"reduce-overhead\") skipped CUDA graphs in this step "
                                                  "(the reason was not logged)", self.fallback))
        return [f if f.location is not None else CompileFinding(f.rule, f.message, self.fallback) for f in found]

    @property
    def skipped(self) -> bool:
        return any(f.rule == "GD601" for f in self.findings())


# -- units that torch.compile graphs itself ----------------------------------------------------------


def _unwrap(fn: Any) -> Any:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn


def compiler_config(fn: Any) -> dict | None:
    """The inductor settings a torch.compile'd callable was built with, or None for anything else."""
    getter = getattr(_unwrap(fn), "get_compiler_config", None)
    if not callable(getter):
        return None
    try:
        config = getter()
    except Exception:  # a backend without settings
        return None
    return config if isinstance(config, dict) else None


def uses_compiler_graphs(fn: Any) -> bool:
    """True for `torch.compile(..., mode="reduce-overhead")` (inductor with CUDA graphs on)."""
    config = compiler_config(fn)
    return bool(config and config.get("triton.cudagraphs"))


def eager_callable(fn: Any) -> Callable[..., Any]:
    """The Python callable behind a torch.compile'd one (the compiled one itself if there is none)."""
    if isinstance(fn, functools.partial):
        return functools.partial(eager_callable(fn.func), *fn.args, **fn.keywords)
    module = getattr(fn, "_orig_mod", None)  # an OptimizedModule: call the module, hooks included
    if module is not None:
        return module
    return getattr(fn, "_torchdynamo_orig_callable", fn)


def replay_checks(run, fresh_inputs: tuple, state0: tuple, graphed: bool) -> None:
    """Replays (the compiled callable after warm-up) against eager (its Python original): GD301-303."""
    import torch

    from graphready.harness.blame import call_user, raised_by_user
    from graphready.harness.checks import kernels as kernel_check
    from graphready.harness.checks.replay.replay import mismatch_message
    from graphready.harness.compare import as_outputs, clone_all, degenerate, first_difference

    unit, device = run.unit, run.device
    atol, rtol = unit.atol, unit.rtol
    original = eager_callable(unit.fn)
    fresh, fresh_next = fresh_inputs
    run.result.capture = "ok" if graphed else "skipped"
    if not graphed:
        run.result.notes.append("torch.compile skipped CUDA graphs: its calls below ran without them")

    def two_steps(fn) -> tuple:
        run.restore(state0)
        first = clone_all(as_outputs(call_user(fn, *fresh)))
        first_state = clone_all(run.state_tensors())
        second = clone_all(as_outputs(call_user(fn, *fresh_next)))
        second_state = clone_all(run.state_tensors())
        torch.cuda.synchronize(device)
        return first, first_state, second, second_state

    run.on_phase("replay")
    try:
        replayed, again = two_steps(unit.fn), two_steps(unit.fn)
    except Exception as exc:
        if not raised_by_user(exc):
            raise
        run.result.error = f"a compiled call raised {type(exc).__name__}: {exc}"
        run.add("GD201", f"the compiled step failed after warm-up: {type(exc).__name__}: {exc}", None)
        return
    unstable = first_difference(replayed[0], again[0], atol, rtol)
    if unstable:
        run.add("GD303", f"two compiled calls on identical inputs and state differ: {unstable}", None)

    run.on_phase("eager reference")
    try:
        eager = two_steps(original)
    except Exception as exc:
        if not raised_by_user(exc):
            raise
        run.result.error = f"the Python original of the compiled step raised {type(exc).__name__}: {exc}"
        run.add("GD201", run.result.error, None)
        return
    difference = (
        first_difference(eager[0], replayed[0], atol, rtol)
        or first_difference(eager[1], replayed[1], atol, rtol, what="state tensor")
        or first_difference(eager[2], replayed[2], atol, rtol)
        or first_difference(eager[3], replayed[3], atol, rtol, what="state tensor")
    )
    if difference:
        run.add("GD301", mismatch_message(difference, "the compiled step (the compiler's graphs) disagrees with its Python original"), None)
    bad = degenerate(eager[0], replayed[0])
    if bad:
        run.add("GD302", f"compiled output is degenerate: {bad}", None)

    run.on_phase("replay timing")
    stream = torch.cuda.current_stream(device)
    run.restore(state0)
    run.result.kernels = kernel_check.eager_kernel_count(lambda: call_user(original, *fresh))
    run.result.graph_kernels = kernel_check.eager_kernel_count(lambda: call_user(unit.fn, *fresh))
    run.result.eager_ms = run.time_ms(lambda: call_user(original, *fresh), stream)
    run.result.replay_ms = run.time_ms(lambda: call_user(unit.fn, *fresh), stream)
    run.restore(state0)
    torch.cuda.synchronize(device)
