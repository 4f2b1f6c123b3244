"""y = x @ W^T for an FP8 weight with 128x128 block scales, reading the e4m3 bytes (one Triton kernel).

At decode batch sizes the dense (attention) linears are matrix-vector products bound by the bytes they read. A
bf16 copy of an FP8 weight reads twice the bytes of the weight itself. This kernel reads the FP8 weight and its
block scales: each program keeps one fp32 partial sum per (output row, column of a loop step), adds
(x * its block's scale) * w for every step, and reduces once at the end, so the loop has no reduction
(a first version that summed each block and quantised x inside the loop ran at a third of the bandwidth: two
block-wide reductions per 2 KB of weights). A bf16 copy rounded each weight times an fp32 block scale to bf16
first; here the weights keep their exact values and only x * scale rounds (fp32), so results agree with that path
and with the official scaled FP8 GEMM to bf16 precision, not bit for bit. The caller quantises x (`act_quant`).

Grouped form (wo_a): W holds G groups of rows and x G slices of its columns, group g's rows reading slice g.
A program covers BLOCK_N output rows of one row of x (up to MAX_ROWS: decode batches) in 2-D tiles, which keep
the weight loads 16-byte vectors (a 3-D [rows, out, in] form loaded single bytes and spent 1.7x the instructions
per weight). The programs of one tile for different rows run side by side, so the rows after the first read the
tile from L2, and each row's result is the same whatever the batch. The weights never depend on the kernel
before, so a program reads its first step's weights before it waits for that kernel (programmatic dependent
launch): the read overlaps the other kernel's tail.
"""

from __future__ import annotations

import torch

from dsv4.formats import FP8_BLOCK, FP8BlockWeight, e8m0_to_float32
from dsv4.layers.kernels import pdl_options, runs_triton, tl, triton, wait_for_previous_kernel

MAX_ROWS = 8  # rows of x one launch serves (MTP's h_proj: 2 tokens x 4 streams); more use the caller's other path
# Tiles from `benchmarks/dsv4_matvec.py --sweep` on an H200 (Flash shapes): a step reads TILE weights, the
# widest run of columns that divides the in-features (1024 at most: wider spills the accumulator's registers) times
# the most output rows that leaves (8 at 1024 columns: taller tiles left SMs idle at the tail); 2048 columns on 8
# warps where there are fewer than MIN_PROGRAMS programs (about four per SM), so each keeps more bytes in flight.
TILE = 8192
BLOCK_N_SIZES = (32, 16, 8)  # each divides the 128-row scale blocks
BLOCK_K_SIZES = (1024, 512, 256, 128)
MIN_PROGRAMS = 512
WIDE_K, WIDE_WARPS = 2048, 8
NUM_WARPS, NUM_STAGES = 4, 4

if triton is not None:

    @triton.jit
    def _fp8_matvec(x, w, scale, out, n_out, group_rows, sx_r, so_r, sw_n, ss_n,
                    K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, KB: tl.constexpr,
                    PDL: tl.constexpr):
        row = tl.program_id(0)  # the row of x: programs of one tile and different rows run side by side (L2)
        first = tl.program_id(1) * BLOCK_N
        n = first + tl.arange(0, BLOCK_N)
        n_ok = n < n_out
        # the weights do not depend on the kernel before: the first step's are read while it finishes
        cols = tl.arange(0, BLOCK_K)
        wv = tl.load(w + n[:, None] * sw_n + cols[None, :], mask=n_ok[:, None], other=0.0).to(tl.float32)
        wait_for_previous_kernel(PDL)
        xs = x + row * sx_r + (first // group_rows) * K  # this group's slice of the row
        scales = scale + (first // KB) * ss_n  # BLOCK_N divides KB: the program's rows share one row of scales
        acc = (tl.load(xs + cols).to(tl.float32) * tl.load(scales + cols // KB))[None, :] * wv
        for k0 in range(BLOCK_K, K, BLOCK_K):
            cols = k0 + tl.arange(0, BLOCK_K)
            xv = tl.load(xs + cols).to(tl.float32) * tl.load(scales + cols // KB)
            wv = tl.load(w + n[:, None] * sw_n + cols[None, :], mask=n_ok[:, None], other=0.0).to(tl.float32)
            acc += xv[None, :] * wv
        tl.store(out + row * so_r + n, tl.sum(acc, axis=1).to(tl.bfloat16), mask=n_ok)


def kernel_weight(w, device) -> FP8BlockWeight | None:
    """Checkpoint entry `w` on `device` as the kernel reads it (fp32 block scales: E8M0 ones decoded once), or
    None when the kernel cannot read it there."""
    if not isinstance(w, FP8BlockWeight) or w.weight.dim() != 2 or w.shape[-1] % FP8_BLOCK:
        return None
    if not runs_triton(torch.empty(0, device=device), "fp8_matvec"):
        return None
    w = w.to(device)
    return w if w.scale.dtype == torch.float32 else FP8BlockWeight(w.weight, e8m0_to_float32(w.scale))


def stack(parts: list[FP8BlockWeight]) -> FP8BlockWeight | None:
    """The parts' rows one after the other, or None unless each part's rows are whole scale blocks."""
    if any(p.shape[0] % FP8_BLOCK for p in parts):
        return None
    return FP8BlockWeight(torch.cat([p.weight for p in parts]), torch.cat([p.scale for p in parts]))


def fp8_matvec(x: torch.Tensor, matrix: FP8BlockWeight, groups: int = 1) -> torch.Tensor | None:
    """bf16 [rows, out]: x [rows, groups * in] times `matrix` (from `kernel_weight` or `stack`), whose rows form
    `groups` equal groups, each reading its slice of x; None where the kernel cannot run (another device, too many
    rows, a layout it does not read)."""
    n_out, k = matrix.shape
    rows = x.shape[0]
    if (not runs_triton(x) or x.dim() != 2 or rows > MAX_ROWS or x.shape[1] != groups * k or x.stride(1) != 1
            or n_out % groups or matrix.weight.stride(1) != 1 or x.dtype != torch.bfloat16):
        return None
    block_k = next(b for b in BLOCK_K_SIZES if k % b == 0)  # in-features are whole 128-column scale blocks
    block_n = next((b for b in BLOCK_N_SIZES if b * block_k <= TILE and (n_out // groups) % b == 0), None)
    if block_n is None:
        return None
    warps = NUM_WARPS
    if n_out // block_n < MIN_PROGRAMS and k % WIDE_K == 0:
        block_k, warps = WIDE_K, WIDE_WARPS
    out = torch.empty(rows, n_out, dtype=torch.bfloat16, device=x.device)  # graphready: ignore[GR301] graph pool
    launch(x, matrix, out, groups, block_n, block_k, warps, NUM_STAGES)
    return out


def launch(x, matrix: FP8BlockWeight, out, groups: int, block_n: int, block_k: int, num_warps: int,
           num_stages: int) -> None:
    """One kernel launch with explicit tile sizes (`benchmarks/dsv4_matvec.py` sweeps them)."""
    n_out, k = matrix.shape
    _fp8_matvec[(x.shape[0], triton.cdiv(n_out, block_n))](
        x, matrix.weight, matrix.scale, out, n_out, n_out // groups, x.stride(0), out.stride(0),
        matrix.weight.stride(0), matrix.scale.stride(0), K=k, BLOCK_N=block_n, BLOCK_K=block_k, KB=FP8_BLOCK,
        num_warps=num_warps, num_stages=num_stages, **pdl_options())
