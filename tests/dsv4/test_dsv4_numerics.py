"""The official DeepSeek-V4 numerics rules, each on a small tensor with a hand-computed expectation.

Rules from the official inference code (`inference/kernel.py` act_quant / fp4_act_quant, `model.py`),
listed in docs/dsv4-numerics.md: FP8 GEMM inputs (e4m3, ue8m0 scale per 128), FP4 fake-quant floor,
fp32 compressor projections, bf16 query-head norm, the RoPE table (fp32 angles, `torch.polar`), bf16 indexer
scores picked as CUDA topk picks them, the attention's online softmax over 64-key blocks with P cast to bf16.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from dsv4.config import preset
from dsv4.formats import as_bf16, quantize_fp8_block, quantize_mxfp4
from dsv4.layers.attention import top_entries
from dsv4.layers.primitives import (act_quant, fp4_fake_quant, fp8_fake_quant, hadamard, head_rms_norm,
                                    make_fp4_tables, make_rope_table, pow2_round_scale, rope_frequencies)
from dsv4.layers.weights import Dense
from dsv4.model import DSV4Model
from dsv4.reference import ReferenceDecoder
from dsv4.synth import synthetic_weights
from dsv4_decode_helpers import one_thread  # noqa: F401
from official_forms import official_rope_table, online_softmax_by_hand


def test_ue8m0_scale_is_the_next_power_of_two_with_the_official_floor():
    amax = torch.tensor([448.0, 449.0, 896.0, 3.5, 0.0])
    # 448/448 = 1 exactly -> 2^0; 449/448 just above 1 -> 2; 896 -> 2; 3.5/448 = 2^-7; 0 -> 1e-4/448 -> 2^-22
    assert pow2_round_scale(amax, 448.0, 1e-4).tolist() == [1.0, 2.0, 2.0, 2.0**-7, 2.0**-22]
    # FP4: 6/6 = 1 -> 1; 6.5 -> 2; 0 -> floor 6*2^-126 -> 2^-126 (still a normal float)
    fp4 = pow2_round_scale(torch.tensor([6.0, 6.5, 0.0]), 6.0, 6 * 2.0**-126)
    assert fp4.tolist() == [1.0, 2.0, 2.0**-126]


def test_act_quant_has_one_scale_per_128_values_and_rounds_e4m3_to_nearest_even():
    x = torch.zeros(256)
    x[0], x[1], x[2] = 3.5, 1.0, 0.009  # block 0: amax 3.5 -> scale 2^-7
    x[128], x[129], x[130], x[131] = 900.0, 4.25, 4.75, -4.0  # block 1: amax 900 -> scale 4
    got = act_quant(x.to(torch.bfloat16)).float()
    # block 0 / 2^-7: 448, 128 exact; 0.009 * 128 = 1.152 -> e4m3 1.125 -> 0.0087890625
    assert got[:3].tolist() == [3.5, 1.0, 1.125 / 128]
    # block 1 / 4: 225 -> 224 (e4m3 spacing 16 above 128); 1.0625 -> tie -> 1.0; 1.1875 -> tie -> 1.25
    assert got[128:132].tolist() == [896.0, 4.0, 5.0, -4.0]
    assert got.dtype == torch.float32 and act_quant(x.to(torch.bfloat16)).dtype == torch.bfloat16
    assert torch.count_nonzero(got[3:128]) == 0 and torch.count_nonzero(got[132:]) == 0


def test_a_width_below_128_is_one_short_block():
    x = torch.tensor([100.0, 0.3] + [0.0] * 62).to(torch.bfloat16)  # tiny widths: one short block
    # amax 100 -> scale 2^-2; 400 lies halfway between e4m3 384 and 416 -> even 384 -> 96;
    # bf16 0.3 = 0.30078125 -> 1.203125 -> nearest e4m3 1.25 -> 0.3125
    assert act_quant(x)[:2].tolist() == [96.0, 0.3125]


def test_kv_fake_quant_uses_64_blocks_and_fp4_uses_32_blocks():
    x = torch.zeros(128)
    x[0], x[64], x[65] = 1.0, 448.0 * 4, 13.0  # second 64-block: scale 4, 13/4 = 3.25 -> e4m3 3.25 exact
    assert fp8_fake_quant(x)[[0, 64, 65]].tolist() == [1.0, 1792.0, 13.0]
    y = torch.zeros(64)
    y[0], y[1], y[32], y[33] = 6.0, 2.5, 12.0, 5.0  # blocks of 32: scales 1 and 2; 2.5 -> tie -> 2; 5/2 -> 2
    assert fp4_fake_quant(y, make_fp4_tables("cpu"))[[0, 1, 32, 33]].tolist() == [6.0, 2.0, 12.0, 4.0]


def test_fp4_of_a_block_of_zeros_and_subnormals_stays_finite():
    y = torch.full((32,), 1e-40)  # amax below the 6*2^-126 floor: scale 2^-126, values round to 0
    out = fp4_fake_quant(y, make_fp4_tables("cpu"))
    assert torch.isfinite(out).all() and torch.count_nonzero(out) == 0


@pytest.mark.parametrize("weight, quantized", [
    (quantize_fp8_block(torch.randn(16, 256) * 0.1), True),
    (quantize_mxfp4(torch.randn(16, 256) * 0.1), True),
    (as_bf16(torch.randn(16, 256) * 0.1), False),
])
def test_a_gemm_quantizes_its_input_only_for_fp8_or_fp4_weights(weight, quantized):
    x = (torch.randn(2, 256) * 3).to(torch.bfloat16)
    w = weight.dequantize(torch.bfloat16)
    expected = torch.nn.functional.linear(act_quant(x) if quantized else x, w)
    assert torch.equal(Dense(weight, "cpu", quantize_input=True)(x), expected)
    plain = torch.nn.functional.linear(x, w)
    assert torch.equal(Dense(weight, "cpu")(x), plain)  # wo_a-style site: never quantized
    assert quantized == (not torch.equal(expected, plain))


@pytest.mark.parametrize("fmt", ["nvfp4", "official"])
def test_routed_experts_see_fp8_activations(fmt, monkeypatch):
    import dsv4.layers.moe as moe_module

    config = preset("tiny")
    model = DSV4Model(config, synthetic_weights(config, fmt, seed=3), max_len=128)
    seen = []
    real = moe_module.expert_matvecs
    monkeypatch.setattr(moe_module, "expert_matvecs", lambda ws, ids, x, *rest: seen.append(x.clone()) or real(ws, ids, x, *rest))
    moe = model.layers[3].moe
    x = (torch.randn(1, config.hidden_size) * 2).to(torch.bfloat16)
    moe(x, torch.tensor([5]))
    gate_up_in, down_in = seen  # gate and up: one call over one input
    assert torch.equal(gate_up_in[:1], act_quant(x))  # the token's row (then the shared expert's, if it joined)
    assert torch.equal(down_in, act_quant(down_in))  # already on the e4m3 grid: it was quantized
    assert not torch.equal(gate_up_in[:1], x)


def test_nvfp4_activations_follow_the_official_fp8_scheme_not_input_scale():
    """NVFP4 experts take the same e4m3/ue8m0-per-128 activations as the official release's FP4 experts;
    the checkpoint's `input_scale` (a calibration for FP4-activation kernels) does not enter the math."""
    config = dataclasses.replace(preset("tiny"), num_hidden_layers=2, num_hash_layers=1, compress_ratios=(0, 4, 0))
    weights = synthetic_weights(config, "nvfp4", seed=2)
    rescaled = dict(weights)
    for name, w in weights.items():
        if getattr(w, "input_scale", None) is not None:
            rescaled[name] = type(w)(w.packed, w.scale, w.global_scale, w.input_scale * 64.0, w.lut)
    assert any(rescaled[n] is not weights[n] for n in weights)
    a = DSV4Model(config, weights, max_len=128)
    b = DSV4Model(config, rescaled, max_len=128)
    for pos, token in enumerate([3, 9, 27, 81]):
        assert torch.equal(a.step([token], pos), b.step([token], pos))
    reference = ReferenceDecoder(config, rescaled)
    a.reset()
    for pos, token in enumerate([3, 9, 27, 81]):
        assert torch.equal(a.step([token], pos)[0], reference.step(token, pos))


