"""GraphDecoder on real GPUs: graph replay equals the same step run without graphs, bit for bit.

Each check runs in a subprocess (tests/dsv4/gpu_decode_worker.py) so a failed capture cannot poison
the other checks. Skipped without CUDA; the two-GPU test needs two GPUs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu
WORKER = Path(__file__).with_name("gpu_decode_worker.py")
ROOT = Path(__file__).resolve().parents[2]
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
needs_gpu = pytest.mark.skipif(GPUS < 1, reason="needs a CUDA GPU")


def run_worker(*args: str, timeout: int = 400) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, str(WORKER), *args], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@needs_gpu
@pytest.mark.parametrize("mode", ["layer", "split", "full"])
def test_replay_matches_eager_over_320_steps_of_tiny(mode):
    """320 steps cross two HCA boundaries (127, 255) and 80 CSA boundaries."""
    result = run_worker("--preset", "tiny", "--mode", mode, "--steps", "320")
    assert result["graphs"] > 0
    assert result["bitwise"], result
    assert result["tokens_match"], result


@needs_gpu
@pytest.mark.parametrize("mode", ["layer", "full"])
def test_speculative_replay_matches_eager_on_tiny(mode):
    """MTP drafts and two-token verification: 200 graph-replayed steps equal the same units run eagerly."""
    result = run_worker("--preset", "tiny", "--mode", mode, "--steps", "200", "--mtp")
    assert result["graphs"] > 0
    assert result["bitwise"], result
    assert result["tokens_match"] and result["tokens"] >= 200, result


@pytest.mark.multigpu
@pytest.mark.skipif(GPUS < 2, reason="needs two CUDA GPUs")
@pytest.mark.parametrize("mode", ["split", "full"])
def test_two_gpu_placement_replays_bit_for_bit(mode):
    result = run_worker("--preset", "tiny", "--mode", mode, "--steps", "160", "--gpus", "2")
    assert result["devices"] == ["cuda:0", "cuda:1"]
    assert result["graphs"] > 0
    assert result["bitwise"], result
    assert result["tokens_match"], result


@needs_gpu
@pytest.mark.skipif(GPUS and torch.cuda.get_device_properties(0).total_memory < 70 << 30,
                    reason="pro-4L needs about 70 GB of GPU memory")
def test_pro_4l_synthetic_decodes_with_full_graphs():
    result = run_worker("--preset", "pro-4L", "--mode", "full", "--steps", "12", "--max-len", "256", timeout=500)
    assert result["bitwise"], result
    assert result["tokens_match"], result


@needs_gpu
def test_fused_nvfp4_expert_matvec_matches_dequantize_then_matmul():
    from dsv4.formats import quantize_nvfp4
    from dsv4.layers.expert_matvec import expert_matvecs, fused_available

    gen = torch.Generator(device="cuda").manual_seed(0)
    weight = quantize_nvfp4(torch.randn(8, 200, 4096, device="cuda", generator=gen) * 0.02)
    ids = torch.tensor([5, 0, 5, 7], device="cuda")
    x = torch.randn(4, 4096, device="cuda", generator=gen).to(torch.bfloat16)
    x[2] = x[0]
    assert fused_available(weight, x)
    fused = expert_matvecs([weight], ids, x, [torch.empty(4, 200, dtype=torch.bfloat16, device="cuda")])[0]
    dense = torch.bmm(weight.index_select(ids).dequantize(), x.unsqueeze(-1)).squeeze(-1)
    # the kernel keeps weights in fp32 where dequantize() rounds each one to bf16: agreement to ~bf16 precision
    assert (fused.float() - dense.float()).abs().max() <= 0.01 * dense.float().abs().max()
    assert torch.equal(fused[0], fused[2])  # same expert, same input: same row


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("block", [64, 128])
def test_fused_fp8_fake_quant_is_bit_identical_to_the_torch_form(dtype, block):
    """The Triton kernel against the torch ops it replaces, on CUDA and on the CPU, over magnitudes from
    below the amax floor to near bf16's top, with all-zero blocks and many e4m3 round-to-even ties."""
    from dsv4.layers.fp8_quant import fused_fp8_fake_quant
    from dsv4.layers.primitives import AMAX_FLOOR, FP8_MAX, fp8_fake_quant_torch

    gen = torch.Generator(device="cuda").manual_seed(block)
    x = torch.randn(6, 4, 7168, device="cuda", generator=gen)
    x = x * torch.logspace(-8, 30, 24, device="cuda").reshape(6, 4, 1)  # one magnitude per row
    x[0, 0, :block] = 0
    x = x.to(dtype)
    fused = fused_fp8_fake_quant(x, block, FP8_MAX, AMAX_FLOOR)
    assert fused is not None and fused.dtype == dtype
    bits = torch.int16 if dtype == torch.bfloat16 else torch.int32
    assert torch.equal(fused.view(bits), fp8_fake_quant_torch(x, block).view(bits))
    assert torch.equal(fused.cpu().view(bits), fp8_fake_quant_torch(x.cpu(), block).view(bits))


