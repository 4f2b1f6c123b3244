import math
import subprocess
import sys

import pytest
import torch

from dsv4.formats import (BF16Weight, FormatError, FP8BlockWeight, MXFP4Weight, NVFP4Weight, QuantizedWeight,
                          as_bf16, e2m1_lut, e8m0_to_float32, quantize_fp8_block, quantize_mxfp4, quantize_nvfp4,
                          round_to_e2m1)


def test_e2m1_table_is_exact():
    assert e2m1_lut().tolist() == [0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6]


def test_e8m0_is_two_to_the_byte_minus_127_for_every_byte():
    b = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    for scale in (b, b.view(torch.float8_e8m0fnu)):
        got = e8m0_to_float32(scale)
        assert got.dtype == torch.float32
        assert got[:255].tolist() == [math.ldexp(1.0, k - 127) for k in range(255)]
        assert math.isnan(got[255])


def test_e2m1_rounding_is_nearest_ties_to_even_and_saturates():
    x = torch.tensor([0.25, 0.26, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 5.01, 7.0, 1e9, -7.0, -0.2, -0.3])
    assert round_to_e2m1(x).tolist() == [0, 1, 2, 2, 4, 4, 6, 6, 7, 7, 7, 15, 0, 9]


def test_nvfp4_quantize_matches_hand_computed_bytes_and_scales():
    w = torch.zeros(1, 32)
    w[0, :4] = torch.tensor([12.0, 6.0, -3.0, 1.0])  # block 0: amax 12
    w[0, 16:18] = torch.tensor([3.0, -0.75])         # block 1: amax 3
    q = quantize_nvfp4(w)
    gs = 12.0 / (6 * 448)
    assert q.global_scale.item() == pytest.approx(gs, rel=1e-7)
    # block scale = amax / 6 / gs: 448 and 112, both exact in e4m3
    assert q.scale.float().tolist() == [[448.0, 112.0]]
    # block 0 values / 2.0 -> 6, 3, -1.5, 0.5 -> codes 7, 5, 11, 1; block 1 / 0.5 -> 6, -1.5 -> 7, 11
    assert q.packed[0, :2].tolist() == [7 | 5 << 4, 11 | 1 << 4]
    assert q.packed[0, 8].item() == 7 | 11 << 4
    assert torch.equal(q.dequantize(torch.float32), w)


def test_nvfp4_dequantize_of_hand_built_tensors():
    packed = torch.tensor([[0x21] + [0] * 7], dtype=torch.uint8)  # k0 = 0.5, k1 = 1.0
    scale = torch.tensor([[2.0]]).to(torch.float8_e4m3fn)
    w = NVFP4Weight(packed, scale, torch.tensor(0.25), torch.tensor(1.0))
    assert w.dequantize(torch.float32)[0, :3].tolist() == [0.25, 0.5, 0.0]
    assert w.shape == (1, 16) and w.nbytes == 8 + 1 + 4 + 4


def test_fp8_block_scales_by_hand_including_partial_edge_blocks():
    w = torch.zeros(130, 130)
    w[0, 0] = 896.0   # block (0,0): amax 896 -> 896/448 = 2 -> E8M0 byte 128
    w[0, 129] = 1.0   # block (0,1), a 2-column edge block: 1/448 -> 2^ceil(log2) = 2^-8 -> byte 119
    q = quantize_fp8_block(w, "e8m0")
    assert q.scale.dtype == torch.float8_e8m0fnu
    assert q.scale.view(torch.uint8).tolist() == [[128, 119], [127, 127]]
    assert q.weight[0, 0].float().item() == 448.0 and q.weight[0, 129].float().item() == 256.0
    assert torch.equal(q.dequantize(torch.float32), w)
    f = quantize_fp8_block(w, "f32")
    assert f.scale.tolist() == [[2.0, pytest.approx(1 / 448)], [1.0, 1.0]]
    assert f.weight[0, 129].float().item() == 448.0


@pytest.mark.parametrize("scale_format", ["e8m0", "f32"])
def test_fp8_extremes_stay_finite_and_hit_the_max(scale_format):
    w = torch.tensor([[3e38, -3e38, 1.0, 0.0]])
    q = quantize_fp8_block(w, scale_format)
    top = q.weight.float().abs().max().item()
    assert top == 448.0 if scale_format == "f32" else 224.0 <= top <= 448.0  # a power-of-two scale lands in [224, 448]
    assert torch.isfinite(q.dequantize(torch.float32)).all()


def test_mxfp4_by_hand_power_of_two_scales():
    w = torch.zeros(2, 32)
    w[0, :3] = torch.tensor([6.0, -1.5, 0.5])  # amax 6 -> scale 2^0 (byte 127), exact
    w[1, :2] = torch.tensor([7.0, 1.0])        # amax 7 -> scale 2^ceil(log2(7/6)) = 2; 3.5 ties to 4; 0.5
    q = quantize_mxfp4(w)
    assert q.packed.dtype == torch.int8 and q.scale.view(torch.uint8).tolist() == [[127], [128]]
    assert q.packed.view(torch.uint8)[0, :2].tolist() == [7 | 11 << 4, 1]
    d = q.dequantize(torch.float32)
    assert torch.equal(d[0], w[0])
    assert d[1, :2].tolist() == [8.0, 1.0]


QUANTIZERS = {
    "nvfp4": (quantize_nvfp4, 0.12),
    "fp8-e8m0": (lambda w: quantize_fp8_block(w, "e8m0"), 0.04),
    "fp8-f32": (lambda w: quantize_fp8_block(w, "f32"), 0.04),
    "mxfp4": (quantize_mxfp4, 0.14),
    "bf16": (as_bf16, 0.005),
}


