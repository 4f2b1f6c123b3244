"""State discovery (GD306), the address audit (GD305) and their reachability walk, on the CPU.

The GPU runs of the same checks are the hazard units in tests/hazards; here the pure-Python parts
run on CPU tensors: owner paths, fingerprints, which tensors a step carries over, the line that
re-binds an attribute, and the frames of Cython extensions.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import time
import traceback
import weakref
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from graphready.harness import Unit
from graphready.harness.checks.pointers import rebind
from graphready.harness.checks.replay import state
from graphready.harness.frames import extension_frame, user_frame
from graphready.harness.reach import Reached, owner_names, reachable_tensors, resolve, roots_of
from graphready.harness.session import CheckOptions, UnitRun

ROOT = Path(__file__).resolve().parents[2]


class Layer:
    def __init__(self) -> None:
        self.keys = torch.zeros(4, 3)
        self.position = torch.zeros((), dtype=torch.int64)


class Cache:
    def __init__(self, layers: int) -> None:
        self.layers = [Layer() for _ in range(layers)]


@dataclass
class Settings:
    scale: torch.Tensor


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(3, 3)
        self.stack = torch.nn.ModuleList([torch.nn.Linear(3, 3)])
        self.register_buffer("window", torch.ones(3))
        self.settings = Settings(torch.ones(()))
        self.table = {"bias": torch.zeros(3)}

    def forward(self, x):
        return self.proj(x) * self.settings.scale


def _paths(fn) -> set[str]:
    return {item.path for item in reachable_tensors(fn)}


def test_paths_name_closure_variables_nested_lists_and_attributes():
    cache = Cache(2)

    def decode(x):
        return x + cache.layers[1].keys

    assert _paths(decode) == {
        "cache.layers[0].keys", "cache.layers[0].position", "cache.layers[1].keys", "cache.layers[1].position",
    }


def test_paths_walk_modules_dataclasses_dicts_and_bound_methods():
    block = Block()
    paths = _paths(block.forward)
    assert {"self.proj.weight", "self.stack[0].bias", "self.window", "self.settings.scale", "self.table['bias']"} <= paths
    assert not any("_forward_hooks" in p for p in paths)
    assert _paths(block) == paths  # a module handed over as the callable itself


def test_partials_defaults_and_globals_are_roots():
    bias = torch.ones(2)

    def add(x, extra, weight=torch.zeros(2)):
        return x + extra + weight + bias

    names = {name for name, _ in roots_of(functools.partial(add, extra=torch.ones(2)))}
    assert {"extra", "weight", "bias"} <= names


def test_walk_survives_cycles_and_shares_one_path_per_tensor():
    a, b = Cache(1), Cache(1)
    a.other, b.other = b, a
    b.layers = a.layers

    def step():
        return a

    paths = _paths(step)
    assert paths == {"a.layers[0].keys", "a.layers[0].position"}


def test_resolve_follows_a_path_to_the_current_object():
    block = Block()
    item = next(r for r in reachable_tensors(block.forward) if r.path == "self.stack[0].weight")
    assert resolve(block.forward, item.root, item.steps) is item.tensor
    block.stack[0].weight = torch.nn.Parameter(torch.zeros(3, 3))
    assert resolve(block.forward, item.root, item.steps) is block.stack[0].weight


def test_owner_names_for_tensors_found_without_a_path():
    layer, settings = Layer(), Settings(torch.ones(()))
    table = {"bias": torch.zeros(2)}
    loose = torch.zeros(5)
    tensors = [layer.position, settings.scale, table["bias"], loose]
    records = [Reached("", (), t) for t in tensors]  # the walk's own records hold them too: no owners
    assert owner_names(tensors) == ["Layer.position", "Settings.scale", "<dict>['bias']", "<tensor (5,) float32>"]
    del records


def test_fingerprints_see_any_byte_change_and_nothing_else():
    tensors = [torch.zeros((), dtype=torch.int64), torch.zeros(5, dtype=torch.bool), torch.arange(9.0)]
    watched = [Reached(f"t{i}", (), t) for i, t in enumerate(tensors)]
    before = state.fingerprints(watched)
    assert state.fingerprints(watched) == before
    tensors[1][4] = True
    tensors[2][[3, 4]] = tensors[2][[4, 3]]  # a swap keeps the plain sum; the weighted one sees it
    after = state.fingerprints(watched)
    assert [a == b for a, b in zip(before, after)] == [True, False, False]


class HiddenCounter:
    """A cache written at a counter the unit may or may not declare."""

    def __init__(self) -> None:
        self.cache = torch.zeros(4, 3)
        self.position = torch.zeros(1, dtype=torch.int64)
        self.weights = torch.arange(1.0, 5.0)
        self.scratch = torch.zeros(3)

    def __call__(self, x):
        self.scratch.copy_(x * 2)
        self.cache.index_copy_(0, self.position, self.scratch[None])
        self.position.add_(1).remainder_(4)  # the undeclared counter
        return (self.cache * self.weights[:, None]).sum(0)


COUNTER_LINE = next(i for i, line in enumerate(inspect.getsource(HiddenCounter).splitlines())
                    if "undeclared counter" in line) + inspect.getsourcelines(HiddenCounter)[1]


def _inputs(seed: int):
    return (torch.full((3,), float(seed + 1)),)


def _settle(unit: Unit) -> UnitRun:
    run = UnitRun(unit, torch.device("cpu"), CheckOptions(root=ROOT), lambda _: None)
    state0 = state.clone_all(run.state_tensors())
    state.settle(run, unit.make_inputs(0), (unit.make_inputs(1), unit.make_inputs(2)), state0)
    return run


def test_undeclared_counter_is_named_at_the_line_that_mutates_it():
    counter = HiddenCounter()
    run = _settle(Unit("u", counter, _inputs, state=lambda: (counter.cache,)))
    [finding] = run.result.findings
    assert finding.rule == "GD306"
    assert "`self.position` (1 int64)" in finding.message and "scratch" not in finding.message
    assert (finding.path, finding.line) == ("tests/harness/test_harness_state.py", COUNTER_LINE)
    assert [t is counter.position for t in run.state_tensors()] == [False, True]


def test_complete_state_stays_quiet():
    counter = HiddenCounter()
    run = _settle(Unit("u", counter, _inputs, state=lambda: (counter.cache, counter.position)))
    assert run.result.findings == []


def test_omitted_state_is_discovered_from_what_the_step_mutates():
    counter = HiddenCounter()
    run = _settle(Unit("u", counter, _inputs))
    assert run.result.findings == []
    assert {id(t) for t in run.state_tensors()} == {id(counter.cache), id(counter.position), id(counter.scratch)}
    assert run.result.notes == ["state discovered: self.cache, self.position, self.scratch"]


class PythonCounter:
    def __init__(self) -> None:
        self.step = 0
        self.scratch = torch.zeros(3)

    def __call__(self, x):
        self.step += 1
        self.scratch.copy_(x * self.step)
        return self.scratch * 1


def test_irreproducible_for_a_reason_outside_tensors_names_nothing():
    counter = PythonCounter()
    run = _settle(Unit("u", counter, _inputs, state=lambda: ()))
    assert run.result.findings == []


class Registry:
    """A process-wide table an engine keeps; units find it through a weak proxy, outside their reach."""

    def __init__(self) -> None:
        self.position = torch.zeros((), dtype=torch.int64)


REGISTRY = Registry()


class ProxiedCounter:
    def __init__(self) -> None:
        self.registry = weakref.proxy(REGISTRY)
        self.cache = torch.zeros(3)

    def __call__(self, x):
        self.registry.position.add_(1)
        self.cache.copy_(x * self.registry.position)
        return self.cache * 1


def test_state_outside_the_reach_is_found_among_every_live_tensor_and_named():
    counter = ProxiedCounter()
    [finding] = _settle(Unit("u", counter, _inputs, state=lambda: (counter.cache,))).result.findings
    assert finding.rule == "GD306" and "`Registry.position` (scalar int64)" in finding.message
    discovered = _settle(Unit("u", ProxiedCounter(), _inputs))
    assert discovered.result.notes[-1] == "state discovered outside the unit's reach: Registry.position"


def test_searching_every_live_tensor_does_not_name_each_one():
    """Naming a tensor scans the heap; naming every live tensor made this search quadratic in the heap
    (93-99 s for a tiny unit beside 31 HF models). Only the culprits are named now."""
    ballast = [torch.zeros(1) for _ in range(3000)]  # what else the process holds
    started = time.perf_counter()
    run = _settle(Unit("u", PythonCounter(), _inputs, state=lambda: ()))
    assert time.perf_counter() - started < 15
    assert run.result.findings == [] and len(ballast) == 3000


class ReboundBias:
    def __init__(self) -> None:
        self.bias = torch.zeros(3)

    def __call__(self, x):
        out = x + self.bias
        self.bias = out.tanh()  # re-bound
        return out


def test_rebound_attribute_is_found_and_located():
    unit = ReboundBias()
    before = rebind.audit(unit)
    old = before[("self", (("attr", "bias"),))]
    unit(torch.ones(3))
    paths = rebind.rebound(before, rebind.audit(unit), graph_reads={old})
    assert paths == [("self", (("attr", "bias"),))]
    assert rebind.rebound(before, rebind.audit(unit), graph_reads=set()) == []  # the graph never read it
    sites = rebind.locate(unit, paths, lambda: unit(torch.ones(3)), ROOT)
    line = inspect.getsourcelines(ReboundBias)[1] + next(
        i for i, text in enumerate(inspect.getsource(ReboundBias).splitlines()) if "# re-bound" in text)
    assert sites[paths[0]].line == line
    assert "`self.bias` was re-bound" in rebind.rebound_message(paths)


def test_in_place_update_is_not_a_rebinding():
    unit = Layer()

    def step(x):
        unit.keys.copy_(x)

    before = rebind.audit(step)
    step(torch.ones(4, 3))
    assert rebind.rebound(before, rebind.audit(step), graph_reads=set(before.values())) == []


def test_cython_frames_are_library_code_kept_as_detail():
    user = traceback.FrameSummary(str(ROOT / "tests" / "user_step.py"), 12, "__call__")
    cython = traceback.FrameSummary("cupy_backends/cuda/api/runtime.pyx", 566, "deviceSynchronize")
    assert user_frame([user, cython], ROOT).line == 12
    assert extension_frame([user, cython]) == "cupy_backends/cuda/api/runtime.pyx:566"
    assert extension_frame([user]) is None


def _hf_units():
    pytest.importorskip("transformers")
    path = ROOT / "tests" / "hazards" / "hf_units.py"
    spec = importlib.util.spec_from_file_location("graphready_hf_units", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_hf_static_cache_counter_is_named_and_complete_state_passes():
    hf = _hf_units()
    declared = hf.TinyDecoder(device="cpu")
    run = _settle(Unit("hf", declared.decode, declared.inputs, state=declared.keys_and_values))
    [finding] = run.result.findings
    assert finding.rule == "GD306"
    # a one-element counter in older transformers, a scalar since 5.x
    assert any(f"`cache.layers[0].cumulative_length` ({shape} int64)" in finding.message for shape in ("1", "scalar"))
    complete = hf.TinyDecoder(device="cpu")
    assert _settle(Unit("hf", complete.decode, complete.inputs, state=complete.complete_state)).result.findings == []
    discovered = _settle(Unit("hf", (llama := hf.TinyDecoder(device="cpu")).decode, llama.inputs))
    assert discovered.result.findings == []
    assert "cache.layers[1].cumulative_length" in discovered.result.notes[0]


def _traced_step(x):
    y = x + 1  # line A
    z = torch.nn.functional.relu(y)  # line B: a library call
    return z


def test_segment_tracer_reports_each_user_line_with_the_library_call_it_made():
    from graphready.harness.linetrace import SegmentTracer

    first = inspect.getsourcelines(_traced_step)[1]
    seen = []
    with SegmentTracer(lambda location, library: seen.append((location and location.line, library)), ROOT):
        _traced_step(torch.ones(2))
    lines = [line for line, _ in seen]
    assert lines[:4] == [None, first, first + 1, first + 2]
    assert seen[3][1].startswith("relu (")
