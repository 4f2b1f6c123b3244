"""The built-in dsv4 target lists its units without building the model, and finds each layer's state."""

from __future__ import annotations

import pytest
from dsv4.config import preset

from graphready.harness.targets.dsv4 import _mutable_tensors, factory


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


def test_the_pointer_audit_reaches_every_tensor_of_the_cached_model(monkeypatch):
    """GD307 owns a buffer when the unit reaches it: dsv4's units reach the model only through the
    target's `functools.cache` factory, so the walk must go through it, or every weight is unknown."""
    import functools

    from dsv4.model import DSV4Model
    from dsv4.synth import synthetic_weights

    from graphready.harness.checks.reachable import reachable_tensors
    from graphready.harness.targets import dsv4 as target_module

    config = preset("tiny")

    @functools.cache
    def cpu_model(preset_name, checkpoint, gpus):
        return DSV4Model(config, synthetic_weights(config), devices=["cpu"], max_len=1024)

    monkeypatch.setattr(target_module, "_model", cpu_model)
    units = factory("tiny")
    model = units[0].setup() or cpu_model("tiny", None, 1)
    held = _held_tensors(model)
    for unit in units:
        reached = {id(t) for t in reachable_tensors([unit.fn, *unit.reaches, unit.state])}
        missing = [tuple(t.shape) for key, t in held.items() if key not in reached]
        assert not missing, f"{unit.name}: {len(missing)} of {len(held)} model tensors unreached, e.g. {missing[:5]}"