@needs_gpu
def test_fused_fp8_fake_quant_writes_a_channel_slice_in_place():
    """The KV entries' form: the non-RoPE channels of [rows, width] rows (strided) quantised over themselves,
    the RoPE channels untouched, bit for bit the torch form's."""
    from dsv4.layers.fp8_quant import fused_fp8_fake_quant
    from dsv4.layers.primitives import AMAX_FLOOR, FP8_MAX, fp8_fake_quant_torch

    gen = torch.Generator(device="cuda").manual_seed(3)
    kv = (torch.randn(5, 512, device="cuda", generator=gen) * 40).to(torch.bfloat16)
    expected = torch.cat([fp8_fake_quant_torch(kv[:, :448], 64), kv[:, 448:]], dim=-1)
    assert fused_fp8_fake_quant(kv[:, :448], 64, FP8_MAX, AMAX_FLOOR, out=kv[:, :448]) is not None
    assert torch.equal(kv.view(torch.int16), expected.view(torch.int16))


@needs_gpu
@pytest.mark.parametrize("iters", [1, 20])
def test_fused_sinkhorn_is_bit_identical_to_the_torch_form(iters):
    """mHC's combine-matrix normalisation as one kernel against its torch form on CUDA (torch's own CPU form
    adds rows in another order, so it is not the reference here)."""
    from dsv4.layers.sinkhorn import sinkhorn, sinkhorn_torch

    gen = torch.Generator(device="cuda").manual_seed(iters)
    for batch in (1, 2, 3, 64):  # decode is batch 1; the reductions' launch shape changes with the batch
        scales = torch.logspace(-3, 2, batch, device="cuda")[:, None, None]
        comb = torch.softmax(torch.randn(batch, 4, 4, device="cuda", generator=gen) * scales, -1) + 1e-6
        fused = sinkhorn(comb, iters, 1e-6)
        assert torch.equal(fused.view(torch.int32), sinkhorn_torch(comb, iters, 1e-6).view(torch.int32)), batch


@needs_gpu
def test_fused_norm_and_rope_match_the_torch_form():
    """RMSNorm (+ RoPE) kernels on CUDA against the torch ops on the CPU: every output within one unit in the
    last place of bf16 (the sum of squares adds in another order; products may fuse)."""
    from dsv4.layers.primitives import norm_rope_tail, rms_norm, rope_tail

    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 16, 512, generator=gen).to(torch.bfloat16)
    weight = torch.rand(512, generator=gen) + 0.5
    cos_sin = torch.randn(2, 2, 32, generator=gen)
    cases = {
        "rms_norm": lambda t, w, cs: rms_norm(t, w, 1e-6),
        "rms_norm bf16 weight": lambda t, w, cs: rms_norm(t, w.to(torch.bfloat16), 1e-6),
        "norm + rope": lambda t, w, cs: norm_rope_tail(t, w, 1e-6, 64, cs),
        "head norm + rope": lambda t, w, cs: norm_rope_tail(t, None, 1e-6, 64, cs),
        "inverse rope": lambda t, w, cs: rope_tail(t, 64, cs, inverse=True),
    }
    for name, f in cases.items():
        cpu = f(x, weight, cos_sin).float()
        cuda = f(x.cuda(), weight.cuda(), cos_sin.cuda()).float().cpu()
        ulp = cpu.abs().clamp(min=1e-3) * 2.0**-7
        assert ((cuda - cpu).abs() <= ulp).all(), name