def _tiny_model_with(entries: dict):
    config = dataclasses.replace(preset("tiny"), num_hidden_layers=2, num_hash_layers=1, compress_ratios=(4, 0, 0))
    weights = synthetic_weights(config, "nvfp4", seed=4)
    weights.update(entries)
    return config, DSV4Model(config, weights, max_len=128)


def test_the_compressor_projects_in_fp32():
    """kv = x . w = 1 + 2^-10: exact in fp32, 1.0 after a bf16 GEMM output."""
    config = preset("tiny")
    w = torch.zeros(2 * config.head_dim, config.hidden_size)
    w[0, 0], w[0, 1] = 1.0, 2.0**-10
    _, model = _tiny_model_with({"layers.0.attn.compressor.wkv": as_bf16(w)})
    compressor = model.layers[0].attn.compressor
    assert compressor.projection.dtype == torch.bfloat16  # read as stored, multiplied and summed in fp32
    x = torch.zeros(1, config.hidden_size, dtype=torch.bfloat16)
    x[0, :2] = 1.0
    kv, score = compressor._project(x)
    assert kv.dtype == score.dtype == torch.float32
    assert kv[0, 0].item() == 1 + 2.0**-10


def test_query_heads_are_normalised_in_bf16():
    q = torch.tensor([[3.0, 4.0]], dtype=torch.bfloat16)
    # bf16 ops: mean(9, 16) = 12.5; rsqrt -> 0.28284 -> bf16 0.283203125; 3 * that = 0.849609375, a tie
    # between bf16 neighbours 0.84765625 and 0.8515625 -> even -> 0.8515625 (an fp32 norm gives 0.84765625)
    out = head_rms_norm(q, 1e-6)
    assert out.dtype == torch.bfloat16 and out.float().tolist() == [[0.8515625, 1.1328125]]


