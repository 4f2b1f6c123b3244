"""Check one unit on one GPU, in the current process: eager checks, capture, replay checks.

This runs inside a worker process (`graphready.harness.worker`): a failed capture poisons the
process's CUDA state, so nothing after a capture attempt relies on it except this unit's report.
Order: warm-up on a side stream (torch.compile's skip reasons and graph breaks, GD601/GD602), state
discovery and eager reproducibility (GD306), eager checks (GD101 sync, GD102 silent sync, kernels,
timing, GD401 growth), capture on an explicit stream of the unit's device under the op tracer
(GD201, GD202, GD402, GD501), the graph's pointers (GD307), then replays against eager (GD303,
GD304, GD301, GD302), the unit's own loop (GD308, GD305), pointers freed since capture (GD307),
padded replays of a graph captured for a batch size (GD309),
the input preparation run once more (GD305), replay timing, and the address audit of what the
unit can reach (GD305). A torch.compile(mode="reduce-overhead") unit is not captured again: its
own graphs are compared with its Python original (checks/compiled.py).

Every check runs guarded (`UnitRun.checking`): the unit's own code raising is a verdict (GD201) and
ends the unit, while one of graphready's checks raising is that check's internal error (GD001,
`graphready.harness.blame`); the other checks still run and their verdicts stand, and the worker
retires only when the CUDA context no longer works.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from graphready.findings import Severity
from graphready.harness.blame import InternalFailure, call_user, raised_by_user
from graphready.harness.checks.syncs import blocking as blocking_check
from graphready.harness.checks import capture as capture_check
from graphready.harness.checks import compiled as compiled_check
from graphready.harness.checks import device as device_check
from graphready.harness.checks.pointers import freed as freed_check
from graphready.harness.checks import kernels as kernel_check
from graphready.harness.checks import memory as memory_check
from graphready.harness.checks.pointers import rebind as rebind_check
from graphready.harness.checks.pointers import rebind_between
from graphready.harness.checks.replay import padded as padded_check
from graphready.harness.checks.replay import replay as replay_check
from graphready.harness.checks.replay import state as state_check
from graphready.harness.checks.pointers import pointers as pointer_check
from graphready.harness.checks.replay import stale_outputs as stale_check
from graphready.harness.checks.syncs import silent_sync as silent_sync_check
from graphready.harness.checks.syncs import sync as sync_check
from graphready.harness.checks.pointers.alloc_history import start_recording
from graphready.harness.compare import as_outputs, clone_all, degenerate, first_difference
from graphready.harness.frames import Location, exception_user_frame, relative_path
from graphready.harness import host_state
from graphready.harness.result import UnitResult, make_finding
from graphready.harness.tracer import OpTracer, storage_key, tensors_in
from graphready.harness.unit import Unit, callable_location

WARMUP_STEPS = 2


@dataclass
class CheckOptions:
    steps: int = 8  # eager steps and replays for timing and growth
    capture_alloc_limit: int = 512 * 2**20  # GD402 warns above this many bytes
    root: Path = field(default_factory=Path.cwd)


class PhaseClock:
    """Wall seconds per check phase, so the harness's own cost per unit is visible in the report."""

    def __init__(self, forward: Callable[[str], None]):
        self.forward = forward
        self.seconds: dict[str, float] = {}
        self.current: str | None = None
        self.started = time.perf_counter()

    def __call__(self, phase: str) -> None:
        self._close()
        self.current = phase
        self.forward(phase)

    def _close(self) -> None:
        now = time.perf_counter()
        if self.current is not None:
            self.seconds[self.current] = self.seconds.get(self.current, 0.0) + now - self.started
        self.started = now

    def stop(self) -> dict[str, float]:
        self._close()
        self.current = None
        return {phase: round(s, 4) for phase, s in self.seconds.items()}