@needs_gpu
def test_kv_entries_normed_rotated_and_quantised_in_one_kernel_equal_the_two_kernels():
    """The KV entry's e4m3 round trip inside the norm + RoPE kernel, and an fp32 input rounded inside it (the
    compressor's pooled entry), against the launches they replace, bit for bit on CUDA."""
    from dsv4.layers.primitives import FP8_BLOCK, fp8_fake_quant, norm_rope_tail

    gen = torch.Generator().manual_seed(8)
    pooled = (torch.randn(3, 512, generator=gen) * torch.logspace(-4, 2, 512)).cuda()
    weight = (torch.rand(512, generator=gen) + 0.5).cuda()
    cos_sin = torch.randn(3, 2, 32, generator=gen).cuda()
    for x in (pooled.to(torch.bfloat16), pooled):
        one = norm_rope_tail(x, weight, 1e-6, 64, cos_sin, dtype=torch.bfloat16, quant_block=FP8_BLOCK)
        two = norm_rope_tail(x.to(torch.bfloat16), weight, 1e-6, 64, cos_sin)
        fp8_fake_quant(two[:, :448], out=two[:, :448])
        assert one.dtype == torch.bfloat16 and torch.equal(one, two), x.dtype


@needs_gpu
def test_kv_entries_written_to_their_device_slots_by_the_norm_kernel_equal_an_index_copy():
    """The cache write inside the norm + RoPE kernel (slots read from device memory) against the kernel's result
    committed by `index_copy_`, bit for bit on CUDA; rows are batch-major, the cache a view with a row stride."""
    from dsv4.layers.primitives import FP8_BLOCK, norm_rope_tail

    gen = torch.Generator().manual_seed(11)
    x = torch.randn(2 * 3, 512, generator=gen).cuda()  # B = 2 sequences x T = 3 tokens
    weight = (torch.rand(512, generator=gen) + 0.5).cuda()
    cos_sin = torch.randn(6, 2, 32, generator=gen).cuda()
    slots = torch.tensor([5, 0, 9], device="cuda")
    store = torch.zeros(2, 14, 512, dtype=torch.bfloat16, device="cuda")
    cache, expected = store[:, 2:], torch.zeros_like(store)[:, 2:]  # views: the entries after two other rows
    args = (weight, 1e-6, 64, cos_sin)
    written = norm_rope_tail(x, *args, dtype=torch.bfloat16, quant_block=FP8_BLOCK, scatter=(cache, slots))
    entries = norm_rope_tail(x, *args, dtype=torch.bfloat16, quant_block=FP8_BLOCK)
    expected.index_copy_(1, slots, entries.unflatten(0, (2, 3)))
    assert written is cache and torch.equal(cache, expected) and not store[:, :2].any()


@needs_gpu
@pytest.mark.parametrize("cos_rows", [4, 2])  # one cos/sin row per query row, or per token of B x T rows
def test_attention_rotating_its_output_back_equals_the_separate_inverse_rope(cos_rows):
    """The inverse RoPE in the attention kernel's last tile against the RoPE kernel after attention, bit for bit
    on CUDA (the graph-ready path rotates in attention, the eager path after it: replay == eager needs this)."""
    from dsv4.layers.primitives import rope_tail
    from dsv4.layers.sink_attention import fused_sink_attention, rope_in_attention

    gen = torch.Generator().manual_seed(12)
    q = torch.randn(4, 64, 512, generator=gen).to(torch.bfloat16).cuda()  # B = 2 x T = 2 rows, Flash's heads
    cache = torch.randn(2, 300, 512, generator=gen).to(torch.bfloat16).cuda()
    slots = torch.randint(0, 300, (2, 2, 160), generator=gen).cuda()
    valid = torch.rand(2, 2, 160, generator=gen).cuda() > 0.2
    valid[..., 0] = True
    sink = torch.randn(64, generator=gen).cuda()
    cos_sin = torch.randn(cos_rows, 2, 32, generator=gen).cuda()
    assert rope_in_attention(q, 64, cos_sin) and not rope_in_attention(q[..., :80], 16, cos_sin[..., :8])
    rotated = fused_sink_attention(q, cache, slots, valid, sink, 512**-0.5, inverse_rope=cos_sin)
    plain = fused_sink_attention(q, cache, slots, valid, sink, 512**-0.5)
    assert torch.equal(rotated, rope_tail(plain, 64, cos_sin, inverse=True))
    assert torch.equal(rotated[..., :448], plain[..., :448])