@pytest.mark.parametrize("fmt", QUANTIZERS)
def test_round_trip_stays_within_the_format_error(fmt):
    quantize, bound = QUANTIZERS[fmt]
    w = torch.randn(3, 200, 96, generator=torch.Generator().manual_seed(0)) * 0.05
    q = quantize(w)
    assert isinstance(q, QuantizedWeight) and q.shape == (3, 200, 96)
    d = q.dequantize(torch.float32)
    rel = ((d - w).norm() / w.norm()).item()
    assert rel < bound
    # and no element is off by more than the coarsest step of its block allows (1/6 of the block max for FP4)
    assert ((d - w).abs() <= w.abs().amax() / 5).all()
    assert q.dequantize().dtype == torch.bfloat16


@pytest.mark.parametrize("fmt", QUANTIZERS)
def test_index_select_picks_experts_without_host_sync_or_dynamic_shapes(fmt):
    quantize, _ = QUANTIZERS[fmt]
    w = quantize(torch.randn(4, 32, 64))
    idx = torch.tensor([3, 1, 3])
    assert torch.equal(w.index_select(idx).dequantize(), w.dequantize()[idx])
    # On the meta device every value is unknown: a host sync or a value-dependent shape would raise here.
    meta = w.to("meta").index_select(idx.to("meta")).dequantize()
    assert meta.shape == (3, 32, 64) and meta.device.type == "meta"


def test_nbytes_counts_what_is_stored():
    w = torch.randn(2, 256, 256)
    assert quantize_nvfp4(w).nbytes == 2 * (256 * 128 + 256 * 16 + 4)
    assert quantize_fp8_block(w, "e8m0").nbytes == 2 * (256 * 256 + 4)
    assert quantize_fp8_block(w, "f32").nbytes == 2 * (256 * 256 + 16)
    assert quantize_mxfp4(w).nbytes == 2 * (256 * 128 + 256 * 8)
    assert as_bf16(w).nbytes == 2 * 256 * 256 * 2


@pytest.mark.parametrize("build, message", [
    (lambda: NVFP4Weight(torch.zeros(4, 8, dtype=torch.int8), torch.zeros(4, 1).to(torch.float8_e4m3fn),
                         torch.tensor(1.0)), "uint8"),
    (lambda: NVFP4Weight(torch.zeros(4, 8, dtype=torch.uint8), torch.zeros(4, 2).to(torch.float8_e4m3fn),
                         torch.tensor(1.0)), "weight_scale must be float8_e4m3fn \\[4, 1\\]"),
    (lambda: NVFP4Weight(torch.zeros(4, 4, dtype=torch.uint8), torch.zeros(4, 1).to(torch.float8_e4m3fn),
                         torch.tensor(1.0)), "not a multiple of 16"),
    (lambda: FP8BlockWeight(torch.zeros(130, 10).to(torch.float8_e4m3fn), torch.ones(1, 1)), "\\[2, 1\\]"),
    (lambda: FP8BlockWeight(torch.zeros(10, 10), torch.ones(1, 1)), "float8_e4m3fn"),
    (lambda: MXFP4Weight(torch.zeros(4, 16, dtype=torch.uint8), torch.ones(4, 1)), "E8M0"),
    (lambda: BF16Weight(torch.zeros(4, dtype=torch.bfloat16)), "\\[..., out, in\\]"),
    (lambda: NVFP4Weight(torch.zeros(8, dtype=torch.uint8), torch.zeros(1).to(torch.float8_e4m3fn),
                         torch.tensor(1.0)), "\\[..., out, in/2\\]"),
    (lambda: quantize_nvfp4(torch.zeros(4, 24)), "multiple of 16"),
    (lambda: quantize_mxfp4(torch.zeros(4, 48)), "multiple of 32"),
    (lambda: quantize_fp8_block(torch.zeros(4, 4), "e5m2"), "scale_format"),
])
def test_invalid_tensors_are_rejected_with_the_expected_layout(build, message):
    with pytest.raises(FormatError, match=message):
        build()



needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

GRAPH_SCRIPT = """
import sys, torch
from dsv4.formats import quantize_fp8_block, quantize_mxfp4, quantize_nvfp4, as_bf16
make = {"nvfp4": quantize_nvfp4, "fp8-e8m0": lambda w: quantize_fp8_block(w, "e8m0"),
        "fp8-f32": lambda w: quantize_fp8_block(w, "f32"), "mxfp4": quantize_mxfp4, "bf16": as_bf16}[sys.argv[1]]
w = make(torch.randn(8, 200, 256, device="cuda"))
idx = torch.tensor([1, 2], device="cuda")
new_idx = torch.tensor([7, 0], device="cuda")
stream = torch.cuda.Stream()
stream.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(stream):
    out = w.index_select(idx).dequantize()  # warm-up outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        out = w.index_select(idx).dequantize()
    idx.copy_(new_idx)
    graph.replay()
stream.synchronize()
assert torch.equal(out, w.dequantize()[[7, 0]]), "replay does not follow the new expert ids"
print("ok")
"""


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("fmt", QUANTIZERS)
def test_index_select_dequantize_replays_in_a_cuda_graph(fmt):
    # A failed capture poisons the CUDA context, so each capture runs in its own process.
    r = subprocess.run([sys.executable, "-c", GRAPH_SCRIPT, fmt], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]
