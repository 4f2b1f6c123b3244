"""Targets for the CPU tests of the harness plumbing: they list without a GPU.

Their factories build nothing on a device; `hanging_units` and `crashing_units` misbehave only
inside a `run` worker, the way a broken unit takes its worker down on a GPU machine.
"""

from __future__ import annotations

import os
import sys
import time
import weakref

from graphready.harness import Unit


def _inputs(seed: int):
    import torch

    return (torch.full((4,), float(seed)),)


def double(x):
    return x * 2


def two_units() -> list[Unit]:
    return [Unit("double", double, _inputs), Unit("triple", lambda x: x * 3, _inputs, atol=1e-6)]


def selective_units(only: list[str] | None = None) -> list[Unit]:
    """Three units, or just those named in `only` (what a worker passes a factory that takes it)."""
    units = [Unit(name, double, _inputs) for name in ("a", "b", "c")]
    return units if only is None else [u for u in units if u.name in only]


def _in_serve_worker() -> bool:
    return "serve" in sys.argv[1:2]


def hanging_units() -> list[Unit]:
    if _in_serve_worker():
        time.sleep(600)
    return [Unit("sleeper", double, _inputs)]


def crashing_units() -> list[Unit]:
    if _in_serve_worker():
        os.abort()
    return [Unit("crasher", double, _inputs)]


def _raises(x):
    raise RuntimeError("operation not permitted when stream is capturing")


def _aborts(x):
    os.abort()


def _sleeps(x):
    time.sleep(600)


def _noisy(x):
    import torch

    return x + torch.rand_like(x)  # differs from call to call: a verdict (GD301) on any machine


PLANTED = {"ok": double, "bad": _raises, "abort": _aborts, "hang": _sleeps, "noisy": _noisy}


def planted_units(log: str, plan: str, gpus: int = 1) -> list[Unit]:
    """Units named u0, u1, ... behaving as `plan` says ("ok,bad,ok"); every build appends a line to `log`.

    It takes `gpus`, so it counts as a target placed over every GPU it is given (one lane).
    """
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(f"build {os.getpid()}\n")
    return [Unit(f"u{i}", PLANTED[kind], _inputs) for i, kind in enumerate(plan.split(","))]


def not_units():
    return ["not a unit"]


def duplicate_units() -> list[Unit]:
    return [Unit("same", double, _inputs), Unit("same", double, _inputs)]


def raising_factory():
    raise RuntimeError("checkpoint missing")


def gpu_planted_units(log: str, plan: str, gpus: int = 1) -> list[Unit]:
    """`planted_units` on a GPU: "ok" scales by a weight the build made; "sync" also reads an element to
    the host, which fails (and poisons) a capture; "raise" raises before any capture. Only builds in `serve`
    workers are logged."""
    import torch

    if _in_serve_worker():
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(f"build {os.getpid()}\n")
    weight = torch.randn(4096, device="cuda")

    def ok(x):
        return x * weight

    def sync(x):
        return x * weight[0].item()

    def broken(x):
        raise ValueError("planted: this step cannot run")

    def inputs(seed):
        return (torch.full((4096,), float(seed), device="cuda"),)

    kinds = {"ok": ok, "sync": sync, "raise": broken}
    return [Unit(f"u{i}", kinds[kind], inputs) for i, kind in enumerate(plan.split(","))]


BREAK_POINTER_AUDIT = "GRAPHREADY_TEST_BREAK_POINTER_AUDIT"


class _Gone:
    pass


def _break_pointer_audit() -> None:
    """Hand the real pointer audit a dead weak proxy among the inputs it walks: it raises ReferenceError in
    graphready's own code, as it did on a CuTe DSL runtime's proxies (issue 26)."""
    from graphready.harness.checks.pointers import pointers

    real = pointers.audit_capture
    gone = _Gone()
    dead = weakref.proxy(gone)
    del gone

    def audit_capture(run, graph, inputs, outputs, *rest):
        return real(run, graph, (*inputs, dead), outputs, *rest)

    pointers.audit_capture = audit_capture


class _HostCounter:
    """A Python step counter: the graph keeps the value it captured, so replays differ from eager (GD301)."""

    def __init__(self) -> None:
        self.steps = 0

    def __call__(self, x):
        self.steps += 1
        return x + self.steps


def gpu_broken_check_units() -> list[Unit]:
    """A unit with a verdict (GD301) and a clean one, checked with a bug planted in the pointer audit when
    the environment names `BREAK_POINTER_AUDIT` (serve workers only)."""
    import torch

    if os.environ.get(BREAK_POINTER_AUDIT) and _in_serve_worker():
        _break_pointer_audit()
    weight = torch.randn(4096, device="cuda")

    def scale(x):
        return x * weight

    def inputs(seed):
        return (torch.full((4096,), float(seed), device="cuda"),)

    return [Unit("counter", _HostCounter(), inputs), Unit("scale", scale, inputs)]


def _padded_inputs(seed: int, key: int):
    import torch

    return (torch.full((key,), float(seed)),)


def keyed_units() -> list[Unit]:
    """One unit captured at two padded lengths, next to a plain one."""
    return [Unit("pad", double, _padded_inputs, keys=(1, 8)), Unit("plain", double, _inputs)]