@needs_gpu
@pytest.mark.parametrize("d", [4096, 7168])  # Flash, Pro (a row wider than a power of two)
def test_mhc_pre_with_the_block_norm_in_its_last_kernel_equals_pre_then_the_norm(d):
    """The block's RMSNorm (and its e4m3 and fp32 outputs) inside mHC pre's last kernel, against pre and then
    `rms_norm_for_gemm`: the same comb, normed values within one unit in the last place of bf16, and outputs
    consistent with the normed values. The wider kernel adds the split partials and the squares in its own order:
    post differed from pre's in its last bits at Pro's width (H200), so post is held to the torch form's bound that
    `test_fused_mhc_pre_post_and_head_match_the_torch_form` holds pre's to. The eager and the graph-ready paths
    both run this kernel, so replay == eager does not depend on it."""
    from dsv4.config import preset
    from dsv4.layers.mhc import HyperConnection
    from dsv4.layers.primitives import act_quant, rms_norm_for_gemm

    gen = torch.Generator().manual_seed(13)
    hc = 4
    fn = torch.randn((2 + hc) * hc, hc * d, generator=gen) * 0.02
    scale, base = torch.rand(3, generator=gen), torch.randn((2 + hc) * hc, generator=gen) * 0.1
    mix = HyperConnection(fn, scale, base, preset("tiny"), "cuda")
    streams = (torch.randn(2, hc, d, generator=gen) * torch.logspace(-2, 2, d)).to(torch.bfloat16)
    weight = (torch.rand(d, generator=gen) + 0.5).cuda()
    (normed, quantised, wide), post, comb = mix.pre_normed(streams.cuda(), weight, 1e-6, fp32=True)
    mix.join()
    x, _, comb2 = mix.pre(streams.cuda())
    mix.join()
    alone = rms_norm_for_gemm(x, weight, 1e-6)[0]
    post_cpu = HyperConnection(fn, scale, base, preset("tiny"), "cpu").pre(streams)[1]
    assert torch.equal(comb, comb2) and torch.allclose(post.cpu(), post_cpu, rtol=1e-5, atol=1e-6)
    ulp = torch.exp2(torch.floor(torch.log2(alone.float().abs().clamp_min(2.0**-126))) - 7)  # bf16: 8 bits
    assert ((normed.float() - alone.float()).abs() <= ulp).all()
    assert torch.equal(quantised, act_quant(normed)) and torch.equal(wide, normed.float())
    assert mix.pre_normed(streams.cuda(), weight, 1e-6, fp32=False)[0][2] is None


@needs_gpu
def test_a_gemm_input_normed_and_quantised_in_one_kernel_equals_the_three_launches():
    from dsv4.layers.primitives import act_quant, rms_norm, rms_norm_for_gemm

    gen = torch.Generator().manual_seed(10)
    x = (torch.randn(2, 4096, generator=gen) * torch.logspace(-3, 3, 4096)).to(torch.bfloat16).cuda()
    weight = (torch.rand(4096, generator=gen) + 0.5).cuda()
    normed, quantised, wide = rms_norm_for_gemm(x, weight, 1e-6, fp32=True)
    alone = rms_norm(x, weight, 1e-6)
    assert torch.equal(normed, alone) and torch.equal(quantised, act_quant(alone))
    assert wide.dtype == torch.float32 and torch.equal(wide, alone.float())
    assert rms_norm_for_gemm(x, weight, 1e-6)[2] is None


@needs_gpu
def test_mhc_post_into_the_streams_buffer_equals_a_fresh_result():
    from dsv4.layers.mhc import HyperConnection

    gen = torch.Generator().manual_seed(9)
    streams = torch.randn(2, 4, 4096, generator=gen).to(torch.bfloat16).cuda()
    y = torch.randn(2, 4096, generator=gen).to(torch.bfloat16).cuda()
    post, comb = torch.rand(2, 4, generator=gen).cuda(), torch.rand(2, 4, 4, generator=gen).cuda()
    fresh = HyperConnection.post(y, streams, post, comb)
    into = torch.empty_like(streams)
    assert HyperConnection.post(y, streams, post, comb, into) is into and torch.equal(into, fresh)


