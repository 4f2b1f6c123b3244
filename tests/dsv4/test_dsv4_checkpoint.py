import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import dsv4.checkpoint as ckpt
from dsv4.checkpoint import CheckpointError, load_checkpoint
from dsv4.formats import BF16Weight, FP8BlockWeight, MXFP4Weight, NVFP4Weight, quantize_fp8_block, quantize_nvfp4
from dsv4.synth import synthetic_weights, write_checkpoint

INDEX = "model.safetensors.index.json"


def copy_ckpt(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "ckpt"
    shutil.copytree(src, dst)
    return dst


def weight_map(root: Path) -> dict[str, str]:
    return json.loads((root / INDEX).read_text())["weight_map"]


def edit_shard(root: Path, name: str, edit) -> str:
    """Rewrite the shard holding ``name`` after ``edit(tensors)``; returns the shard's file name."""
    file = weight_map(root)[name]
    tensors = load_file(root / file)
    edit(tensors)
    save_file(tensors, root / file)
    return file


def test_nvfp4_release_with_hf_names_loads_exactly_what_synth_built(nvfp4_ckpt, tiny, assert_same_weights):
    names = weight_map(nvfp4_ckpt)
    for disk in ["model.embed_tokens.weight", "lm_head.weight", "model.norm.weight", "model.hc_head.hc_fn",
                 "model.layers.0.attn_hc.fn", "model.layers.0.ffn_hc.scale", "model.layers.0.input_layernorm.weight",
                 "model.layers.0.self_attn.q_a_proj.weight", "model.layers.0.self_attn.q_a_proj.weight_scale_inv",
                 "model.layers.0.self_attn.o_a_proj.weight", "model.layers.0.mlp.gate.tid2eid",
                 "model.layers.3.mlp.gate.e_score_correction_bias",
                 "model.layers.2.self_attn.compressor.indexer.q_b_proj.weight",
                 "model.layers.2.self_attn.compressor.position_bias",
                 "model.layers.0.mlp.experts.7.down_proj.weight_scale_2",
                 "model.layers.0.mlp.experts.7.gate_proj.input_scale",
                 "model.layers.5.mlp.shared_experts.up_proj.weight_scale"]:
        assert disk in names, disk
    assert not any(n.startswith("layers.") for n in names)
    loaded = load_checkpoint(nvfp4_ckpt)
    assert_same_weights(loaded, synthetic_weights(tiny, "nvfp4", seed=1))
    assert isinstance(loaded["layers.0.ffn.experts.w1"], NVFP4Weight)
    assert loaded["layers.0.ffn.experts.w1"].shape == (8, 32, 64)
    assert isinstance(loaded["layers.0.attn.wq_b"], FP8BlockWeight)
    assert isinstance(loaded["layers.2.attn.compressor.wkv"], BF16Weight)
    assert loaded["layers.0.ffn.gate.tid2eid"].dtype == torch.int32


def test_official_release_with_official_names_loads_exactly_what_synth_built(official_ckpt, tiny, assert_same_weights):
    names = weight_map(official_ckpt)
    for disk in ["embed.weight", "head.weight", "hc_head_fn", "layers.0.hc_attn_fn", "layers.0.attn.wq_a.weight",
                 "layers.0.attn.wq_a.scale", "layers.0.ffn.experts.3.w2.weight", "layers.0.ffn.experts.3.w2.scale",
                 "layers.2.attn.indexer.compressor.ape", "layers.3.ffn.gate.bias"]:
        assert disk in names, disk
    loaded = load_checkpoint(official_ckpt)
    assert_same_weights(loaded, synthetic_weights(tiny, "official", seed=1))
    assert isinstance(loaded["layers.0.ffn.experts.w3"], MXFP4Weight)
    assert loaded["layers.0.attn.wq_a"].scale_format == "e8m0"


def test_both_name_schemes_give_identical_official_dicts(tmp_path, tiny, assert_same_weights):
    hf = write_checkpoint(tiny, tmp_path / "hf", "official", seed=4, scheme="hf")
    official = write_checkpoint(tiny, tmp_path / "off", "official", seed=4, scheme="official")
    assert set(weight_map(hf)).isdisjoint(weight_map(official))
    assert_same_weights(load_checkpoint(hf), load_checkpoint(official))


def test_one_layer_loads_without_touching_other_shards(nvfp4_ckpt, tiny, monkeypatch):
    opened, read = [], []
    real_open = ckpt.safe_open

    class Recording:
        """safe_open that records which shards are opened and which tensors are read."""

        def __init__(self, path, framework):
            opened.append(Path(path).name)
            self.inner = real_open(path, framework=framework)

        def get_slice(self, name):
            return self.inner.get_slice(name)

        def get_tensor(self, name):
            read.append(name)
            return self.inner.get_tensor(name)

    monkeypatch.setattr(ckpt, "safe_open", Recording)

    got = load_checkpoint(nvfp4_ckpt, tiny, layers=[4])
    wmap = weight_map(nvfp4_ckpt)
    layer_files = {f for n, f in wmap.items() if n.startswith("model.layers.4.")}
    assert len(set(wmap.values())) > len(layer_files) + 2  # the test means something: many other shards exist
    assert set(opened) == layer_files
    assert read and all(n.startswith("model.layers.4.") for n in read)
    assert set(got) == {n for n in synthetic_weights(tiny, "nvfp4", layers=[4])}
    assert all(k.startswith("layers.4.") for k in got)


def test_globals_come_with_layers_only_on_request(nvfp4_ckpt, tiny):
    got = load_checkpoint(nvfp4_ckpt, tiny, layers=[], include_globals=True)
    assert set(got) == {"embed.weight", "head.weight", "norm.weight", "hc_head_fn", "hc_head_base", "hc_head_scale"}


def test_progress_reports_every_entry(nvfp4_ckpt, tiny):
    seen = []
    load_checkpoint(nvfp4_ckpt, tiny, layers=[1], progress=lambda done, total, name: seen.append((done, total, name)))
    assert [d for d, _, _ in seen] == list(range(1, len(seen) + 1)) and seen[-1][1] == len(seen)
    assert seen[-1][2] == "layers.1.ffn.shared_experts.w2"


def test_single_file_checkpoint_without_index(tmp_path, tiny, assert_same_weights):
    root = write_checkpoint(tiny, tmp_path / "one", "bf16", seed=2)
    (root / INDEX).unlink()
    (root / "model-00001-of-00001.safetensors").rename(root / "model.safetensors")
    assert_same_weights(load_checkpoint(root), synthetic_weights(tiny, "bf16", seed=2))


def test_fp8_variants_per_tensor_scale_and_quantized_dense_matrices(nvfp4_ckpt, tmp_path, tiny):
    root = copy_ckpt(nvfp4_ckpt, tmp_path)
    base = "model.layers.3.self_attn.kv_proj"
    gate = "model.layers.3.mlp.gate.weight"

    def per_tensor_scale(t):
        t.pop(base + ".weight_scale_inv")
        t[base + ".weight_scale"] = torch.tensor(0.5)
    edit_shard(root, base + ".weight", per_tensor_scale)
    wmap = weight_map(root)
    wmap[base + ".weight_scale"] = wmap.pop(base + ".weight_scale_inv")
    gate_q = quantize_fp8_block(torch.randn(8, 64), "f32")

    def quantized_gate(t):
        t[gate] = gate_q.weight
        t["model.layers.3.mlp.gate.weight_scale_inv"] = gate_q.scale
    edit_shard(root, gate, quantized_gate)
    wmap["model.layers.3.mlp.gate.weight_scale_inv"] = wmap[gate]
    (root / INDEX).write_text(json.dumps({"weight_map": wmap}))

    got = load_checkpoint(root, tiny, layers=[3])
    kv = got["layers.3.attn.wkv"]
    assert isinstance(kv, FP8BlockWeight) and kv.scale.tolist() == [[0.5]]
    assert torch.equal(got["layers.3.ffn.gate.weight"], gate_q.dequantize(torch.bfloat16))


def test_attention_stored_nvfp4_as_in_the_log_is_detected(nvfp4_ckpt, tmp_path, tiny):
    root = copy_ckpt(nvfp4_ckpt, tmp_path)
    base = "model.layers.1.self_attn.q_a_proj"
    q = quantize_nvfp4(torch.randn(32, 64))
    wmap = weight_map(root)

    def to_nvfp4(t):
        t.pop(base + ".weight_scale_inv")
        t.update({base + ".weight": q.packed, base + ".weight_scale": q.scale, base + ".weight_scale_2": q.global_scale})
    edit_shard(root, base + ".weight", to_nvfp4)
    file = wmap.pop(base + ".weight_scale_inv")
    wmap.update({base + ".weight_scale": file, base + ".weight_scale_2": file})
    (root / INDEX).write_text(json.dumps({"weight_map": wmap}))
    got = load_checkpoint(root, tiny, layers=[1])["layers.1.attn.wq_a"]
    assert isinstance(got, NVFP4Weight) and got.input_scale is None
    assert torch.equal(got.dequantize(), q.dequantize())


# ------------------------------------------------------------------ error paths


def test_missing_index_and_directory(tmp_path, tiny):
    with pytest.raises(CheckpointError, match="not a checkpoint directory"):
        load_checkpoint(tmp_path / "nope")
    (tmp_path / "config.json").write_text(json.dumps(tiny.to_dict()))
    with pytest.raises(CheckpointError, match="no model.safetensors.index.json"):
        load_checkpoint(tmp_path)


def test_missing_shard_names_file_and_tensor(nvfp4_ckpt, tmp_path):
    root = copy_ckpt(nvfp4_ckpt, tmp_path)
    file = weight_map(root)["model.layers.2.self_attn.q_b_proj.weight"]
    (root / file).unlink()
    with pytest.raises(CheckpointError, match=f"{file}: shard missing .*model.layers.2"):
        load_checkpoint(root)


def test_tensor_missing_from_index(nvfp4_ckpt, tmp_path):
    root = copy_ckpt(nvfp4_ckpt, tmp_path)
    wmap = weight_map(root)
    del wmap["model.layers.1.self_attn.q_a_norm.weight"]
    (root / INDEX).write_text(json.dumps({"weight_map": wmap}))
    with pytest.raises(CheckpointError, match="'model.layers.1.self_attn.q_a_norm.weight' missing.*index.json"):
        load_checkpoint(root)


def test_tensor_listed_but_absent_from_its_shard(nvfp4_ckpt, tmp_path):
    root = copy_ckpt(nvfp4_ckpt, tmp_path)
    name = "model.layers.5.mlp.experts.2.up_proj.weight_scale_2"
    file = edit_shard(root, name, lambda t: t.pop(name))
    with pytest.raises(CheckpointError, match=f"'{name}' missing from shard {file}"):
        load_checkpoint(root)


@pytest.mark.parametrize("name, bad, message", [
    ("model.layers.0.self_attn.q_a_norm.weight", torch.ones(31, dtype=torch.bfloat16), r"shape \[31\] but expected \[32\]"),
    ("model.layers.0.self_attn.q_a_norm.weight", torch.ones(32, dtype=torch.int32), "dtype torch.int32"),
    ("model.layers.0.attn_hc.fn", torch.ones(24, 256, dtype=torch.bfloat16), "dtype torch.bfloat16 but expected torch.float32"),
    ("model.layers.1.self_attn.kv_proj.weight", torch.ones(80, 64, dtype=torch.float16), "dtype torch.float16 is not a supported"),
    ("model.layers.1.self_attn.kv_proj.weight", torch.ones(80, 65).to(torch.float8_e4m3fn), r"shape \[80, 65\] but expected \[80, 64\] \(fp8\)"),
    ("model.layers.1.mlp.experts.5.gate_proj.weight", torch.ones(32, 16, dtype=torch.uint8), r"shape \[32, 16\] but expected \[32, 32\] \(nvfp4\)"),
    ("model.layers.1.mlp.experts.5.gate_proj.weight_scale", torch.ones(32, 4), "dtype torch.float32.*nvfp4"),
    ("model.layers.1.mlp.experts.5.gate_proj.weight_scale_2", torch.ones(2), "expected a float32 scalar"),
    ("model.layers.0.mlp.gate.tid2eid", torch.ones(512, 2), "dtype torch.float32 but expected torch.int32 or torch.int64"),
])
def test_wrong_shape_or_dtype_names_tensor_and_file(nvfp4_ckpt, tmp_path, name, bad, message):
    root = copy_ckpt(nvfp4_ckpt, tmp_path)
    file = edit_shard(root, name, lambda t: t.update({name: bad}))
    with pytest.raises(CheckpointError, match=message) as e:
        load_checkpoint(root)
    assert f"'{name}' in {file}" in str(e.value)


def test_fp8_weight_without_scale(official_ckpt, tmp_path):
    root = copy_ckpt(official_ckpt, tmp_path)
    wmap = weight_map(root)
    del wmap["layers.3.attn.wo_b.scale"]
    (root / INDEX).write_text(json.dumps({"weight_map": wmap}))
    with pytest.raises(CheckpointError, match="layers.3.attn.wo_b.weight' in model-.*has no block scale"):
        load_checkpoint(root)


def test_bad_config_in_checkpoint(official_ckpt, tmp_path):
    root = copy_ckpt(official_ckpt, tmp_path)
    cfg = json.loads((root / "config.json").read_text())
    del cfg["hc_mult"]
    (root / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="config.json: missing key.*hc_mult"):
        load_checkpoint(root)


def test_layer_out_of_range(official_ckpt, tiny):
    with pytest.raises(CheckpointError, match="layer 6 out of range 0..5"):
        load_checkpoint(official_ckpt, tiny, layers=[6])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_load_and_synthesize_straight_onto_the_gpu(nvfp4_ckpt, tiny, assert_same_weights):
    on_gpu = load_checkpoint(nvfp4_ckpt, tiny, device="cuda", layers=[2, 3])
    for name, v in on_gpu.items():
        tensors = v.parts().values() if hasattr(v, "parts") else [v]
        assert all(t.is_cuda for t in tensors), name
    cpu = {k: (v.to("cpu") if hasattr(v, "parts") else v.cpu()) for k, v in on_gpu.items()}
    assert_same_weights(cpu, load_checkpoint(nvfp4_ckpt, tiny, layers=[2, 3]))
    built = synthetic_weights(tiny, "nvfp4", device="cuda", layers=[3])
    assert built["layers.3.ffn.experts.w1"].packed.is_cuda
    assert torch.isfinite(built["layers.3.ffn.experts.w1"].dequantize()).all()


def test_a_load_keeps_only_the_latest_shards_open_and_still_reads_everything(nvfp4_ckpt, tiny, assert_same_weights):
    from dsv4.checkpoint import _Shards

    shards = _Shards(nvfp4_ckpt)
    files = sorted(set(shards.files.values()))
    assert len(files) > 5
    for name in shards.files:
        shards.read(name, "cpu")
        assert len(shards._handles) <= _Shards.OPEN_SHARDS
    assert_same_weights(load_checkpoint(nvfp4_ckpt, tiny), synthetic_weights(tiny, "nvfp4", seed=1))
