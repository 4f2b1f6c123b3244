"""The fp32 matrix-vector kernel (`dsv4/layers/fp32_matvec.py`) against the official fp32 GEMM.

The head, the router and the compressors run fp32 GEMMs of bf16 values. On a GPU the kernel reads the weight as
stored and must match the fp32 GEMM to fp32 rounding of the sum (the same exact products, another order of
additions); on the CPU under Triton's interpreter the same logic; elsewhere the official form runs, bit for bit.
"""

from __future__ import annotations

import pytest
import torch

from dsv4.layers.fp32_matvec import MAX_ROWS, MIN_PROGRAMS, fp32_matvec, tiles, triton
from dsv4.layers.kernels import INTERPRET
from dsv4.layers.weights import fp32_gemm_weight

CUDA = torch.cuda.is_available() and triton is not None
DEVICES = [pytest.param("cuda", marks=[pytest.mark.gpu, pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")]),
           pytest.param("cpu", marks=pytest.mark.skipif(triton is None or not INTERPRET,
                                                        reason="needs Triton with TRITON_INTERPRET=1"))]


def inputs(rows: int, n: int, k: int, seed: int, x_dtype=torch.bfloat16, w_dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(rows, k, generator=g) * 2).to(torch.bfloat16).to(x_dtype)  # bf16 values, as the model's
    w = (torch.randn(n, k, generator=g) * 0.02).to(w_dtype)
    return x, w


def within_fp32_rounding(got: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> bool:
    """Each of k fp32 additions rounds by at most half an ulp of a partial sum bounded by sum |x_k w_k|."""
    want = x.double() @ w.double().T
    bound = (x.double().abs() @ w.double().abs().T) * x.shape[1] * 2**-24
    return bool(((got.double() - want).abs() <= bound).all())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rows", [1, 2, 3, MAX_ROWS + 1])  # the last is past the kernel: cuBLAS or the torch form
@pytest.mark.parametrize("n,k", [(1000, 1024), (77, 1536), (256, 512), (3, 100)])  # partial tiles both ways
def test_bf16_weights_give_the_official_fp32_gemm_to_fp32_rounding(device, rows, n, k):
    x, w = inputs(rows, n, k, rows + n)
    got = fp32_matvec(x.to(device), w.to(device)).cpu()
    assert got.dtype == torch.float32 and got.shape == (rows, n)
    assert within_fp32_rounding(got, x, w)


@pytest.mark.parametrize("device", DEVICES)
def test_fp32_inputs_and_weights_too(device):
    """The router and compressors get the normed input in fp32; a checkpoint may store a weight in fp32."""
    x, w = inputs(2, 300, 768, 4, x_dtype=torch.float32, w_dtype=torch.float32)
    got = fp32_matvec(x.to(device), w.to(device)).cpu()
    assert within_fp32_rounding(got, x, w)


@pytest.mark.parametrize("device", DEVICES)
def test_results_land_in_the_given_buffer_and_do_not_depend_on_it(device):
    x, w = inputs(2, 300, 512, 3)
    x, w = x.to(device), w.to(device)
    out = torch.full((2, 300), float("nan"), device=device)
    assert fp32_matvec(x, w, out) is out
    assert torch.equal(out, fp32_matvec(x, w))


def test_small_matrices_get_fewer_rows_per_program_so_every_sm_has_work():
    if triton is None:
        pytest.skip("needs Triton")
    assert tiles(129280, 4096) == (8, 1024)  # the head: the swept tile
    block_n, block_k = tiles(256, 4096)  # the router: one row per program, the whole row in one step
    assert (block_n, block_k) == (1, 4096) and 256 // block_n >= MIN_PROGRAMS
    assert tiles(2048, 4096)[0] == 8 and tiles(1024, 7168)[0] == 4
    assert tiles(129280, 4096, rows=2) == (8, 512)  # one program serves both rows: the same partial sums in all


def test_without_triton_the_cpu_runs_the_official_form_bit_for_bit():
    if INTERPRET:
        pytest.skip("under the interpreter the kernel runs on the CPU")
    x, w = inputs(3, 200, 256, 5)
    assert torch.equal(fp32_matvec(x, w), x.float() @ w.float().T)


def test_weights_are_kept_in_the_checkpoints_bf16_and_an_fp32_one_as_it_is():
    bf16 = torch.randn(8, 16).to(torch.bfloat16)
    assert fp32_gemm_weight(bf16, "cpu").dtype == torch.bfloat16
    fp32 = torch.randn(8, 16)
    assert torch.equal(fp32_gemm_weight(fp32, "cpu"), fp32)  # rounding it to bf16 would change the results