@needs_gpu
def test_fused_mhc_pre_post_and_head_match_the_torch_form():
    """mHC pre/post and hc_head kernels on CUDA against the torch form on the CPU, at Pro's width."""
    from dsv4.config import preset
    from dsv4.layers.mhc import HyperConnection, HyperHead

    cfg = preset("pro")
    gen = torch.Generator().manual_seed(4)
    d, hc = cfg.hidden_size, cfg.hc_mult
    fn, scale, base = torch.randn(24, hc * d, generator=gen) * 0.02, torch.rand(3, generator=gen), torch.randn(24, generator=gen)
    streams = torch.randn(1, hc, d, generator=gen).to(torch.bfloat16)
    y = torch.randn(1, d, generator=gen).to(torch.bfloat16)
    on_cpu, on_cuda = HyperConnection(fn, scale, base, cfg, "cpu"), HyperConnection(fn, scale, base, cfg, "cuda")
    x_cpu, post_cpu, comb_cpu = on_cpu.pre(streams)
    x_gpu, post_gpu, comb_gpu = on_cuda.pre(streams.cuda())
    assert torch.allclose(post_gpu.cpu(), post_cpu, rtol=1e-5, atol=1e-6)
    assert torch.allclose(comb_gpu.cpu(), comb_cpu, rtol=1e-4, atol=1e-6)
    assert ((x_gpu.float().cpu() - x_cpu.float()).abs() <= x_cpu.float().abs().clamp(min=1e-3) * 2.0**-7).all()
    out_cpu = HyperConnection.post(y, streams, post_cpu, comb_cpu).float()
    out_gpu = HyperConnection.post(y.cuda(), streams.cuda(), post_cpu.cuda(), comb_cpu.cuda()).float().cpu()
    assert ((out_gpu - out_cpu).abs() <= out_cpu.abs().clamp(min=1e-3) * 2.0**-7).all()
    head_cpu = HyperHead(fn[:hc], scale[:1], base[:hc], cfg, "cpu")(streams).float()
    head_gpu = HyperHead(fn[:hc], scale[:1], base[:hc], cfg, "cuda")(streams.cuda()).float().cpu()
    assert ((head_gpu - head_cpu).abs() <= head_cpu.abs().clamp(min=1e-3) * 2.0**-7).all()


@needs_gpu
def test_fused_swiglu_matches_the_torch_form_and_quantises_like_act_quant():
    """Clamped SwiGLU x routing weight in one kernel: within a bf16 unit of the torch ops on the CPU, and its
    FP8 variant is exactly `act_quant` of its bf16 result (the same block-scale code)."""
    from dsv4.layers.moe import swiglu_bf16
    from dsv4.layers.primitives import ACT_BLOCK, fp8_fake_quant_torch

    gen = torch.Generator().manual_seed(5)
    gate = (torch.randn(6, 3072, generator=gen) * 6).to(torch.bfloat16)
    up = (torch.randn(6, 3072, generator=gen) * 6).to(torch.bfloat16)
    weight = torch.rand(6, generator=gen)
    cpu = swiglu_bf16(gate, up, 10.0, weight).float()
    cuda = swiglu_bf16(gate.cuda(), up.cuda(), 10.0, weight.cuda())
    assert ((cuda.float().cpu() - cpu).abs() <= cpu.abs().clamp(min=1e-3) * 2.0**-7).all()
    quantised = swiglu_bf16(gate.cuda(), up.cuda(), 10.0, weight.cuda(), quantize=True)
    assert torch.equal(quantised.view(torch.int16), fp8_fake_quant_torch(cuda, ACT_BLOCK).view(torch.int16))
    shared = swiglu_bf16(gate.cuda(), up.cuda(), 10.0).float().cpu()  # no routing weight: the shared expert
    plain = swiglu_bf16(gate, up, 10.0).float()
    assert ((shared - plain).abs() <= plain.abs().clamp(min=1e-3) * 2.0**-7).all()


