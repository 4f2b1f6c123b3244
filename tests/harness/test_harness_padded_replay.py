"""GD309 on the CPU: the `pad_inputs` contract, the row arithmetic, the preparation and index tracers, and the
whole check over every padding fixture with an eager stand-in for the captured graph (the GPU test replays
real graphs: test_harness_padded_replay_gpu.py)."""

from __future__ import annotations

import contextlib
import inspect
from pathlib import Path

import pytest
import torch

from graphready.harness import Unit
from graphready.harness.blame import UnitContractError
from graphready.harness.checks.replay import padded
from graphready.harness.checks.replay.padded_trace import PrepTrace, index_inputs, span
from graphready.harness.compare import as_outputs, clone_all
from graphready.harness.session import CheckOptions, UnitRun
from graphready.harness.unit import padded_key
from padding_cases import CASES, KEYS, REPO_ROOT, load, marked_line


def _batch(seed: int, key: int):
    return (torch.full((key, 2), float(seed)),)


# -- the Unit contract ------------------------------------------------------------------------------


def test_pad_inputs_must_be_callable():
    with pytest.raises(TypeError, match="pad_inputs must be callable"):
        Unit("u", abs, _batch, keys=(4,), pad_inputs="prepare")


def test_pad_inputs_needs_capture_keys():
    with pytest.raises(ValueError, match="pad_inputs needs capture keys"):
        Unit("u", abs, _batch, pad_inputs=lambda inputs, key: inputs)


@pytest.mark.parametrize("keys", [("decode",), (4, 2.0), (0,), (True,)])
def test_pad_inputs_needs_integer_batch_sizes(keys):
    with pytest.raises(ValueError, match="integer keys"):
        Unit("u", abs, _batch, keys=keys, pad_inputs=lambda inputs, key: inputs)


def test_each_key_of_an_expanded_unit_knows_its_batch_size_and_keeps_the_hook():
    def prepare(inputs, key):
        return inputs

    units = Unit("u", abs, _batch, keys=(1, 4), pad_inputs=prepare).expand()
    assert [(u.name, u.key, u.pad_inputs) for u in units] == [("u[1]", 1, prepare), ("u[4]", 4, prepare)]
    assert units[1].make_inputs(0, key=3)[0].shape == (3, 2)  # a real batch of another size, for the check
    assert [padded_key(u.key) for u in units] == [False, True]  # a graph for one row has nothing to pad


def test_a_padded_key_is_an_integer_batch_size_of_at_least_two():
    assert [padded_key(k) for k in (2, 8, 1, "8", 8.0, True, None)] == [True, True, False, False, False, False, False]


# -- rows ---------------------------------------------------------------------------------------------


def test_real_sizes_are_one_half_and_all_but_one_row():
    assert padded.real_sizes(8) == [1, 4, 7]
    assert padded.real_sizes(3) == [1, 2]
    assert padded.real_sizes(2) == [1]


def test_the_row_dimension_is_the_one_the_real_batch_is_shorter_in():
    assert padded.row_dim((8, 16), (3, 16)) == 0
    assert padded.row_dim((2, 8, 16), (2, 3, 16)) == 1  # layer-major buffers
    assert padded.row_dim((8,), (8,)) is None
    for full, real in [((8, 16), (3, 4)), ((8,), (9,)), ((8, 16), (3,))]:
        with pytest.raises(ValueError):
            padded.row_dim(full, real)


def test_only_the_real_rows_of_the_outputs_are_compared():
    eager = (torch.ones(3, 4), torch.tensor(2.0))
    graphed = (torch.cat([torch.ones(3, 4), torch.full((5, 4), 9.0)]), torch.tensor(2.0))
    assert padded.real_rows_difference(eager, graphed, 0.0, 0.0) is None
    graphed[0][1, 2] = 0.0
    assert padded.real_rows_difference(eager, graphed, 0.0, 0.0).startswith("output 0 differs")
    assert "graphed and (3, 5) eager" in padded.real_rows_difference((torch.ones(3, 5),), (torch.ones(8, 4),), 0, 0)


def test_a_hook_returning_other_inputs_than_the_graph_takes_is_a_contract_error():
    statics = [torch.zeros(8, 2), torch.zeros(8)]
    assert padded.check_prepared((torch.ones(8, 2), torch.ones(8)), statics, 8)[1].shape == (8,)
    with pytest.raises(UnitContractError, match=r"pad_inputs returned 1 tensors for the graph captured for 8, whose "
                                                r"make_inputs\(seed, key=8\) makes 2"):
        padded.check_prepared(torch.ones(8, 2), statics, 8)
    with pytest.raises(UnitContractError, match=r"make_inputs\(seed, key=3\) makes 1 tensors"):
        padded.input_rows(statics, [torch.ones(3, 2)], 8, 3)


# -- the tracers -------------------------------------------------------------------------------------


class _Runner:
    def __init__(self):
        self.lengths = torch.ones(8, dtype=torch.int64)
        self.slots = torch.zeros(8, dtype=torch.int64)

    def prepare(self, batch, bs):
        lengths, slots = batch
        raw_bs = lengths.shape[0]
        if bs != raw_bs:
            self.lengths.fill_(1)  # pad reset
        self.lengths[:raw_bs].copy_(lengths)
        head = self.slots[:raw_bs]  # chooses the rows
        head.copy_(slots)
        return self.lengths[:bs], self.slots[:bs]


