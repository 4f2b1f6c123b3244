"""The built-in dsv4 target lists its units without building the model, and finds each layer's state."""

from __future__ import annotations

import functools
import json

import pytest
from dsv4.config import preset

from graphready.harness.targets.dsv4 import _mutable_tensors, factory


@functools.cache
def _cpu_model(preset_name: str, checkpoint: str | None, gpus: int, mtp: bool):
    """The target's model on the CPU (tiny, synthetic weights), built once per test process."""
    from dsv4.model import DSV4Model
    from dsv4.synth import synthetic_weights

    config = preset("tiny")
    return DSV4Model(config, synthetic_weights(config, mtp=mtp), devices=["cpu"], max_len=1024, speculative=mtp)


@pytest.fixture
def on_cpu(monkeypatch):
    """Units of the target built over `_cpu_model` instead of a GPU."""
    from graphready.harness.targets import dsv4 as target_module

    monkeypatch.setattr(target_module, "_model", _cpu_model)


def test_one_unit_per_layer_plus_the_full_step_without_building_anything():
    units = factory("tiny")
    layers = preset("tiny").num_hidden_layers
    assert [u.name for u in units] == [f"layer{i}" for i in range(layers)] + ["step"]
    assert all(u.atol > 0 and u.device is None for u in units)
    assert len({u.setup for u in units}) == 1  # one build serves every unit


def test_over_two_gpus_layers_sit_on_their_gpu_and_the_step_is_one_unit_per_gpu():
    units = factory("tiny", gpus=2)
    assert [(u.name, u.device) for u in units] == [
        ("layer0", "cuda:0"), ("layer1", "cuda:0"), ("layer2", "cuda:0"),
        ("layer3", "cuda:1"), ("layer4", "cuda:1"), ("layer5", "cuda:1"),
        ("step.gpu0", "cuda:0"), ("step.gpu1", "cuda:1"),
    ]
    assert [u.name for u in factory("tiny", gpus=16)][-6:] == [f"step.gpu{k}" for k in range(6)]  # capped at L


def test_units_declare_the_model_code_they_dispatch_to():
    from dsv4.layers.block import Block
    from dsv4.model import DSV4Model

    units = factory("tiny")
    assert Block.attention in units[0].reaches and DSV4Model.head_graph in units[-1].reaches


def test_with_mtp_the_mtp_layer_and_the_advance_step_are_units_of_their_own():
    from dsv4.model import DSV4Model
    from dsv4.mtp import MTPLayer, Speculation

    layers = [f"layer{i}" for i in range(preset("tiny").num_hidden_layers)]
    units = factory("tiny", mtp=True)
    assert [u.name for u in units] == [*layers, "mtp", "advance", "step"]
    by_name = {u.name: u for u in units}
    assert MTPLayer.step_graph in by_name["mtp"].reaches and Speculation.advance in by_name["advance"].reaches
    assert {DSV4Model.mtp_graph, DSV4Model.advance_graph} <= set(by_name["step"].reaches)
    assert DSV4Model.mtp_graph not in factory("tiny")[-1].reaches


def test_with_mtp_over_two_gpus_the_mtp_layer_and_advance_run_on_the_last_gpu():
    units = factory("tiny", gpus=2, mtp=True)
    assert [(u.name, u.device) for u in units][-4:] == [
        ("mtp", "cuda:1"), ("advance", "cuda:1"), ("step.gpu0", "cuda:0"), ("step.gpu1", "cuda:1"),
    ]