@needs_gpu
def test_fused_hadamard_fp4_is_bit_identical_to_the_torch_form():
    """The indexer's Hadamard + FP4 round trip as one kernel against the torch ops on CUDA, for queries
    [1, 64 heads, 128] and keys [1, 128], over magnitudes from tiny to large."""
    from dsv4.layers.primitives import fp4_fake_quant, hadamard, hadamard_fp4, make_fp4_tables

    gen = torch.Generator(device="cuda").manual_seed(6)
    tables = make_fp4_tables("cuda")
    for shape in ((1, 64, 128), (1, 128), (3, 128)):
        x = torch.randn(*shape, device="cuda", generator=gen)
        x = (x * torch.logspace(-6, 6, shape[-2] if len(shape) > 2 else 1, device="cuda").reshape(-1, 1)).to(torch.bfloat16)
        assert torch.equal(hadamard_fp4(x, tables).view(torch.int16),
                           fp4_fake_quant(hadamard(x), tables).view(torch.int16)), shape


@needs_gpu
def test_fused_sink_attention_matches_gathered_keys_and_the_torch_form():
    """The kernels over cache slots against `Attention.attend` on the gathered keys (CUDA torch ops): 99.9 % of
    outputs within one unit in the last place of bf16, all within two units of their row's largest (the two
    products add in another order, which can flip a probability's bf16 rounding). Pro's heads
    and head size, tiny's odd head size, window-only / HCA slot lists shared by the batch, CSA lists per row,
    masked slots anywhere."""
    from types import SimpleNamespace

    from dsv4.layers.attention import Attention
    from dsv4.layers.sink_attention import fused_sink_attention

    gen = torch.Generator(device="cuda").manual_seed(7)
    for batch, heads, head_dim, cache_len, keys, shared in ((1, 128, 512, 384, 384, True), (1, 128, 512, 400, 384, False),
                                                          (3, 4, 80, 40, 20, False), (2, 64, 512, 136, 129, True)):
        q = torch.randn(batch, heads, head_dim, device="cuda", generator=gen).to(torch.bfloat16)
        cache = (torch.randn(batch, cache_len, head_dim, device="cuda", generator=gen) * 3).to(torch.bfloat16)
        rows = 1 if shared else batch
        slots = torch.stack([torch.randperm(cache_len, device="cuda", generator=gen)[:keys] for _ in range(rows)])
        valid = torch.rand(rows, keys, device="cuda", generator=gen) < 0.8
        valid[:, 0] = True  # the current token's slot is always valid
        sink = torch.randn(heads, device="cuda", generator=gen)
        fused = fused_sink_attention(q, cache, slots, valid, sink, head_dim**-0.5)
        assert fused is not None
        attn = SimpleNamespace(head_dim=head_dim, sink=sink)
        gathered = cache.gather(1, slots.expand(batch, -1).unsqueeze(-1).expand(-1, -1, head_dim))
        torch_form = Attention.attend(attn, q, gathered, valid).float()
        error = (fused.float() - torch_form).abs()
        within_one = (error <= torch_form.abs().clamp(min=1e-3) * 2.0**-7).float().mean().item()
        # where the P.V sum cancels to near zero, a flipped bf16 probability is many of the output's own ulps:
        # bound every output by the units of its row's largest
        row_ulps = (error / (torch_form.abs().amax(-1, keepdim=True) * 2.0**-7)).max().item()
        assert within_one >= 0.999 and row_ulps <= 2, (batch, heads, head_dim, within_one, row_ulps)