def _line(function, marker: str) -> int:
    lines, first = inspect.getsourcelines(function)
    return first + next(i for i, text in enumerate(lines) if marker in text)


def test_the_preparation_trace_finds_the_slice_that_chose_the_refreshed_rows_and_the_pad_reset():
    runner = _Runner()
    trace = PrepTrace(REPO_ROOT)
    with trace:
        lengths, slots = runner.prepare((torch.full((3,), 5), torch.arange(3)), 8)
    assert trace.refresh(span(slots[:3])).line == _line(_Runner.prepare, "# chooses the rows")
    assert [loc.line for loc in trace.resets([span(lengths[3:])])] == [_line(_Runner.prepare, "# pad reset")]
    assert trace.resets([span(slots[3:])]) == []
    assert trace.made_at(slots).line == _line(_Runner.prepare, "return self.lengths")


def _draft(hidden, positions, slots, table, cache):
    rotary = table[positions.clamp(min=0)]  # a derived tensor still indexes
    cache.index_copy_(0, slots, hidden * rotary)
    return hidden * 2


def test_index_use_follows_derived_tensors_to_index_arguments():
    table, cache = torch.rand(16, 4), torch.zeros(16, 4)
    inputs = (torch.rand(3, 4), torch.tensor([1, 5, 7]), torch.tensor([2, 3, 4]))
    used = index_inputs(lambda batch: _draft(*batch, table, cache), inputs, REPO_ROOT)
    assert sorted(used) == [1, 2]  # positions and slots; hidden only flows into values
    assert used[1].line == _line(_draft, "# a derived tensor")


# -- the whole check over the fixtures, with an eager stand-in for the captured graph -------------------


class _EagerGraph:
    """Stands in for a graph captured on `statics`: a replay runs the step on them into the static outputs."""

    def __init__(self, fn, statics, outputs):
        self.fn, self.statics, self.outputs = fn, statics, outputs

    def replay(self):
        for static, out in zip(self.outputs, as_outputs(self.fn(*self.statics))):
            static.copy_(out)


class _Stream:
    def synchronize(self):
        pass


def _check_on_cpu(monkeypatch, name: str) -> dict:
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args, **kwargs: None)
    monkeypatch.setattr(torch.cuda, "stream", lambda *args, **kwargs: contextlib.nullcontext())
    found = {}
    for unit in load(name, "cpu").units():
        for keyed in unit.expand():
            run = UnitRun(keyed, torch.device("cpu"), CheckOptions(root=REPO_ROOT), lambda phase: None)
            statics = tuple(keyed.make_inputs(0))
            outputs = clone_all(as_outputs(keyed.fn(*statics)))
            state0 = clone_all(run.state_tensors())
            run.restore(state0)
            padded.check(run, _EagerGraph(keyed.fn, statics, outputs), statics, outputs, state0, _Stream())
            found[keyed.name] = run.result.findings
    return found


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_shipped_padding_bug_is_found_at_its_line(monkeypatch, case):
    _, severity, keys = CASES[case]
    found = _check_on_cpu(monkeypatch, f"{case}_bug")
    path = Path("tests/fixtures/padding", f"{case}_bug.py").as_posix()
    for key in KEYS:
        findings = found[f"{case}_bug[{key}]"]
        got = [(f.rule, f.severity.label, f.path, f.line) for f in findings]
        assert got == ([("GD309", severity, path, marked_line(case))] if key in keys else []), (key, findings)


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_fix_is_quiet(monkeypatch, case):
    found = _check_on_cpu(monkeypatch, f"{case}_fixed")
    assert found == {f"{case}_fixed[{key}]": [] for key in KEYS}


def test_without_a_hook_the_harness_pads_and_finds_real_rows_that_depend_on_padded_ones(monkeypatch):
    found = _check_on_cpu(monkeypatch, "router_load")
    [finding] = found["router_load_over_batch[8]"]
    first_line = inspect.getsourcelines(load("router_load", "cpu").load_over_batch)[1]
    assert (finding.rule, finding.severity.label, finding.line) == ("GD309", "error", first_line)
    assert "the harness's own padding" in finding.message and "its real rows differ: output 0" in finding.message
    assert found["router_per_token[8]"] == []


def test_without_a_hook_a_unit_whose_inputs_cannot_be_padded_is_noted_not_judged(monkeypatch):
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args, **kwargs: None)

    def fixed_size(seed, key):
        if key != 8:
            raise ValueError("only the captured sizes")
        return (torch.ones(8, 2),)

    unit = Unit("u", lambda x: x * 2, fixed_size, keys=(8,)).expand()[0]
    run = UnitRun(unit, torch.device("cpu"), CheckOptions(root=REPO_ROOT), lambda phase: None)
    statics = tuple(unit.make_inputs(0))
    padded.check(run, None, statics, clone_all(statics), (), _Stream())
    assert run.result.findings == []
    assert run.result.notes == ["padded replay (GD309) not checked: make_inputs(seed, key=1) raised ValueError: only "
                                "the captured sizes; declare pad_inputs, or make inputs for any batch size up to the key"]