class UnitRun:
    """One unit's check in progress: its device, options, state handling and the report being built."""

    def __init__(self, unit: Unit, device: torch.device, options: CheckOptions, on_phase: Callable[[str], None]):
        self.unit = unit
        self.device = device
        self.options = options
        self.on_phase = PhaseClock(on_phase)
        self.result = UnitResult(name=unit.name, device=str(device))
        self.state_fn = unit.state  # replaced when the state is discovered or completed (checks/replay/state.py)
        path, line = callable_location(unit.fn)
        self.fn_location = Location(relative_path(path, options.root), line)
        self.pointer_audit: pointer_check.CaptureAudit | None = None
        self.read_paths: rebind_between.ReadPaths | None = None  # GD305 between replays, set after capture
        self.host0: host_state.Snapshot = []  # the unit's host_state as the state was taken (snapshot_host)

    # -- findings --------------------------------------------------------------------------------
    def add(self, rule: str, message: str, location: Location | None, severity: Severity = Severity.ERROR) -> None:
        location = location or self.fn_location
        self.result.findings.append(
            make_finding(rule, message, unit=self.unit.name, path=location.path, line=location.line, severity=severity)
        )

    @contextmanager
    def checking(self, check: str | None = None,
                 failure: str | Callable[[BaseException], "_Stop"] = "eager step") -> Iterator[None]:
        """Run one check. The unit's code raising ends the unit with GD201 (`failure` names what raised,
        or makes the finding); the check's own code raising is GD001 for `check` (default: the phase it
        was in), and the unit goes on to its other checks unless the CUDA context no longer works."""
        try:
            yield
        except _Stop:
            raise
        except Exception as exc:
            if raised_by_user(exc):
                raise (failure(exc) if callable(failure) else _eager_failure(self, failure, exc)) from None
            self.internal_failure(check or self.on_phase.current or "check", exc)

    def internal_failure(self, check: str, exc: BaseException) -> None:
        self.result.add_internal_failure(InternalFailure.of(check, exc), self.fn_location.path, self.fn_location.line)
        if not _cuda_usable(self.device):
            self.result.error = f"the CUDA context no longer works after graphready's {check} check failed"
            raise _Stop()

    # -- state -----------------------------------------------------------------------------------
    def state_tensors(self) -> list[torch.Tensor]:
        return tensors_in(call_user(self.state_fn)) if self.state_fn is not None else []

    def restore(self, snapshot: tuple[torch.Tensor, ...]) -> None:
        for current, saved in zip(self.state_tensors(), snapshot):
            if current.shape == saved.shape and current.dtype == saved.dtype:
                current.copy_(saved)
        host_state.put_back(self.host0)

    def snapshot_host(self) -> None:
        """Take the unit's Python-level state (`Unit.host_state`) now, with the state tensors: every
        restore from here on puts it back."""
        objects = call_user(self.unit.host_state) if self.unit.host_state is not None else ()
        self.host0 = host_state.snapshot(objects)

    def step(self, inputs: tuple) -> tuple[torch.Tensor, ...]:
        return as_outputs(call_user(self.unit.fn, *inputs))

    def time_ms(self, run: Callable[[], Any], stream: torch.cuda.Stream) -> float:
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            stream.synchronize()
            start.record(stream)
            for _ in range(self.options.steps):
                run()
            end.record(stream)
        end.synchronize()
        return start.elapsed_time(end) / self.options.steps


def _inputs(unit: Unit, seed: int) -> tuple:
    inputs = call_user(unit.make_inputs, seed)
    return tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)


def _cuda_usable(device: torch.device) -> bool:
    """Whether the device still runs work: a sticky CUDA error or an unfinished capture fails this."""
    try:
        torch.cuda.synchronize(device)
    except Exception:
        return False
    return True


def check_unit(
    unit: Unit, device: torch.device, options: CheckOptions | None = None, on_phase: Callable[[str], None] = lambda _: None
) -> UnitResult:
    """Run every check on `unit` and return its report. Errors in the unit become findings."""
    run = UnitRun(unit, device, options or CheckOptions(), on_phase)
    torch.cuda.set_device(device)
    try:
        with run.checking():  # a check that is not guarded on its own is named by its phase
            start_recording()  # GD307 locates a buffer by its allocation's stack
            _check(run)
    except _Stop:
        pass
    finally:
        run.result.phase_seconds = run.on_phase.stop()
    return run.result


class _Stop(Exception):
    """The unit cannot be checked further; the reason is already in the result."""


def _eager_failure(run: UnitRun, phase: str, exc: BaseException) -> _Stop:
    location = exception_user_frame(exc.__traceback__, run.options.root)
    lines = str(exc).strip().splitlines()
    message = f"the unit's {phase} raised {type(exc).__name__}" + (f": {lines[0]}" if lines else "")
    run.result.error = message
    run.add("GD201", message, location)
    return _Stop()


