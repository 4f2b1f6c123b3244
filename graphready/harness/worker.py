"""The worker process: list a target's units, or load the target once and check units in turn.

    python -m graphready.harness.worker list TARGET --out FILE [--factory-kwargs JSON] [--gpus N]
    python -m graphready.harness.worker serve TARGET --units JSON --events-fd FD [--gpu K] [--gpus N] [--cold] [...]

`serve` builds the target once (its factory, then every unit's `setup`), then checks the named units
in order and streams one JSON line per event to the file descriptor FD: `loaded`, then per unit
`start`, `phase`..., `result`. A failed capture poisons the process's CUDA context, so after a unit
that failed capture, or stopped with an error after which a probe capture fails, the worker says
`retire` and exits; the parent starts a fresh worker for the units that are left. One of graphready's
own checks failing (GD001) does not retire the worker while the CUDA context still works. Without `--gpu` the worker sees every GPU (a target
placed over several GPUs); with it, "cuda" means GPU K. With `--cold` each unit is only captured
with no warm-up (GD203, the cold pass of `graphready check --cold-capture`).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path
from typing import Callable


def _write_json(path: str, data) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    os.replace(tmp, path)


def _describe(exc: BaseException) -> str:
    from graphready.errors import UsageError

    return str(exc) if isinstance(exc, UsageError) else f"{type(exc).__name__}: {exc}"


def _list(args) -> int:
    from graphready.harness.frames import relative_path
    from graphready.harness.target import load_factory, load_units, spans_gpus
    from graphready.harness.unit import callable_location

    try:
        spans = spans_gpus(load_factory(args.target))
        units = load_units(args.target, json.loads(args.factory_kwargs), args.gpus)
    except Exception as exc:  # the user's factory: report, never a traceback
        _write_json(args.out, {"error": _describe(exc)})
        return 0
    root = Path(args.root)
    rows = []
    for unit in units:
        path, line = callable_location(unit.fn)
        code = [list(callable_location(c)) for c in unit.reaches]
        rows.append({
            "name": unit.name, "device": unit.device_label(), "path": relative_path(path, root), "line": line,
            "reaches": [[relative_path(p, root), n] for p, n in code],
        })
    _write_json(args.out, {"units": rows, "spans_gpus": spans})
    return 0


class Events:
    """One JSON object per line on the parent's pipe."""

    def __init__(self, fd: int):
        self.stream = os.fdopen(fd, "w", encoding="utf-8", buffering=1)

    def __call__(self, event: str, **data) -> None:
        self.stream.write(json.dumps({"event": event, **data}) + "\n")
        self.stream.flush()


def serve(target: str, names: list[str], factory_kwargs: dict, gpus: int, emit: Callable[..., None],
          check: Callable, poisoned: Callable | None = None) -> int:
    """Load the target once, then `check(unit, on_phase) -> UnitResult` each named unit until `poisoned(result)`
    (default: the result's own `poisons_worker`) says the process can check no more."""
    poisoned = poisoned or (lambda result: result.poisons_worker())
    from graphready.harness.target import load_units, select_unit

    started = time.perf_counter()
    try:
        units = load_units(target, factory_kwargs, gpus, only=names)
        chosen = [select_unit(units, name) for name in names]
        for unit in chosen:
            if unit.setup is not None:
                unit.setup()
    except Exception as exc:  # the user's factory or setup raised: every unit of this worker is unchecked
        emit("load-failed", message=_describe(exc))
        return 0
    emit("loaded", seconds=round(time.perf_counter() - started, 3), pid=os.getpid())
    for unit in chosen:
        emit("start", unit=unit.name)
        raised = False
        try:
            result = check(unit, lambda phase: emit("phase", phase=phase))
        except Exception as exc:  # graphready's own check failed outside every guard of the session
            result, raised = _unfinished(unit, exc), True
        emit("result", result=result.to_json())
        if raised or poisoned(result):
            emit("retire", unit=unit.name)
            return 0
    emit("done")
    return 0


def _unfinished(unit, exc: BaseException):
    """The report of a unit whose check raised out of the check itself: GD001, and the worker retires,
    since nothing says what state the check left the process in."""
    from graphready.harness.blame import InternalFailure
    from graphready.harness.frames import relative_path
    from graphready.harness.result import UnitResult
    from graphready.harness.unit import callable_location

    path, line = callable_location(unit.fn)
    failure = InternalFailure.of("unit check", exc)
    result = UnitResult(name=unit.name, device=unit.device_label(), error=f"graphready's check failed: {failure.error}")
    result.add_internal_failure(failure, relative_path(path, Path.cwd()), line)
    return result