@needs_gpu
@pytest.mark.parametrize("source", ["tied", "zero at the k-th", "indexer"])
@pytest.mark.parametrize("n, k", [(2048, 512), (4096, 1024), (300, 512)])
def test_indexer_top_k_is_the_official_cuda_topk_of_the_written_slots(n, k, source):
    """20 trials of bf16 scores full of ties (+0.0 and -0.0 among them, at the k-th value or not; or the indexer's
    own scores of FP4 queries and keys): `top_entries` over the fixed-size slot list (-inf past the n written slots; 65536 slots
    take CUDA's multi-block topk) picks what the official `torch.topk` over the written slots picks, in its
    order, on CUDA and with the rule written in torch ops on the CPU."""
    from official_forms import tied_scores

    from dsv4.layers.attention import Indexer, top_entries
    from dsv4.layers.primitives import hadamard_fp4, make_fp4_tables

    gen = torch.Generator(device="cuda").manual_seed(11)
    tables = make_fp4_tables("cuda")
    for trial in range(20):
        if source != "indexer":
            scores = tied_scores(n, gen, "cuda", zeros=0.2 if source == "tied" else 0.6)
        else:
            q = hadamard_fp4(torch.randn(1, 64, 128, device="cuda", generator=gen).to(torch.bfloat16), tables)
            keys = hadamard_fp4(torch.randn(1, n, 128, device="cuda", generator=gen).to(torch.bfloat16), tables)
            w = (torch.randn(1, 64, device="cuda", generator=gen) * 128**-0.5 * 64**-0.5).to(torch.bfloat16)
            scores = Indexer.scores(None, q, w, keys)
        official = torch.topk(scores, min(k, n))
        for slots in (8192, 65536):
            padded = torch.cat([scores, scores.new_full((1, slots - n), float("-inf"))], dim=1)
            for picked in (top_entries(padded, k), top_entries(padded.cpu(), k)):
                assert torch.equal(picked.indices[:, : min(k, n)].cuda(), official.indices), (trial, slots)
                assert torch.equal(picked.values[:, : min(k, n)].cuda().view(torch.int16),
                                   official.values.view(torch.int16)), (trial, slots)


@needs_gpu
@pytest.mark.parametrize("compressed", [False, True])
def test_rope_table_on_cuda_is_the_official_recipe_built_there(compressed):
    """CUDA's pow, cos and sin round differently from the CPU's: the table built on the GPU, as the official
    model builds it, equals the official recipe's bits there."""
    from official_forms import official_rope_table

    from dsv4.config import preset
    from dsv4.layers.primitives import make_rope_table

    config = preset("flash")
    table = make_rope_table(config, compressed, 1 << 17, "cuda")
    assert torch.equal(table.view(torch.int32), official_rope_table(config, compressed, 1 << 17, "cuda").view(torch.int32))


@needs_gpu
def test_fused_compressor_state_write_and_pool_match_the_torch_form():
    """The compressor's slot write and softmax pool as one kernel against the torch ops on CUDA, step by step over
    several windows (HCA: 128 slots; CSA: two halves of 4, alternating): the states bit for bit, the pooled
    entries to fp32 rounding (the sums add in another order)."""
    from dsv4.layers.compressor import Compressor
    from dsv4.layers.compressor_pool import fused_state_pool

    gen = torch.Generator(device="cuda").manual_seed(8)
    for ratio, width, batch in ((128, 512, 1), (4, 512, 1), (4, 128, 2)):
        overlap = ratio == 4
        channels, slots = (1 + overlap) * width, (2 if overlap else 1) * ratio
        torch_form = Compressor.__new__(Compressor)
        torch_form.ratio, torch_form.width, torch_form.overlap = ratio, width, overlap
        torch_form.kv_state = torch.zeros(batch, slots, channels, device="cuda")
        torch_form.score_state = torch.full((batch, slots, channels), float("-inf"), device="cuda")
        kv_state, score_state = torch_form.kv_state.clone(), torch_form.score_state.clone()
        ape = torch.randn(ratio, channels, device="cuda", generator=gen)
        for position in range(0, 3 * ratio + 3, 1 if ratio == 4 else 7):
            kv = torch.randn(batch, channels, device="cuda", generator=gen)
            score = torch.randn(batch, channels, device="cuda", generator=gen) * 4
            pos = torch.tensor([position], device="cuda")
            pooled = fused_state_pool(kv, score, ape, kv_state, score_state, pos, ratio, overlap, width)
            half = torch.remainder(torch.div(pos, ratio, rounding_mode="floor"), 2)
            slot = torch.remainder(pos, ratio) + (half * ratio if overlap else 0)
            torch_form.kv_state.index_copy_(1, slot, kv.unsqueeze(1))
            torch_form.score_state.index_copy_(1, slot, (score + ape[position % ratio]).unsqueeze(1))
            expected = torch_form._pool(half)
            assert torch.equal(kv_state, torch_form.kv_state) and torch.equal(score_state, torch_form.score_state)
            torch.testing.assert_close(pooled, expected, rtol=1e-5, atol=1e-6)


