"""The FP8 matrix-vector kernel (`dsv4/layers/fp8_matvec.py`) against the official scaled FP8 GEMM in float64.

On a GPU to bf16 rounding of the output; on the CPU under Triton's interpreter (TRITON_INTERPRET=1 with Triton
importable; skipped otherwise) the same logic, looser, since the interpreter's e4m3 cast can round a value
differently from CUDA's (`dsv4.layers.kernels`).
"""

from __future__ import annotations

import pytest
import torch

from dsv4.formats import quantize_fp8_block
from dsv4.layers.fp8_matvec import MAX_ROWS, fp8_matvec, kernel_weight, stack, triton
from dsv4.layers.kernels import INTERPRET
from dsv4.layers.primitives import act_quant
from dsv4.layers.weights import Dense, StackedDense

CUDA = torch.cuda.is_available() and triton is not None
DEVICES = [pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")]),
           pytest.param("cpu", marks=pytest.mark.skipif(triton is None or not INTERPRET,
                                                        reason="needs Triton with TRITON_INTERPRET=1"))]


def official(x: torch.Tensor, weight, quantize: bool, groups: int = 1) -> torch.Tensor:
    """The official `linear()` in float64: FP8-rounded input (when `quantize`), the weight's exact values."""
    x = (act_quant(x) if quantize else x).double()
    w = weight.dequantize(dtype=torch.float32).double()
    xs, ws = x.unflatten(-1, (groups, -1)), w.unflatten(0, (groups, -1))
    return torch.einsum("rgk,gnk->rgn", xs, ws).flatten(1)


def assert_agrees(y: torch.Tensor, want: torch.Tensor, device: str) -> None:
    assert y.dtype == torch.bfloat16 and y.shape == want.shape
    tolerance = 2**-8 if device == "cuda" else 2e-2  # bf16 output rounding / interpreter e4m3 rounding
    assert (y.double() - want).abs().max() <= tolerance * want.abs().max()


def fp8_weight(out: int, inp: int, seed: int, scale_format: str = "f32"):
    g = torch.Generator().manual_seed(seed)
    return quantize_fp8_block(torch.randn(out, inp, generator=g) * 0.05, scale_format)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rows", [1, 2, 3])
@pytest.mark.parametrize("quantize", [True, False])
@pytest.mark.parametrize("scale_format", ["f32", "e8m0"])
def test_the_kernel_is_the_official_scaled_fp8_gemm(device, rows, quantize, scale_format):
    weight = fp8_weight(384, 512, rows, scale_format)
    x = (torch.randn(rows, 512, generator=torch.Generator().manual_seed(9)) * 3).to(torch.bfloat16).to(device)
    y = fp8_matvec(act_quant(x) if quantize else x, kernel_weight(weight, device))
    assert_agrees(y.cpu(), official(x.cpu(), weight, quantize), device)


@pytest.mark.parametrize("device", DEVICES)
def test_grouped_rows_read_their_own_slice_of_x(device):
    """wo_a: 4 groups of 128 rows, group g reading columns g*256..(g+1)*256 of x."""
    weight = fp8_weight(512, 256, 5)
    x = torch.randn(2, 4 * 256, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16).to(device)
    y = fp8_matvec(x, kernel_weight(weight, device), groups=4)
    assert_agrees(y.cpu(), official(x.cpu(), weight, False, groups=4), device)


@pytest.mark.parametrize("device", DEVICES)
def test_stacked_matrices_split_back_into_each_ones_product(device):
    a, b = fp8_weight(256, 512, 1), fp8_weight(128, 512, 2)
    stacked = StackedDense([a, b], device, quantize_input=True)
    assert stacked.joint is not None and stacked.joint.fp8 is not None  # one launch for both
    x = torch.randn(1, 512, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16).to(device)
    ya, yb = stacked(x)
    assert_agrees(ya.cpu(), official(x.cpu(), a, True), device)
    assert_agrees(yb.cpu(), official(x.cpu(), b, True), device)
    assert stack([kernel_weight(fp8_weight(100, 512, 4), device)]) is None  # rows not whole scale blocks


@pytest.mark.parametrize("device", DEVICES)
def test_dense_reads_fp8_weights_and_dequantizes_for_batches_the_kernel_does_not_serve(device):
    weight = fp8_weight(256, 512, 6)
    dense = Dense(weight, device, resident=True, quantize_input=True)
    assert dense.fp8 is not None and dense.weight is None  # no bf16 copy
    assert dense.bytes_read == 256 * 512 + 2 * 4 * 4  # e4m3 bytes and the fp32 block scales
    x = torch.randn(MAX_ROWS + 1, 512, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16).to(device)
    assert fp8_matvec(x, dense.fp8) is None
    assert_agrees(dense(x).cpu(), official(x.cpu(), weight, True), device)
    assert_agrees(dense(x[:1]).cpu(), official(x[:1].cpu(), weight, True), device)


@pytest.mark.parametrize("device", DEVICES)
def test_dense_serves_streams_of_several_tokens_with_the_kernel(device, monkeypatch):
    """MTP's h_proj reads [2 tokens, 4 streams, D]: eight rows, in the kernel, not a dequantized copy per call."""
    weight = fp8_weight(256, 512, 8)
    dense = Dense(weight, device, resident=True, quantize_input=True)
    monkeypatch.setattr(Dense, "matrix", lambda self: pytest.fail("dequantized the weight"))
    x = torch.randn(2, 4, 512, generator=torch.Generator().manual_seed(4)).to(torch.bfloat16).to(device)
    y = dense(x)
    assert y.shape == (2, 4, 256) and 2 * 4 <= MAX_ROWS
    assert torch.equal(y.flatten(0, 1), fp8_matvec(act_quant(x.flatten(0, 1)), dense.fp8))


def test_without_the_kernel_dense_keeps_its_bf16_copy():
    if INTERPRET:
        pytest.skip("under the interpreter the kernel runs on the CPU")
    weight = fp8_weight(256, 128, 7)
    dense = Dense(weight, "cpu", resident=True)
    assert dense.fp8 is None and dense.weight is not None
    x = torch.randn(2, 4 * 128, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    grouped = dense(x, groups=4)  # the torch form of the grouped product
    want = official(x, weight, False, groups=4)
    assert (grouped.double() - want).abs().max() <= 2**-6 * want.abs().max()