def test_rope_angles_are_fp32_products():
    config = preset("tiny")
    table = make_rope_table(config, False, 1_000_001, "cpu")
    freq = rope_frequencies(config, False)[1]  # fp32 1 / 10000^(2/16)
    angle32 = (torch.tensor(1_000_000.0) * freq).item()  # fp32 product: 1e6 * f rounded to 1/32 spacing
    exact = 1_000_000 * 10000.0 ** (-2 / 16)
    assert abs(angle32 - exact) > 1e-3
    assert table[1_000_000, 0, 1].item() == pytest.approx(math.cos(angle32), abs=2e-6)
    assert abs(table[1_000_000, 0, 1].item() - math.cos(exact)) > 1e-3


@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize("name", ["tiny", "flash"])
def test_rope_table_is_the_official_recipe(name, compressed):
    """Same ops in the same order on the same device: the same bits (tests/dsv4/test_graphs_gpu.py: on CUDA)."""
    config = preset(name)
    table = make_rope_table(config, compressed, 70_000, "cpu")
    assert torch.equal(table.view(torch.int32), official_rope_table(config, compressed, 70_000, "cpu").view(torch.int32))


def test_hadamard_is_the_scaled_walsh_transform():
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert hadamard(x).tolist() == [5.0, -1.0, -2.0, 0.0]  # H4 x / 2


def test_indexer_scores_are_bf16_and_ties_keep_the_older_entry():
    _, model = _tiny_model_with({})
    indexer = model.layers[0].attn.indexer
    q = torch.ones(1, indexer.heads, indexer.dim, dtype=torch.bfloat16)
    w = torch.full((1, indexer.heads), 0.5, dtype=torch.bfloat16)
    keys = torch.zeros(1, 3, indexer.dim, dtype=torch.bfloat16)
    keys[0, 1, 0] = 1.0 + 2.0**-7  # 4 heads * 0.5 * 1.0078125 = 2.015625 in bf16 (exact)
    keys[0, 2, 0] = -1.0  # relu -> 0, ties with slot 0
    scores = indexer.scores(q, w, keys)
    assert scores.dtype == torch.bfloat16 and scores.float().tolist() == [[0.0, 2.015625, 0.0]]
    assert top_entries(scores, 2).indices.tolist() == [[1, 0]]