def _check(run: UnitRun) -> None:
    unit, device, options = run.unit, run.device, run.options
    default = torch.cuda.default_stream(device)
    side = torch.cuda.Stream(device=device)
    capture_stream = torch.cuda.Stream(device=device)

    run.on_phase("inputs")
    made = None
    with run.checking("inputs", failure="make_inputs/state"):
        # The fresh inputs are made now: after capture, new allocations could land in (and hide) blocks the
        # graph still reads.
        made = _inputs(unit, 0), (_inputs(unit, 1), _inputs(unit, 2)), clone_all(run.state_tensors())
        run.snapshot_host()
    if made is None:
        raise _Stop()
    static_inputs, fresh_inputs, state0 = made
    with run.checking("input devices"):
        for what, tensors in (("input", tensors_in(static_inputs)), ("state tensor", run.state_tensors())):
            problem = device_check.misplaced_tensors(tensors, device, what)
            if problem:
                path, line = callable_location(unit.make_inputs if what == "input" else unit.state)
                run.add("GD501", problem, Location(relative_path(path, options.root), line))

    # Warm-up on a side stream (lazy initialisation, autotuning, JIT compiles) before anything is measured.
    run.on_phase("warm-up")
    compile_watch = compiled_check.CompileWatch(options.root, run.fn_location)
    with run.checking("warm-up"):
        side.wait_stream(default)
        with compile_watch, torch.cuda.stream(side):
            for _ in range(WARMUP_STEPS):
                run.restore(state0)
                run.step(static_inputs)
        default.wait_stream(side)
        torch.cuda.synchronize(device)
    skipped_cudagraphs = False
    with run.checking("torch.compile logs"):
        for found in compile_watch.findings():
            run.add(found.rule, found.message, found.location, found.severity)
        skipped_cudagraphs = compile_watch.skipped

    run.on_phase("state")
    declared = run.state_fn
    settled = None
    with run.checking("state discovery"):
        settled = state_check.settle(run, static_inputs, fresh_inputs, state0)
        torch.cuda.synchronize(device)
    if settled is None:
        run.state_fn = declared  # a discovery cut short leaves the declared state, which state0 matches
    else:
        state0 = settled

    _eager_checks(run, static_inputs, state0)
    if compiled_check.uses_compiler_graphs(unit.fn):
        with run.checking("compiled replay"):
            compiled_check.replay_checks(run, fresh_inputs, state0, graphed=not skipped_cudagraphs)
        return
    addresses = None
    with run.checking("rebound state"):
        addresses = rebind_check.audit(unit.fn)
    graph, outputs, tracer = _capture(run, static_inputs, state0, capture_stream)
    if graph is None:
        return
    rebound: list = []
    graph_reads: set[int] = set()
    with run.checking("rebound state"):
        if addresses is not None:
            graph_reads = rebind_check.read_addresses(tracer.records)
            rebound = rebind_check.rebound(addresses, rebind_check.audit(unit.fn), graph_reads)
            run.read_paths = rebind_between.ReadPaths.of(unit.fn, addresses, graph_reads, rebound)
    _replay_checks(run, graph, outputs, tracer, static_inputs, fresh_inputs, state0, capture_stream)
    with run.checking("rebound state"):
        if addresses is not None:
            later = rebind_check.rebound(addresses, rebind_check.audit(unit.fn), graph_reads)
            between = run.read_paths.reported if run.read_paths is not None else set()
            rebound += [p for p in later if p not in rebound and p not in between]
        if rebound:
            run.on_phase("rebound state")
            rebind_check.report(run, rebound, static_inputs, state0)


def _eager_checks(run: UnitRun, inputs: tuple, state0: tuple) -> None:
    device, options = run.device, run.options
    default = torch.cuda.default_stream(device)
    run.on_phase("sync")
    syncs: dict = {}
    copies = None
    with run.checking("sync"):
        run.restore(state0)
        copies = silent_sync_check.SilentCopyWatch(options.root)
        syncs = sync_check.find_syncs(lambda: copies.run(lambda: run.step(inputs)), options.root)
        for location, count in syncs.items():
            run.add("GD101", sync_check.sync_message(count), location)
    silent = copies.found if copies is not None else {}
    with run.checking("silent sync"):
        for location, reasons in silent.items():
            run.add("GD102", silent_sync_check.silent_sync_message(reasons), location)
    with run.checking("blocking calls"):
        run.restore(state0)
        blocking = blocking_check.find_blocking(lambda: run.step(inputs), device, options.root)
        run.result.notes.extend(blocking.notes)
        for location, site in blocking.sites.items():
            if location not in syncs and location not in silent:
                run.add("GD101", blocking_check.blocking_message(site), location)

    run.on_phase("kernels")
    with run.checking("kernels"):
        run.restore(state0)
        run.result.kernels = kernel_check.eager_kernel_count(lambda: run.step(inputs))

    run.on_phase("eager timing")
    with run.checking("eager timing"):
        run.restore(state0)
        run.result.eager_ms = run.time_ms(lambda: run.step(inputs), default)

    run.on_phase("memory growth")
    with run.checking("memory growth"):
        run.restore(state0)
        samples = memory_check.growth_samples(lambda: run.step(inputs), device, max(options.steps, 4))
        if memory_check.keeps_growing(samples):
            _report_growth(run, inputs, samples)
    with run.checking("memory growth"):
        run.restore(state0)
        torch.cuda.synchronize(device)


