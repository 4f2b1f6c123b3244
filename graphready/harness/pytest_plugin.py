"""pytest plugin: check users' own units from their test suites.

    def test_decode_step_is_graph_ready(graph_unit_check):
        result = graph_unit_check("mypkg.units:decode_units", unit="decode")
        assert result.status() == "pass"

    def test_layer(graph_unit_check):
        assert_graph_ready(Unit("mlp", mlp, make_inputs))

Registered through the `pytest11` entry point, so it is imported by every pytest run: it must
stay cheap, and imports torch only when a check actually runs.
"""

from __future__ import annotations

import multiprocessing
import os
import warnings
from pathlib import Path

import pytest

from graphready.harness.unit import Unit

_NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"  # is_available() without initialising CUDA (fork stays safe)


def _worker_options(steps: int, timeout: float, capture_alloc_limit_mb: float):
    from graphready.harness.isolation import WorkerOptions

    return WorkerOptions(
        steps=steps,
        capture_alloc_limit=int(capture_alloc_limit_mb * 2**20),
        timeout_s=timeout,
        root=os.getcwd(),
    )


def _check_by_spec(target: str, unit_name: str | None, gpu: int, options):
    from graphready.harness.isolation import list_units
    from graphready.harness.scheduler import check_isolated

    units = list_units(target, options)
    if unit_name is None:
        if len(units) != 1:
            raise ValueError(f"target {target!r} has {len(units)} units; pass unit=NAME")
        return check_isolated(target, units[0], gpu, options)
    for info in units:
        if info.name == unit_name:
            return check_isolated(target, info, gpu, options)
    raise ValueError(f"target {target!r} has no unit named {unit_name!r}")


def _run_in_child(unit: Unit, gpu: int, options, conn) -> None:
    import torch

    from graphready.harness.session import CheckOptions, check_unit

    device = torch.device(unit.device) if unit.device is not None else torch.device("cuda", gpu)
    check_options = CheckOptions(options.steps, options.capture_alloc_limit, Path(options.root))
    conn.send(check_unit(unit, device, check_options).to_json())
    conn.close()


def _check_forked(unit: Unit, gpu: int, options):
    """Check a unit object in a forked child, which inherits it (closures need no pickling)."""
    from graphready.harness.pool import hung_message
    from graphready.harness.result import UnitResult, make_finding
    from graphready.harness.unit import callable_location

    context = multiprocessing.get_context("fork")
    parent, child = context.Pipe(duplex=False)
    process = context.Process(target=_run_in_child, args=(unit, gpu, options, child), daemon=True)
    process.start()
    child.close()
    answered = parent.poll(options.timeout_s)
    payload = parent.recv() if answered else None
    process.join(timeout=5)
    hung = process.is_alive() and not answered
    if process.is_alive():
        process.kill()
        process.join()
    if payload is not None:
        return UnitResult.from_json(payload)
    if hung:  # no verdict: a busy GPU hangs a unit as a deadlock does
        message = hung_message(options.timeout_s, "the check")
        return UnitResult(name=unit.name, device=unit.device_label(), error=message)
    path, line = callable_location(unit.fn)
    message = f"the check process died (exit code {process.exitcode})"
    result = UnitResult(name=unit.name, device=unit.device_label(), error=message)
    result.findings.append(make_finding("GD201", message, unit=unit.name, path=path, line=line))
    return result


def check_graph_unit(
    unit: Unit | str,
    unit_name: str | None = None,
    *,
    steps: int = 4,
    timeout: float = 600.0,
    capture_alloc_limit_mb: float = 512.0,
    gpu: int = 0,
):
    """Check one unit, isolated from this process, and return its `UnitResult`.

    `unit` is a target spec (`pkg.mod:factory`, with `unit_name` when it has several units) or a
    `Unit`. A Unit object runs in a forked child while CUDA is not yet initialised here; after
    that it runs in this process, where a failed capture breaks later captures (prefer a spec).
    """
    import torch

    if isinstance(unit, Unit) and unit.keys:
        raise ValueError(f"unit {unit.name!r} has capture keys: check each of unit.expand(), or give its target spec")
    options = _worker_options(steps, timeout, capture_alloc_limit_mb)
    if isinstance(unit, str):
        return _check_by_spec(unit, unit_name, gpu, options)
    if unit.origin is not None:
        return _check_by_spec(unit.origin, unit.name, gpu, options)
    if not torch.cuda.is_initialized():
        return _check_forked(unit, gpu, options)
    warnings.warn(
        f"checking unit {unit.name!r} in the test process (CUDA is already initialised here); "
        "a failed capture will break later captures in this session",
        stacklevel=2,
    )
    from graphready.harness.session import CheckOptions, check_unit

    device = torch.device(unit.device) if unit.device is not None else torch.device("cuda", gpu)
    return check_unit(unit, device, CheckOptions(steps, options.capture_alloc_limit, Path(options.root)))


def describe(result) -> str:
    lines = [f"unit {result.name!r}: {result.status()}" + (f" ({result.error})" if result.error else "")]
    for finding in result.findings:
        lines.append(f"  {finding.path}:{finding.line}: {finding.rule} {finding.name}: {finding.message}")
    return "\n".join(lines)


def assert_graph_ready(unit: Unit | str, unit_name: str | None = None, **kwargs) -> None:
    """Fail the calling test with every finding when the unit (each of its capture keys) does not pass.

    A verdict on the code is an AssertionError; where the only trouble is that one of graphready's own
    checks failed (GD001), an `InternalError` says so instead, with the tracebacks as its details."""
    from graphready.harness.result import INTERNAL, PASS

    results = [check_graph_unit(u, unit_name, **kwargs) for u in (unit.expand() if isinstance(unit, Unit) else [unit])]
    failed = [result for result in results if result.status() not in (PASS, INTERNAL)]
    if failed:
        raise AssertionError("\n".join(describe(result) for result in failed))
    broken = [result for result in results if result.status() == INTERNAL]
    if broken:
        raise internal_error(broken)


def internal_error(results) -> "InternalError":
    """graphready's own checks failed on these units (and found nothing else): a bug of graphready's."""
    from graphready.errors import InternalError

    failures = [(result.name, failure) for result in results for failure in result.internal_failures]
    error = "; ".join(f"unit {name!r}: {', '.join(f.checks)} check: {f.error}" for name, f in failures)
    return InternalError(None, f"graphready's own checks failed, so no verdict was given ({error})",
                         "".join(f.traceback for _, f in failures))


def gpu_available() -> bool:
    """Whether a CUDA GPU is visible, asked through NVML so that this process can still fork a checker."""
    try:
        import torch
    except ImportError:
        return False
    previous = os.environ.get(_NVML_CHECK)
    os.environ[_NVML_CHECK] = "1"
    try:
        return torch.cuda.is_available()
    finally:
        if previous is None:
            del os.environ[_NVML_CHECK]
        else:
            os.environ[_NVML_CHECK] = previous


@pytest.fixture
def graph_unit_check():
    """`check_graph_unit`, skipping the test when no CUDA GPU is available."""
    if not gpu_available():
        pytest.skip("graph_unit_check needs a CUDA GPU")
    return check_graph_unit
