import json
import re
import subprocess
import sys

import pytest
import torch

from dsv4.checkpoint import load_checkpoint
from dsv4.config import preset
from dsv4.formats import BF16Weight, FP8BlockWeight, MXFP4Weight, NVFP4Weight, QuantizedWeight
from dsv4.synth import SynthError, estimate_bytes, main, synthetic_weights, write_checkpoint


def test_same_seed_same_weights_other_seed_other_weights(tiny, assert_same_weights):
    a = synthetic_weights(tiny, "nvfp4", seed=5)
    assert_same_weights(a, synthetic_weights(tiny, "nvfp4", seed=5))
    b = synthetic_weights(tiny, "nvfp4", seed=6)
    assert not torch.equal(a["layers.0.ffn.experts.w1"].packed, b["layers.0.ffn.experts.w1"].packed)


def test_a_subset_of_layers_equals_the_same_layers_of_the_full_model(tiny, assert_same_weights):
    full = synthetic_weights(tiny, "official", seed=3)
    part = synthetic_weights(tiny, "official", seed=3, layers=[4])
    assert_same_weights(part, {k: v for k, v in full.items() if k.startswith("layers.4.")})


@pytest.mark.parametrize("fmt, expert, attn, shared, compressor", [
    ("nvfp4", NVFP4Weight, FP8BlockWeight, NVFP4Weight, BF16Weight),
    ("official", MXFP4Weight, FP8BlockWeight, FP8BlockWeight, BF16Weight),
    ("bf16", BF16Weight, BF16Weight, BF16Weight, BF16Weight),
])
def test_each_release_layout_uses_its_formats(tiny, fmt, expert, attn, shared, compressor):
    w = synthetic_weights(tiny, fmt, layers=[2])
    assert type(w["layers.2.ffn.experts.w2"]) is expert and w["layers.2.ffn.experts.w2"].shape == (8, 64, 32)
    assert type(w["layers.2.attn.wo_a"]) is attn and type(w["layers.2.attn.indexer.wq_b"]) is attn
    assert type(w["layers.2.ffn.shared_experts.w1"]) is shared
    assert type(w["layers.2.attn.compressor.wgate"]) is compressor
    if fmt == "nvfp4":
        assert w["layers.2.attn.wq_a"].scale_format == "f32"
        assert w["layers.2.ffn.experts.w1"].input_scale.shape == (8,)
    if fmt == "official":
        assert w["layers.2.attn.wq_a"].scale_format == "e8m0"


def test_weights_are_well_scaled(tiny):
    w = synthetic_weights(tiny, "nvfp4")
    for name, v in w.items():
        if isinstance(v, QuantizedWeight):
            d = v.dequantize(torch.float32)
            std, want = d.std().item(), d.shape[-1] ** -0.5
            assert 0.8 * want < std < 1.2 * want, name
            assert torch.isfinite(d).all(), name
    assert all(torch.equal(v, torch.ones_like(v)) for k, v in w.items() if k.endswith("norm.weight"))
    for k in ("layers.3.ffn.gate.bias", "layers.0.attn.attn_sink", "layers.2.attn.compressor.ape", "hc_head_base"):
        assert w[k].abs().max() < 0.2, k
    assert ((w["layers.0.hc_attn_scale"] > 0) & (w["layers.0.hc_attn_scale"] < 0.2)).all()
    ids = w["layers.1.ffn.gate.tid2eid"]
    assert ids.dtype == torch.int32 and ids.min() >= 0 and ids.max() < tiny.n_routed_experts
    assert (ids[:, 0] != ids[:, 1]).all()  # a token's experts are distinct


@pytest.mark.parametrize("fmt", ["nvfp4", "official", "bf16"])
def test_estimate_matches_bytes_written(tmp_path, tiny, fmt):
    root = write_checkpoint(tiny, tmp_path / fmt, fmt)
    index = json.loads((root / "model.safetensors.index.json").read_text())
    assert estimate_bytes(tiny, fmt) == index["metadata"]["total_size"]


def test_write_refuses_a_non_empty_directory(tmp_path, tiny):
    (tmp_path / "keep.txt").write_text("x")
    with pytest.raises(SynthError, match="not an empty directory"):
        write_checkpoint(tiny, tmp_path, "bf16")


def test_unknown_format_writes_nothing(tmp_path, tiny):
    with pytest.raises(SynthError, match="unknown format 'fp16'"):
        synthetic_weights(tiny, "fp16")
    with pytest.raises(SynthError, match="unknown format 'fp16'"):
        write_checkpoint(tiny, tmp_path / "x", "fp16")
    assert not (tmp_path / "x").exists()


def run_cli(capsys, *args):
    """Run the CLI in-process; returns (exit code, stdout, stderr)."""
    try:
        code = main(list(args))
    except SystemExit as e:  # argparse rejects the arguments
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def test_python_dash_m_writes_a_checkpoint_that_loads(tmp_path, tiny, assert_same_weights):
    out = tmp_path / "cli"
    r = subprocess.run([sys.executable, "-m", "dsv4.synth", "--preset", "tiny", "--format", "official", "--out",
                        str(out), "--seed", "3", "--device", "cpu"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert f"wrote {out}" in r.stdout
    assert json.loads((out / "config.json").read_text())["synthetic"] == {"format": "official", "seed": 3,
                                                                          "names": "official", "device": "cpu"}
    assert_same_weights(load_checkpoint(out), synthetic_weights(tiny, "official", seed=3))


@pytest.mark.parametrize("args, message", [
    (["--preset", "huge", "--format", "nvfp4"], "unknown preset 'huge'"),
    (["--preset", "tiny", "--format", "fp16"], "invalid choice: 'fp16'"),
    (["--preset", "pro", "--format", "bf16"], "needs .* GB but"),
    (["--preset", "tiny", "--shard-mb", "0"], "--shard-mb must be positive"),
    (["--preset", "tiny", "--device", "tpu"], "--device 'tpu'"),
])
def test_cli_bad_input_exits_non_zero_with_one_line(capsys, tmp_path, args, message):
    code, _, err = run_cli(capsys, *args, "--out", str(tmp_path / "out"))
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0]
    assert re.search(message, lines[0]), lines[0]
    assert not (tmp_path / "out").exists()


def test_cli_refuses_non_empty_output(capsys, tmp_path):
    (tmp_path / "file").write_text("x")
    code, _, err = run_cli(capsys, "--preset", "tiny", "--out", str(tmp_path))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "not an empty directory" in err


def test_cli_writes_with_the_requested_name_scheme(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "--preset", "tiny", "--format", "bf16", "--names", "official", "--out",
                           str(tmp_path / "o"))
    assert code == 0 and "wrote" in out
    names = json.loads((tmp_path / "o" / "model.safetensors.index.json").read_text())["weight_map"]
    assert "layers.0.attn.wq_a.weight" in names


def test_a_writer_with_small_shards_streams_many_shards_that_load_back(tmp_path, tiny, assert_same_weights):
    out = write_checkpoint(tiny, tmp_path / "many", "nvfp4", seed=2, shard_bytes=20_000)
    shards = sorted(p.name for p in out.glob("model-*.safetensors"))
    assert len(shards) > 10 and not list(out.glob(".shard-*"))
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"].values()) == set(shards)
    assert_same_weights(load_checkpoint(out), synthetic_weights(tiny, "nvfp4", seed=2))