def _report_growth(run: UnitRun, inputs: tuple, samples: list[int]) -> None:
    """GD401 at the line whose tensors outlive the step, when one does."""
    per_step = (samples[-1] - samples[0]) // (len(samples) - 1)
    run.result.memory_growth_bytes = per_step
    existing = {key[0] for key in map(storage_key, tensors_in((inputs, run.state_tensors()))) if key}
    survivor_tracer = memory_check.SurvivorTracer(existing, run.options.root)
    with survivor_tracer:
        out = run.step(inputs)
    del out
    survivors = survivor_tracer.survivors()
    if survivors:
        location = max(survivors, key=lambda loc: survivors[loc])
        where = f"; tensors made at {location.describe()} outlive the step" if location else ""
    else:
        location, where = None, ""
    run.add("GD401", memory_check.growth_message(per_step, where), location)


def _named_storages(inputs: tuple, state: list[torch.Tensor]) -> dict[int, str]:
    named = {}
    for prefix, tensors in (("input", tensors_in(inputs)), ("state", state)):
        for i, t in enumerate(tensors):
            key = storage_key(t)
            if key is not None:
                named.setdefault(key[0], f"{prefix}{i}")
    return named


def _capture(run: UnitRun, inputs: tuple, state0: tuple, capture_stream: torch.cuda.Stream):
    device, options = run.device, run.options
    run.on_phase("capture")
    ready = None
    with run.checking("capture"):
        run.restore(state0)
        torch.cuda.synchronize(device)
        state_before = [storage_key(t) for t in run.state_tensors()]
        tracer = OpTracer(device, named_storages=_named_storages(inputs, run.state_tensors()),
                          capture_stream=capture_stream, root=options.root)
        ready = torch.cuda.memory_allocated(device)
    if ready is None:
        return None, None, None
    allocated_before = ready
    outcome = capture_check.capture_step(lambda: run.step(inputs), tracer, capture_stream, options.root)
    for issue in tracer.device_issues:
        run.add("GD501", issue.message, issue.location)
    if outcome.internal is not None:  # graphready's tracer broke the capture: not the unit's failure
        run.result.capture = "failed"  # an unfinished capture leaves this process's CUDA state suspect
        run.internal_failure("capture", outcome.internal)
        return None, None, tracer
    if not outcome.ok:
        run.result.capture = "failed"
        run.add("GD201", capture_check.failure_message(outcome), outcome.location)
        return None, None, tracer
    run.result.capture = "ok"

    run.on_phase("capture analysis")
    graph = outcome.graph
    with run.checking("capture allocations"):
        run.result.capture_alloc_bytes = max(tracer.peak_allocated - allocated_before, 0)
        if run.result.capture_alloc_bytes > options.capture_alloc_limit:
            by_line = tracer.alloc_by_line
            top = max((loc for loc in by_line if loc is not None), key=lambda loc: by_line[loc], default=None)
            run.add("GD402", memory_check.capture_alloc_message(run.result.capture_alloc_bytes, by_line,
                                                                options.capture_alloc_limit), top, Severity.WARNING)
    with run.checking("kernels"):
        run.result.graph_kernels = kernel_check.graph_kernel_count(graph)
    if hasattr(graph, "instantiate"):
        graph.instantiate()
    with run.checking("kernels"):
        _count_escaped_kernels(run, graph, outcome, capture_stream, lambda: run.step(inputs))
    run.on_phase("pointer audit")
    with run.checking("pointer audit"):
        run.pointer_audit = pointer_check.audit_capture(run, graph, inputs, outcome.outputs,
                                                        rebind_check.read_addresses(tracer.records))
    # A state tensor replaced (not written in place) during capture: the graph holds the old buffer.
    with run.checking("replay mismatch"):
        state_after = [storage_key(t) for t in run.state_tensors()]
        tracer.replaced_state = [(i, after[0]) for i, (before, after) in enumerate(zip(state_before, state_after))
                                 if before and after and before != after]
    return graph, outcome.outputs, tracer