def test_top_k_ranks_minus_zero_below_zero_and_fills_ties_in_index_order():
    """CUDA topk (the official indexer's op), which `top_entries` runs as torch ops off CUDA: the k-th value by
    bit order (-0.0 below +0.0), the entries above it, then the lowest-index ones equal to it; the picks sorted
    by value (-0.0 equal to +0.0), those above the k-th first. -inf slots (not yet written) after the scores
    change no pick."""
    s = torch.tensor([[1.0, 0.0, -0.0, 2.0, 0.0, -0.0, 1.0, -1.0]], dtype=torch.bfloat16)
    assert top_entries(s, 4).indices.tolist() == [[3, 0, 6, 1]]  # the k-th is +0.0: slot 1, not 2
    assert top_entries(s, 6).indices.tolist() == [[3, 0, 6, 1, 4, 2]]  # the k-th is -0.0: +0.0 above it first
    padded = torch.cat([s, torch.full((1, 8), float("-inf"), dtype=torch.bfloat16)], dim=1)
    assert top_entries(padded, 6).indices.tolist() == [[3, 0, 6, 1, 4, 2]]
    # the k-th is -inf: every zero lies above it, listed in index order whatever its sign
    assert top_entries(padded, 10).indices[:, :8].tolist() == [[3, 0, 6, 1, 2, 4, 5, 7]]


def test_attention_is_the_official_online_softmax_over_64_key_blocks():
    """Three blocks (the window's two, the compressed entries'), the window not full, one block raising the
    running max: bit for bit the hand-written official form, and not the one-max form."""
    _, model = _tiny_model_with({})
    attn = model.layers[1].attn
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1, attn.heads, attn.head_dim, generator=g).to(torch.bfloat16)
    keys = torch.randn(1, 128 + 37, attn.head_dim, generator=g).to(torch.bfloat16)
    keys[0, 140] = (q[0, 0].float() * 0.5).to(torch.bfloat16)  # a compressed entry that raises head 0's max
    valid = torch.ones(1, keys.shape[1], dtype=torch.bool)
    valid[0, 90:128] = False  # window slots not yet written
    got = attn.attend(q, keys, valid)
    assert torch.equal(got[0], online_softmax_by_hand(q[0], keys[0], valid[0], attn.sink))
    scores = torch.einsum("bhd,bsd->bhs", q.float(), keys.float()) * attn.head_dim**-0.5
    scores = scores.masked_fill(~valid.unsqueeze(1), float("-inf"))
    top = scores.amax(-1, keepdim=True)
    e = torch.exp(scores - top)
    denom = e.double().sum(-1, keepdim=True).float() + torch.exp(attn.sink.view(1, -1, 1) - top)
    one_max = (torch.einsum("bhs,bsd->bhd", e.to(torch.bfloat16).float(), keys.float()) / denom).to(torch.bfloat16)
    assert not torch.equal(got, one_max)


def test_attention_casts_p_to_bf16_and_keeps_the_sink_out_of_the_max():
    _, model = _tiny_model_with({})
    attn = model.layers[1].attn
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, attn.heads, attn.head_dim, generator=g).to(torch.bfloat16)
    keys = torch.randn(1, 5, attn.head_dim, generator=g).to(torch.bfloat16)
    scores = torch.einsum("bhd,bsd->bhs", q.float(), keys.float()) * attn.head_dim**-0.5
    top = scores.amax(-1, keepdim=True)
    e = torch.exp(scores - top)
    denom = e.sum(-1, keepdim=True) + torch.exp(attn.sink.view(1, -1, 1) - top)
    expected = (torch.einsum("bhs,bsd->bhd", e.to(torch.bfloat16).float(), keys.float()) / denom).to(torch.bfloat16)
    got = attn.attend(q, keys, None)
    unrounded = (torch.einsum("bhs,bsd->bhd", e, keys.float()) / denom).to(torch.bfloat16)
    assert not torch.equal(got, unrounded) and torch.equal(got, expected)
