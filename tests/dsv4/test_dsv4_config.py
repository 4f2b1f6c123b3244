import json

import pytest

from dsv4.config import ConfigError, DSV4Config, load_config, preset


def kinds(c: DSV4Config) -> list[str]:
    return [c.layer_kind(i) for i in range(c.num_hidden_layers)]


def test_tiny_has_every_layer_kind_with_and_without_hash_routing(tiny):
    hashed = {tiny.layer_kind(i) for i in range(tiny.num_hidden_layers) if tiny.is_hash_layer(i)}
    routed = {tiny.layer_kind(i) for i in range(tiny.num_hidden_layers) if not tiny.is_hash_layer(i)}
    assert hashed == routed == {"window", "csa", "hca"}
    assert len(tiny.compress_ratios) == tiny.num_hidden_layers + 1
    assert tiny.sliding_window == 128
    assert tiny.head_dim > tiny.qk_rope_head_dim and tiny.index_head_dim > tiny.qk_rope_head_dim


def test_tiny_widths_fit_fp4_blocks_and_exercise_fp8_padding(tiny):
    # NVFP4 (16) and MXFP4 (32) blocks must divide every in-feature count; FP8's 128 must not (padding path).
    ins = {tiny.hidden_size, tiny.q_lora_rank, tiny.moe_intermediate_size, tiny.o_groups * tiny.o_lora_rank,
           tiny.num_attention_heads // tiny.o_groups * tiny.head_dim}
    assert all(i % 32 == 0 for i in ins)
    assert any(i % 128 for i in ins)


def test_pro_matches_the_spec():
    c = preset("pro")
    assert (c.hidden_size, c.num_hidden_layers, c.n_routed_experts, c.moe_intermediate_size) == (7168, 61, 384, 3072)
    assert (c.q_lora_rank, c.o_groups, c.o_lora_rank, c.index_topk, c.routed_scaling_factor) == (1536, 16, 1024, 1024, 2.5)
    k = kinds(c)
    assert k[:2] == ["hca", "hca"]
    assert all(k[i] == ("csa" if i % 2 == 0 else "hca") for i in range(2, 61))
    assert len(c.compress_ratios) == 62 and c.layer_kind(61) == "window"
    assert [c.is_hash_layer(i) for i in range(4)] == [True, True, True, False]


def test_flash_matches_the_spec():
    c = preset("flash")
    assert (c.hidden_size, c.num_hidden_layers, c.n_routed_experts, c.num_attention_heads) == (4096, 43, 256, 64)
    k = kinds(c)
    assert k[:2] == ["window", "window"]
    assert all(k[i] == ("csa" if i % 2 == 0 else "hca") for i in range(2, 43))
    assert len(c.compress_ratios) == 44


def test_pro_n_layers_keeps_pro_widths_and_layer_mix():
    pro, c = preset("pro"), preset("pro-4L")
    assert c.num_hidden_layers == 4 and c.hidden_size == pro.hidden_size and c.n_routed_experts == 384
    assert c.compress_ratios == pro.compress_ratios[:4] + (0,)
    assert preset("pro-2L").num_hash_layers == 2


@pytest.mark.parametrize("name", ["huge", "pro-0L", "pro-62L", "pro-4", "Pro"])
def test_unknown_preset_lists_the_choices(name):
    with pytest.raises(ConfigError, match="tiny, pro, flash, pro-<N>L"):
        preset(name)


def test_config_json_round_trip_from_file_and_directory(tmp_path, tiny):
    d = tiny.to_dict()
    d["rope_theta"] = 10000  # JSON writers drop the ".0"; the config still holds a float
    d["some_unrelated_key"] = "ignored"
    (tmp_path / "config.json").write_text(json.dumps(d))
    for p in (tmp_path, tmp_path / "config.json"):
        c = load_config(p)
        assert c == tiny and isinstance(c.rope_theta, float)


def test_rope_parameters_is_accepted_for_rope_scaling(tmp_path, tiny):
    d = tiny.to_dict()
    d["rope_parameters"] = d.pop("rope_scaling")
    (tmp_path / "config.json").write_text(json.dumps(d))
    assert load_config(tmp_path).rope_scaling["factor"] == 16.0


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.pop("compress_ratios"), "missing key.*compress_ratios"),
    (lambda d: d.update(compress_ratios=[4] * 6), "compress_ratios has 6 entries, expected 7"),
    (lambda d: d.update(compress_ratios=[4, 4, 4, 4, 4, 64, 0]), "compress_ratios may only hold"),
    (lambda d: d.update(hidden_size="64"), "hidden_size must be an integer"),
    (lambda d: d.update(qk_rope_head_dim=80), "qk_rope_head_dim"),
    (lambda d: d.update(num_experts_per_tok=9), "num_experts_per_tok"),
])
def test_bad_config_is_a_clear_error_naming_the_file(tmp_path, tiny, edit, message):
    d = tiny.to_dict()
    edit(d)
    (tmp_path / "config.json").write_text(json.dumps(d))
    with pytest.raises(ConfigError, match=message) as e:
        load_config(tmp_path)
    assert "config.json" in str(e.value)


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config(tmp_path)


def test_layer_kind_includes_the_mtp_layer_and_rejects_others(tiny):
    assert tiny.layer_kind(tiny.num_hidden_layers) == "window"
    with pytest.raises(IndexError):
        tiny.layer_kind(tiny.num_hidden_layers + 1)


def test_config_is_frozen_and_hashable(tiny):
    with pytest.raises(AttributeError):
        tiny.hidden_size = 1
    assert {tiny: 1}[preset("tiny")] == 1