def _count_escaped_kernels(run: UnitRun, graph, outcome, capture_stream: torch.cuda.Stream,
                           step: Callable[[], Any]) -> None:
    """GD202 when the graph holds fewer kernels than one eager step launches (or none at all)."""
    if run.result.graph_kernels is None:
        run.result.notes.append("graph nodes unreadable; counted the kernels of one replay instead")

        def replay_once():
            with torch.cuda.stream(capture_stream):
                graph.replay()

        run.result.graph_kernels = kernel_check.replay_kernel_count(replay_once)
    eager_kernels, graph_kernels = run.result.kernels, run.result.graph_kernels
    if eager_kernels is not None and graph_kernels is not None and graph_kernels < eager_kernels:
        _report_escaped(run, eager_kernels, graph_kernels, capture_stream, step)
    elif outcome.empty_warning and eager_kernels:
        _report_escaped(run, eager_kernels, 0, capture_stream, step)


def _report_escaped(run: UnitRun, eager_kernels: int, graph_kernels: int, capture_stream: torch.cuda.Stream,
                    step: Callable[[], Any]) -> None:
    """GD202 at each line that launched an escaped kernel, found by one more (profiled) capture of the step;
    at the step when the profiler cannot say. A non-empty graph whose profiled capture ran no kernel at all
    escaped nothing: the step launches some kernels only outside capture (an eager-only check), or the profiler
    miscounted, and a count alone is no verdict."""
    why = "the profiled capture named no user call site"
    try:
        launches = kernel_check.escaped_launches(step, capture_stream, run.options.root)
    except Exception as exc:  # the profiler, or the step captured again: the count stands, unlocated
        launches, why = {}, f"{type(exc).__name__}: {exc}"
    else:
        if not launches and graph_kernels:
            run.result.notes.append(f"the eager step counted {eager_kernels} kernels and the graph holds "
                                    f"{graph_kernels}, but no kernel ran during a profiled capture: nothing escaped")
            return
    counted = kernel_check.escaped_message(eager_kernels, graph_kernels)
    located = {location: kernels for location, kernels in launches.items() if location is not None}
    if not located:
        run.result.notes.append(f"escaped kernels not located: {why}")
        run.add("GD202", counted, None)
    for location, kernels in located.items():
        run.add("GD202", kernel_check.escaped_at_message(kernels), location)


def _second_step(difference: str | None) -> str | None:
    return None if difference is None else f"on the second consecutive step, {difference}"


class _Replays:
    """Replays of the captured graph from given inputs, copied out on a stream of the harness's own."""

    def __init__(self, run: UnitRun, graph, static_outputs, static_inputs, state0, capture_stream):
        self.run, self.graph, self.static_outputs, self.static_inputs = run, graph, static_outputs, static_inputs
        self.state0, self.capture_stream = state0, capture_stream
        # The caching allocator hands a freed block only to allocations on the stream that freed it, so
        # copies made on a stream of their own cannot hide a freed graph input.
        self.harness_stream = torch.cuda.Stream(device=run.device)

    def __call__(self, inputs: tuple, restore: bool = True) -> tuple[tuple, tuple]:
        run = self.run
        for dst, src in zip(tensors_in(self.static_inputs), tensors_in(inputs)):
            dst.copy_(src)
        if restore:
            run.restore(self.state0)
        torch.cuda.synchronize(run.device)
        with torch.cuda.stream(self.capture_stream):
            self.graph.replay()
        self.capture_stream.synchronize()
        with torch.cuda.stream(self.harness_stream):
            copies = clone_all(self.static_outputs), clone_all(run.state_tensors())
        self.harness_stream.synchronize()
        return copies


def _replay_failed(run: UnitRun) -> Callable[[BaseException], "_Stop"]:
    """What ends the unit when a replay raises (the graph, or the unit's state, failed): GD201."""

    def stop(exc: BaseException) -> _Stop:
        run.result.error = f"replay raised {type(exc).__name__}: {exc}"
        run.add("GD201", f"the captured graph failed to replay: {type(exc).__name__}: {exc}", None)
        return _Stop()

    return stop


