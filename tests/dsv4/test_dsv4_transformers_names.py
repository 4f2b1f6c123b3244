"""HF transformers' name scheme: the indexer's `scorer.weights_proj` and fused routed-expert tensors."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from dsv4.checkpoint import CheckpointError, load_checkpoint
from dsv4.formats import FP8BlockWeight, MXFP4Weight, quantize_fp8_block
from dsv4.names import detect_scheme
from dsv4.synth import SynthError, synthetic_weights, write_checkpoint

INDEX = "model.safetensors.index.json"


def weight_map(root):
    return json.loads((root / INDEX).read_text())["weight_map"]


@pytest.fixture(scope="module")
def transformers_ckpt(tmp_path_factory, tiny):
    """tiny, official formats (FP8 attention, MXFP4 experts) under transformers names."""
    return write_checkpoint(tiny, tmp_path_factory.mktemp("ckpt") / "tf", "official", seed=5, scheme="transformers",
                            shard_bytes=60_000)


def test_transformers_names_fuse_experts_and_move_the_indexer_head_weights(transformers_ckpt, tiny):
    names = weight_map(transformers_ckpt)
    for disk in ["model.layers.2.self_attn.compressor.indexer.scorer.weights_proj.weight",
                 "model.layers.3.mlp.experts.gate_up_proj", "model.layers.3.mlp.experts.gate_up_proj_scale_inv",
                 "model.layers.3.mlp.experts.down_proj", "model.layers.3.mlp.experts.down_proj_scale_inv",
                 "model.layers.0.self_attn.q_a_proj.weight_scale_inv"]:
        assert disk in names, disk
    assert not any(".mlp.experts.0." in n or n.endswith("indexer.weights_proj.weight") for n in names)
    assert detect_scheme(names) == "transformers"
    tensors = load_file(transformers_ckpt / names["model.layers.3.mlp.experts.gate_up_proj"])
    gate_up = tensors["model.layers.3.mlp.experts.gate_up_proj"]
    assert gate_up.dtype == torch.int8 and list(gate_up.shape) == [8, 2 * 32, 64 // 2]


def test_a_transformers_checkpoint_loads_what_the_other_schemes_load(transformers_ckpt, tiny, tmp_path,
                                                                      assert_same_weights):
    loaded = load_checkpoint(transformers_ckpt)
    assert_same_weights(loaded, synthetic_weights(tiny, "official", seed=5))
    assert isinstance(loaded["layers.3.ffn.experts.w3"], MXFP4Weight)
    hf = write_checkpoint(tiny, tmp_path / "hf", "official", seed=5, scheme="hf")
    assert_same_weights(loaded, load_checkpoint(hf))


def test_bf16_transformers_checkpoint_round_trips(tmp_path, tiny, assert_same_weights):
    root = write_checkpoint(tiny, tmp_path / "bf16", "bf16", seed=6, scheme="transformers")
    assert_same_weights(load_checkpoint(root, tiny, layers=[0, 4]), synthetic_weights(tiny, "bf16", seed=6, layers=[0, 4]))


def test_fused_fp8_experts_split_into_gate_and_up(transformers_ckpt, tiny, tmp_path):
    root = tmp_path / "fp8"
    shutil.copytree(transformers_ckpt, root)
    name = "model.layers.3.mlp.experts.gate_up_proj"
    fused = quantize_fp8_block(torch.randn(8, 64, 64) * 0.1)  # 2I = 64 rows: gate and up share one scale block
    file = weight_map(root)[name]
    tensors = load_file(root / file)
    tensors[name], tensors[name + "_scale_inv"] = fused.weight, fused.scale
    save_file(tensors, root / file)
    got = load_checkpoint(root, tiny, layers=[3])
    gate, up = got["layers.3.ffn.experts.w1"], got["layers.3.ffn.experts.w3"]
    assert isinstance(gate, FP8BlockWeight) and gate.shape == (8, 32, 64)
    whole = fused.dequantize(torch.float32)
    assert torch.equal(gate.dequantize(torch.float32), whole[:, :32])
    assert torch.equal(up.dequantize(torch.float32), whole[:, 32:])


def test_fused_experts_without_their_scale_are_reported(transformers_ckpt, tiny, tmp_path):
    root = tmp_path / "noscale"
    shutil.copytree(transformers_ckpt, root)
    name = "model.layers.3.mlp.experts.down_proj_scale_inv"
    wmap = weight_map(root)
    file = wmap.pop(name)
    tensors = load_file(root / file)
    del tensors[name]
    save_file(tensors, root / file)
    (root / INDEX).write_text(json.dumps({"weight_map": wmap}))
    with pytest.raises(CheckpointError, match="down_proj_scale_inv"):
        load_checkpoint(root, tiny, layers=[3])


def test_nvfp4_experts_have_no_fused_layout(tmp_path, tiny):
    with pytest.raises(SynthError, match="no fused layout"):
        write_checkpoint(tiny, tmp_path / "x", "nvfp4", scheme="transformers")