def gpu_check(steps: int, capture_alloc_limit: int, root: Path, cold: bool = False) -> tuple[Callable, Callable]:
    """The real check, `graphready.harness.session.check_unit` on the unit's GPU with memory released after, and
    the `poisoned(result)` test `serve` retires the worker by.

    `cold`: instead, capture the unit with no warm-up (`graphready.harness.checks.cold.lazy`, GD203)."""
    import torch

    from graphready.harness.checks.cold.lazy import cold_check_unit
    from graphready.harness.result import UnitResult, make_finding
    from graphready.harness.session import CheckOptions, check_unit
    from graphready.harness.frames import relative_path
    from graphready.harness.unit import callable_location

    options = CheckOptions(steps=steps, capture_alloc_limit=capture_alloc_limit, root=root)

    def unusable(unit, message: str) -> UnitResult:
        path, line = callable_location(unit.fn)
        result = UnitResult(name=unit.name, device=unit.device_label(), error=message)
        result.findings.append(make_finding("GD201", message, unit=unit.name, path=relative_path(path, root), line=line))
        return result

    def check(unit, on_phase):
        device = torch.device(unit.device) if unit.device is not None else torch.device("cuda", torch.cuda.current_device())
        if device.type != "cuda":
            return unusable(unit, f"unit {unit.name!r} is on {device}; the harness checks CUDA units")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if device.index >= torch.cuda.device_count():
            return unusable(unit, f"unit {unit.name!r} wants {device} but this machine has "
                                  f"{torch.cuda.device_count()} GPU(s)")
        result = (cold_check_unit if cold else check_unit)(unit, device, options, on_phase)
        checked_on[result.name] = device
        gc.collect()  # the unit's graph and its private pool go before the next unit
        try:
            torch.cuda.synchronize(device)
            torch.cuda.empty_cache()
        except Exception as exc:  # the unit left the CUDA context broken: the next unit needs a fresh worker
            if not result.poisons_worker():
                result.error = f"the CUDA context no longer works after this unit's check ({type(exc).__name__}: {exc})"
            broken.add(result.name)
        return result

    broken: set[str] = set()  # units after whose check the context failed to synchronize
    checked_on: dict[str, torch.device] = {}  # the GPU each unit ran on: the probe must test that context

    def poisoned(result) -> bool:
        """A failed capture always retires the worker; a unit that stopped with an error only when a probe
        capture shows the context broken (an error before any capture, such as a model that cannot be built,
        must not cost every later unit another load)."""
        if not result.poisons_worker():
            return False
        if result.capture == "failed" or result.name in broken:
            return True
        return not capture_works(checked_on.get(result.name, torch.device("cuda", torch.cuda.current_device())))

    return check, poisoned


def capture_works(device) -> bool:
    """Capture and replay one kernel on `device`: False when the context can no longer capture or run."""
    import torch

    try:
        with torch.cuda.device(device):
            probe = torch.zeros(1, device=device)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=torch.cuda.Stream(device=device)):
                probe.add_(1)
            graph.replay()
            graph.replay()
            torch.cuda.synchronize(device)
            return probe.item() == 2.0
    except Exception:
        return False


def _serve(args) -> int:
    emit = Events(args.events_fd)
    import torch

    if not torch.cuda.is_available():
        emit("load-failed", message="no CUDA GPU is available")
        return 0
    if args.gpu is not None:
        torch.cuda.set_device(args.gpu)  # so that the factory's "cuda" means the assigned GPU
    from graphready.harness.checks.pointers.alloc_history import start_recording

    start_recording()  # before the factory: GD307 locates buffers made at load time too
    check, poisoned = gpu_check(args.steps, args.capture_alloc_limit, Path(args.root), cold=args.cold)
    return serve(args.target, json.loads(args.units), json.loads(args.factory_kwargs), args.gpus, emit, check,
                 poisoned)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="graphready.harness.worker")
    parser.add_argument("action", choices=("list", "serve"))
    parser.add_argument("target")
    parser.add_argument("--out")
    parser.add_argument("--events-fd", type=int)
    parser.add_argument("--root", default=os.getcwd())
    parser.add_argument("--factory-kwargs", default="{}")
    parser.add_argument("--units", default="[]", help="JSON list of unit names, checked in this order")
    parser.add_argument("--gpu", type=int, help="the GPU this worker uses (default: it sees every GPU)")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs a target that spans GPUs is placed over")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--capture-alloc-limit", type=int, default=512 * 2**20)
    parser.add_argument("--cold", action="store_true", help="capture each unit with no warm-up instead (GD203)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.action == "list":
        return _list(args)
    return _serve(args)


if __name__ == "__main__":
    sys.exit(main())