def _replay_checks(run, graph, static_outputs, tracer, static_inputs, fresh_inputs, state0, capture_stream) -> None:
    atol, rtol = run.unit.atol, run.unit.rtol
    replay = _Replays(run, graph, static_outputs, static_inputs, state0, capture_stream)
    fresh, fresh_next = fresh_inputs
    run.on_phase("replay")
    replayed = after_free = second = None
    unstable = freed_location = None
    with run.checking("replay", failure=_replay_failed(run)):
        replayed, replayed_state = replay(fresh)
        again, _ = replay(fresh)
        unstable = first_difference(replayed, again, atol, rtol)
        if unstable:
            run.add("GD303", f"two replays of identical inputs and state differ: {unstable}", None)

    run.on_phase("freed memory")
    with run.checking("freed memory", failure=_replay_failed(run)):
        freed_blocks = freed_check.free_blocks(run.device)
        freed_check.overwrite_free_blocks(run.device)
        after_free, _ = replay(fresh)
        changed = None if unstable or replayed is None else first_difference(replayed, after_free, atol, rtol)
        if changed:
            record = freed_check.freed_reads(tracer.records, freed_blocks)
            freed_location = record.location if record else None
            run.add("GD304", freed_check.freed_message(freed_location, changed), freed_location)

    # A second consecutive step shows buffers the graph reads but the step rebinds (stale state).
    with run.checking("replay", failure=_replay_failed(run)):
        replay(fresh)
        second, second_state = replay(fresh_next, restore=False)

    run.on_phase("eager reference")
    eager = None
    with run.checking("eager reference", failure="eager step after capture"):
        run.restore(state0)
        eager_tracer = OpTracer(run.device, named_storages=_named_storages(fresh, run.state_tensors()),
                                root=run.options.root)
        with eager_tracer:
            eager = clone_all(run.step(fresh))
        eager_state = clone_all(run.state_tensors())
        eager_second = clone_all(run.step(fresh_next))
        eager_second_state = clone_all(run.state_tensors())
        torch.cuda.synchronize(run.device)

    if eager is not None and replayed is not None and second is not None:
        with run.checking("replay mismatch"):
            difference = (
                first_difference(eager, replayed, atol, rtol)
                or first_difference(eager_state, replayed_state, atol, rtol, what="state tensor")
                or _second_step(first_difference(eager_second, second, atol, rtol))
                or _second_step(first_difference(eager_second_state, second_state, atol, rtol, what="state tensor"))
            )
            mismatch_location, why = replay_check.explain_mismatch(tracer, eager_tracer, tracer.replaced_state)
            if difference:
                run.add("GD301", replay_check.mismatch_message(difference, why), mismatch_location)
            bad_replay = degenerate(eager, replayed)
            bad_after_free = None if bad_replay or after_free is None else degenerate(eager, after_free)
            if bad_replay or bad_after_free:
                location = mismatch_location if bad_replay else freed_location
                what = bad_replay or f"{bad_after_free} once freed memory is overwritten"
                run.add("GD302", f"replay output is degenerate: {what}", location)
    if run.unit.loop is not None:
        run.on_phase("loop")
        with run.checking("loop"):
            stale_check.check_loop(run, graph, static_inputs, static_outputs, state0, capture_stream)
    run.on_phase("pointer audit")
    with run.checking("pointer audit"):
        pointer_check.recheck(run, run.pointer_audit)
    if padded_check.applies(run.unit):
        run.on_phase("padded replay")
        with run.checking("padded replay", failure="step, make_inputs or pad_inputs for a padded batch"):
            padded_check.check(run, graph, static_inputs, static_outputs, state0, capture_stream)
    # An engine prepares the inputs before every replay: what that re-binds, the graph never sees. Last of
    # the comparisons, so a re-bind that frees what the graph reads cannot change their verdicts.
    run.on_phase("rebound state")
    with run.checking("rebound state", failure="make_inputs"):
        rebind_between.check_preparation(run, lambda: _inputs(run.unit, 2))

    run.on_phase("replay timing")
    with run.checking("replay timing", failure=_replay_failed(run)):
        run.restore(state0)
        run.result.replay_ms = run.time_ms(graph.replay, capture_stream)
        run.restore(state0)
        torch.cuda.synchronize(run.device)
