"""GD305 between replays, the pure part on CPU tensors: which owner paths are watched, what counts as
a re-bind (a new storage, not a view of the same one, not an attribute the graph never read), that
looking never raises, and that the preparation's assigning line is found."""

from __future__ import annotations

import inspect
import weakref
from pathlib import Path

import torch

from graphready.harness.checks.pointers import rebind
from graphready.harness.checks.pointers.rebind import rebound_message
from graphready.harness.checks.pointers.rebind_between import PREPARATION, ReadPaths, storages

ROOT = Path(__file__).resolve().parents[2]
BIAS = ("self", (("attr", "bias"),))
KV = ("self", (("attr", "kv"),))
LENGTHS = ("self", (("attr", "lengths"),))
POSITIONS = ("self", (("attr", "buffers"), ("item", "positions")))


class Runner:
    """A step and the preparation an engine runs before each replay, in the ways they differ."""

    def __init__(self) -> None:
        self.bias = torch.zeros(4)
        self.kv = torch.zeros(8)
        self.lengths = torch.zeros(2, dtype=torch.int64)  # bookkeeping the step never reads
        self.buffers = {"positions": torch.zeros(16, dtype=torch.int64)}

    def __call__(self, x):
        return x + self.bias + self.kv.view(2, 4).sum(0) + self.buffers["positions"][:4]

    def rebinding_preparation(self, seed: int):
        self.bias = torch.full((4,), float(seed))  # re-binds
        return (torch.ones(4),)

    def in_place_preparation(self, seed: int):
        self.bias.copy_(torch.full((4,), float(seed)))
        self.buffers["positions"][:4].copy_(torch.arange(4) + seed)
        self.kv = self.kv.view(2, 4)
        self.lengths = torch.tensor([seed, seed])
        return (torch.ones(4),)


def _watched(runner: Runner) -> ReadPaths:
    """The paths of everything the step reads, as the session builds them after capture."""
    before = rebind.audit(runner)
    read = {before[path] for path in (BIAS, KV, POSITIONS)}
    return ReadPaths.of(runner, before, read, rebound_in_capture=[])


def test_only_paths_whose_storage_the_graph_read_are_watched():
    runner = Runner()
    before = rebind.audit(runner)
    watch = ReadPaths.of(runner, before, {before[BIAS], before[KV]}, rebound_in_capture=[KV])
    assert set(watch.captured) == {BIAS}  # KV was re-bound by the captured step itself: the step audit's


def test_a_preparation_that_rebinds_what_the_graph_reads_moves_its_path():
    runner = Runner()
    watch = _watched(runner)
    before = watch.look()
    runner.rebinding_preparation(1)
    assert watch.moved(before) == [BIAS]
    watch.reported.add(BIAS)
    before = watch.look()
    runner.rebinding_preparation(2)
    assert watch.moved(before) == []  # reported once


def test_in_place_writes_views_and_unread_attributes_do_not_move():
    runner = Runner()
    watch = _watched(runner)
    before = watch.look()
    runner.in_place_preparation(1)
    runner.in_place_preparation(2)
    assert watch.moved(before) == []


def test_only_what_moved_while_the_watched_code_ran_is_its_doing():
    runner = Runner()
    watch = _watched(runner)
    runner.bias = torch.ones(4)  # the eager reference step, say: the step audit's to report
    before = watch.look()
    assert watch.moved(before) == []
    runner.rebinding_preparation(1)  # moves it again: the preparation re-binds it too
    assert watch.moved(before) == [BIAS]


def test_looking_never_raises():
    runner = Runner()
    watch = _watched(runner)

    class Gone:
        pass

    runner.buffers = weakref.proxy(Gone())  # dead: any question to it raises ReferenceError
    before = watch.look()
    del runner.bias
    assert watch.moved(before) == []
    assert storages(lambda: None, [BIAS]) == {BIAS: None}  # a root the callable does not carry


def test_the_preparations_assigning_line_is_located():
    runner = Runner()
    watch = _watched(runner)
    before = watch.look()
    runner.rebinding_preparation(1)
    [path] = watch.moved(before)
    sites = rebind.locate(runner, [path], lambda: runner.rebinding_preparation(2), ROOT)
    lines, first = inspect.getsourcelines(Runner.rebinding_preparation)
    assert sites[path].line == first + next(i for i, text in enumerate(lines) if "# re-binds" in text)
    message = rebound_message([path], f"by {PREPARATION}, after capture")
    assert message.startswith("`self.bias` was re-bound to a new tensor by the unit's input preparation")
    assert "`self.bias.copy_(new)`" in message
