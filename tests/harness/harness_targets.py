"""Targets for the CPU tests of the harness plumbing: they list without a GPU.

Their factories build nothing on a device; `hanging_units` and `crashing_units` misbehave only
inside a `run` worker, the way a broken unit takes its worker down on a GPU machine.
"""

from __future__ import annotations

import os
import sys
import time

from graphready.harness import Unit


def _inputs(seed: int):
    import torch

    return (torch.full((4,), float(seed)),)


def double(x):
    return x * 2


def two_units() -> list[Unit]:
    return [Unit("double", double, _inputs), Unit("triple", lambda x: x * 3, _inputs, atol=1e-6)]


def _in_run_worker() -> bool:
    return "run" in sys.argv[1:2]


def hanging_units() -> list[Unit]:
    if _in_run_worker():
        time.sleep(600)
    return [Unit("sleeper", double, _inputs)]


def crashing_units() -> list[Unit]:
    if _in_run_worker():
        os.abort()
    return [Unit("crasher", double, _inputs)]


def not_units():
    return ["not a unit"]


def duplicate_units() -> list[Unit]:
    return [Unit("same", double, _inputs), Unit("same", double, _inputs)]


def raising_factory():
    raise RuntimeError("checkpoint missing")