@needs_gpu
def test_a_speculative_steps_two_tokens_pool_in_one_launch_as_in_two():
    """Two tokens per launch (a speculative step: token 1's window holds token 0's fresh slot, and for CSA the
    two may sit on either side of a window boundary) write the same states and pool the same windows, bit for
    bit, as one launch per token."""
    from dsv4.layers.compressor_pool import fused_state_pool

    gen = torch.Generator(device="cuda").manual_seed(9)
    for ratio, width, batch in ((128, 512, 1), (4, 512, 1), (4, 128, 3)):
        overlap = ratio == 4
        channels, slots = (1 + overlap) * width, (2 if overlap else 1) * ratio
        together = [torch.randn(batch, slots, channels, device="cuda", generator=gen) for _ in range(2)]
        apart = [state.clone() for state in together]
        ape = torch.randn(ratio, channels, device="cuda", generator=gen)
        for position in range(0, 3 * ratio + 3, 1 if ratio == 4 else 5):
            kv = torch.randn(2 * batch, channels, device="cuda", generator=gen)  # rows (sequence, token)
            score = torch.randn(2 * batch, channels, device="cuda", generator=gen) * 4
            at = torch.tensor([position, position + 1], device="cuda")
            pooled = fused_state_pool(kv, score, ape, *together, at, ratio, overlap, width)
            one_by_one = [fused_state_pool(kv[t::2].contiguous(), score[t::2].contiguous(), ape, *apart, at[t : t + 1],
                                           ratio, overlap, width) for t in range(2)]
            assert torch.equal(together[0], apart[0]) and torch.equal(together[1], apart[1]), (ratio, position)
            assert torch.equal(pooled, torch.stack(one_by_one, dim=1).flatten(0, 1)), (ratio, position)


@needs_gpu
def test_a_speculative_steps_two_tokens_attend_in_one_launch_as_in_two():
    """The attention kernels over [T, B or 1, S] key lists, q rows in (sequence, token) order, against one
    launch per token: bit for bit (each query row is its own program either way)."""
    from dsv4.layers.sink_attention import fused_sink_attention

    gen = torch.Generator(device="cuda").manual_seed(10)
    for batch, heads, head_dim, cache_len, keys, shared in ((1, 128, 512, 400, 384, True), (3, 4, 80, 40, 20, False),
                                                          (2, 64, 512, 136, 129, True)):
        q = torch.randn(2 * batch, heads, head_dim, device="cuda", generator=gen).to(torch.bfloat16)
        cache = (torch.randn(batch, cache_len, head_dim, device="cuda", generator=gen) * 3).to(torch.bfloat16)
        rows = 1 if shared else batch
        slots = torch.stack([torch.stack([torch.randperm(cache_len, device="cuda", generator=gen)[:keys]
                                          for _ in range(rows)]) for _ in range(2)])
        valid = torch.rand(2, rows, keys, device="cuda", generator=gen) < 0.8
        valid[..., 0] = True
        sink = torch.randn(heads, device="cuda", generator=gen)
        both = fused_sink_attention(q, cache, slots, valid, sink, head_dim**-0.5)
        one_by_one = [fused_sink_attention(q[t::2].contiguous(), cache, slots[t], valid[t], sink, head_dim**-0.5)
                      for t in range(2)]
        assert both is not None and torch.equal(both, torch.stack(one_by_one, dim=1).flatten(0, 1)), batch


@needs_gpu
def test_argmax_kernel_matches_torch_and_takes_the_first_of_tied_maxima():
    from dsv4.layers.argmax import argmax_rows

    gen = torch.Generator(device="cuda").manual_seed(9)
    for rows, n in ((1, 129280), (2, 129280), (3, 512), (1, 4097)):
        logits = torch.randn(rows, n, device="cuda", generator=gen)
        assert torch.equal(argmax_rows(logits), logits.argmax(-1)), (rows, n)
        tied = logits.clone()
        tied[:, [n // 3, n // 2, n - 1]] = 100.0  # the same max in three blocks: the first wins
        assert argmax_rows(tied).tolist() == [n // 3] * rows
