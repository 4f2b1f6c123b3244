"""fp32 y = x @ W^T for the model's fp32 GEMMs, W read as stored (one Triton kernel).

The official model runs a few GEMMs in fp32 on weights it stores in bf16: the vocab head
(``linear(norm(x).float(), head.float())``), the router and the compressors' wkv/wgate. Their inputs are bf16
values too, and a product of two bf16 values is exact in fp32, so reading the weight as stored and multiplying and
adding in fp32 is the same arithmetic at half the bytes of an fp32 copy. At decode batch sizes cuBLAS's fp32 GEMV
also ran the small ones slowly (the router's 256 x 4096 in 5.2 us on an H200: 0.8 TB/s), and an fp32 copy of the
head was the largest single read of a step (Flash 508 us, Pro 870 us). Only the order of the fp32 additions differs
from cuBLAS's, so results agree with the fp32 GEMM to fp32 rounding of the sum, not bit for bit.

Each program keeps one fp32 partial sum per (row of x, output row, column of a step) and reduces once at the end,
and serves every row of x (up to MAX_ROWS), so a tile is read once per step whatever the batch (MTP verifies two
tokens: a program per row ran the head at 3.4 TB/s, re-reading each tile from L2). Small matrices get fewer
output rows per program, so that every SM has work. The first step's weights are read before waiting for the
kernel before (PDL).
"""

from __future__ import annotations

import torch

from dsv4.layers.kernels import pdl_options, runs_triton, tl, triton, wait_for_previous_kernel

MAX_ROWS = 4  # rows of x one launch serves (decode batches, MTP's two tokens); more use cuBLAS
TILE = 8192  # partial sums per program: 8 x 1024 on the head at one row (`benchmarks/dsv4_matvec.py --sweep`, H200)
BLOCK_N_SIZES = (8, 4, 2, 1)
MIN_PROGRAMS = 256  # about two per SM: fewer output rows per program until a matrix gives this many
NUM_WARPS, NUM_STAGES = 4, 4

if triton is not None:

    @triton.jit
    def _products(x, sx_r, rows, cols, k_ok, w, ROWS: tl.constexpr):
        """The rows of x times a weight tile [out, in], in fp32: [out, in] for one row, else [rows, out, in]
        (at one row the 3-D form ran the head 4 % slower)."""
        if ROWS == 1:
            p = tl.load(x + cols, mask=k_ok, other=0.0).to(tl.float32)[None, :] * w.to(tl.float32)
        else:
            r = tl.arange(0, ROWS)
            xv = tl.load(x + r[:, None] * sx_r + cols[None, :], mask=(r < rows)[:, None] & k_ok[None, :], other=0.0)
            p = xv.to(tl.float32)[:, None, :] * w.to(tl.float32)[None, :, :]
        return p

    @triton.jit
    def _fp32_matvec(x, w, out, n_out, rows, sx_r, so_r, sw_n, K: tl.constexpr, ROWS: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PDL: tl.constexpr):
        n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = n < n_out
        cols = tl.arange(0, BLOCK_K)
        k_ok = cols < K
        wv = tl.load(w + n[:, None] * sw_n + cols[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0.0)
        wait_for_previous_kernel(PDL)
        acc = _products(x, sx_r, rows, cols, k_ok, wv, ROWS)  # every row of x reads the tile once
        for k0 in range(BLOCK_K, K, BLOCK_K):
            cols = k0 + tl.arange(0, BLOCK_K)
            k_ok = cols < K
            wv = tl.load(w + n[:, None] * sw_n + cols[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0.0)
            acc += _products(x, sx_r, rows, cols, k_ok, wv, ROWS)
        if ROWS == 1:
            tl.store(out + n, tl.sum(acc, axis=1), mask=n_ok)
        else:
            r = tl.arange(0, ROWS)
            tl.store(out + r[:, None] * so_r + n[None, :], tl.sum(acc, axis=2),
                     mask=(r < rows)[:, None] & n_ok[None, :])


def tiles(n_out: int, k: int, rows: int = 1) -> tuple[int, int]:
    """(output rows per program, columns per step): the most output rows that still give MIN_PROGRAMS programs,
    and the columns that keep TILE fp32 partial sums over all `rows` rows of x."""
    block_n = next((b for b in BLOCK_N_SIZES if triton.cdiv(n_out, b) >= MIN_PROGRAMS), BLOCK_N_SIZES[-1])
    return block_n, min(TILE // (block_n * triton.next_power_of_2(rows)), triton.next_power_of_2(k))


def fp32_matvec(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """fp32 [rows, n] = x [rows, k] @ weight [n, k]^T, products and sums in fp32 whatever x's and the weight's
    storage (bf16 or fp32); written into `out` when given. The kernel on a Triton device; elsewhere (and for more
    rows than MAX_ROWS) the official form's fp32 GEMM."""
    rows, k = x.shape
    n_out = weight.shape[0]
    if out is None:
        out = torch.empty(rows, n_out, dtype=torch.float32, device=x.device)  # graphready: ignore[GR301] graph pool
    if (runs_triton(x, "fp32_matvec") and rows <= MAX_ROWS and x.stride(1) == 1 and weight.stride(1) == 1
            and out.stride(1) == 1 and out.dtype == torch.float32):
        block_n, block_k = tiles(n_out, k, rows)
        _fp32_matvec[(triton.cdiv(n_out, block_n),)](
            x, weight, out, n_out, rows, x.stride(0), out.stride(0), weight.stride(0), K=k,
            ROWS=triton.next_power_of_2(rows), BLOCK_N=block_n, BLOCK_K=block_k, num_warps=NUM_WARPS,
            num_stages=NUM_STAGES, **pdl_options())
        return out
    if x.is_cuda and x.dtype == weight.dtype == torch.bfloat16:  # cuBLAS: fp32 products, sums and output
        return out.copy_(torch.mm(x, weight.T, out_dtype=torch.float32))
    return torch.matmul(x.float(), weight.float().T, out=out)