def test_with_mtp_the_memory_check_counts_the_mtp_layer(monkeypatch):
    """A GPU with room for pro-4L but not for its MTP layer (a fifth Pro layer) refuses only --mtp."""
    import torch
    from dsv4.memory import memory_needed

    from graphready.harness.targets.dsv4 import DoesNotFit

    plain, speculative = (memory_needed(preset("pro-4L"), 1, mtp=mtp)[0].total for mtp in (False, True))
    assert plain < speculative
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: ((plain + speculative) // 2, speculative))
    assert len(factory("pro-4L")) == 5
    with pytest.raises(DoesNotFit, match=r"dsv4 --preset pro-4L --mtp needs"):
        factory("pro-4L", mtp=True)


def test_mtp_on_a_config_without_an_mtp_layer_is_a_usage_error(tmp_path):
    from graphready.errors import UsageError

    config = preset("tiny").to_dict()
    config.update(num_nextn_predict_layers=0, compress_ratios=config["compress_ratios"][:-1])
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert len(factory(checkpoint=str(tmp_path))) == 7
    with pytest.raises(UsageError, match="no MTP layer"):
        factory(checkpoint=str(tmp_path), mtp=True)


def test_with_mtp_every_unit_steps_two_rows_and_declares_the_state_it_carries(on_cpu):
    """The CPU half of GD306: two eager steps from the restored declared state agree, and the MTP block's
    KV cache and the accepted count and emitted tokens of the advance step are in that state."""
    from graphready.harness.checks.replay.state import eager_difference, storages
    from graphready.harness.compare import as_outputs, clone_all

    units = {u.name: u for u in factory("tiny", mtp=True)}
    model = units["mtp"].setup() or _cpu_model("tiny", None, 1, True)
    assert model.rows == 2 and units["layer0"].make_inputs(0)[1].shape == (2,)
    declared = {name: storages(unit.state()) for name, unit in units.items()}
    must = {"mtp": [model.mtp.block.attn.kv_cache], "advance": [model.spec.accepted, model.spec.emitted]}
    must["step"] = must["mtp"] + must["advance"] + [model.layers[0].attn.kv_cache]
    for name, tensors in must.items():
        assert storages(tensors) <= declared[name], name
    for name, unit in units.items():
        for seed in (1, 2):  # odd seeds accept the draft in `advance`, even ones reject it
            inputs = unit.make_inputs(seed)
            state0 = clone_all(unit.state())

            def restore(unit=unit, state0=state0):
                for current, saved in zip(unit.state(), state0):
                    current.copy_(saved)

            assert eager_difference(lambda: as_outputs(unit.fn(*inputs)), restore, unit.state, 0, 0) is None, name
    decided, fed, position, drafts = units["advance"].make_inputs(1)
    units["advance"].fn(decided, fed, position, drafts)
    assert int(model.spec.pos) == int(position) + 2  # the draft was accepted: two tokens on


def test_every_preset_name_lists_and_a_bad_one_is_a_usage_error():
    from graphready.errors import UsageError

    assert len(factory("flash")) == 44 and len(factory("pro")) == 62 and len(factory("pro-3L")) == 4
    with pytest.raises(UsageError, match="unknown preset 'huge'"):
        factory("huge")


def test_layer_state_is_every_cache_and_compressor_state_of_the_layer():
    from dsv4.model import DSV4Model
    from dsv4.synth import synthetic_weights

    config = preset("tiny")
    model = DSV4Model(config, synthetic_weights(config), devices=["cpu"], max_len=1024)
    for index, ratio in enumerate(config.compress_ratios[: config.num_hidden_layers]):
        state = _mutable_tensors(model.layers[index])
        kv_cache = model.layers[index].attn.kv_cache
        assert any(t is kv_cache for t in state)
        if ratio == 0:
            assert len(state) == 1  # window-only layer: just the KV cache
        else:
            assert len(state) > 1  # compressor kv/score states (and the indexer's, for ratio 4)


def _held_tensors(root) -> dict[int, object]:
    """Every tensor `root`'s object graph holds, by the garbage collector's own references (the oracle)."""
    import gc
    import types

    import torch

    found, seen, stack = {}, set(), [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (types.ModuleType, type, types.FunctionType, str, bytes)):
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            found[id(obj)] = obj
            continue
        stack.extend(gc.get_referents(obj))
    return found


@pytest.mark.parametrize("mtp", [False, True])
def test_the_pointer_audit_reaches_every_tensor_of_the_cached_model(on_cpu, mtp):
    """GD307 owns a buffer when the unit reaches it: dsv4's units reach the model only through the
    target's `functools.cache` factory, so the walk must go through it, or every weight is unknown."""
    from graphready.harness.checks.pointers.reachable import reachable_tensors

    units = factory("tiny", mtp=mtp)
    model = units[0].setup() or _cpu_model("tiny", None, 1, mtp)
    held = _held_tensors(model)
    for unit in units:
        reached = {id(t) for t in reachable_tensors([unit.fn, *unit.reaches, unit.state])}
        missing = [tuple(t.shape) for key, t in held.items() if key not in reached]
        assert not missing, f"{unit.name}: {len(missing)} of {len(held)} model tensors unreached, e.g. {missing[:5]}"
