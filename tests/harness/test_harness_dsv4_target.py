"""The built-in dsv4 target lists its units without building the model, and finds each layer's state."""

from __future__ import annotations

from dsv4.config import preset

from graphready.harness.targets.dsv4 import _mutable_tensors, factory


def test_one_unit_per_layer_plus_the_full_step_without_building_anything():
    units = factory("tiny")
    layers = preset("tiny").num_hidden_layers
    assert [u.name for u in units] == [f"layer{i}" for i in range(layers)] + ["step"]
    assert all(u.atol > 0 and u.device is None for u in units)


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
