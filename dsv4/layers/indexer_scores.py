"""The CSA indexer's scores as one Triton kernel on CUDA (DSV4_FUSION_OFF=index_scores: the torch form).

In torch ops the scores score_j = sum_h w_h relu(q_h . k_j) over every compressed entry, then the mask of the
entries not yet written, are five kernels per token and CSA layer (a bf16 GEMM, relu, multiply, head sum,
masked_fill), each writing a [B, heads, n] or [B, n] tensor the next one reads back. Here one program takes a
tile of entries for all heads and keeps the products in registers. It rounds where the torch form rounds: the
dot products (fp32 accumulation) to bf16, the products with the head weights to bf16, their head sum (fp32
accumulation, starting from +0 as torch's: an all-zero sum is +0) to bf16; masked entries -inf. Only the order of
the fp32 additions can differ (tensor-core tiles against cuBLAS's GEMM, a tree against torch's reduction), so a
score can land one bf16 unit away from the torch form's (docs/dsv4-numerics.md). Other devices use the torch form.
"""

from __future__ import annotations

import torch

from dsv4.layers.kernels import INTERPRET, pdl_options, runs_triton, tl, triton, wait_for_previous_kernel

BLOCK_N = 16  # entries per program

if triton is not None:

    @triton.jit
    def _index_scores(q_ptr, w_ptr, keys, masked, out, heads, n, key_batch_stride, DIM: tl.constexpr,
                      HEADS_PAD: tl.constexpr, BLOCK_N: tl.constexpr, BF16_DOT: tl.constexpr, PDL: tl.constexpr):
        wait_for_previous_kernel(PDL)
        b = tl.program_id(0)
        entries = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        h = tl.arange(0, HEADS_PAD)
        dims = tl.arange(0, DIM)
        h_ok, present = h < heads, entries < n
        q = tl.load(q_ptr + (b.to(tl.int64) * heads + h)[:, None] * DIM + dims[None, :], mask=h_ok[:, None], other=0.0)
        k = tl.load(keys + b.to(tl.int64) * key_batch_stride + entries[:, None] * DIM + dims[None, :],
                    mask=present[:, None], other=0.0)
        # a bf16 tensor-core dot with fp32 accumulation, as the torch form's bf16 GEMM (an fp32 "ieee" dot of the
        # same values, exact products too, ran 69 us per call at Pro's 64 heads x 128); Triton's interpreter gets
        # bf16 dots wrong, so there the fp32 form runs
        if BF16_DOT:
            dots = tl.dot(q, tl.trans(k))
        else:
            dots = tl.dot(q.to(tl.float32), tl.trans(k.to(tl.float32)), input_precision="ieee")
        dots = dots.to(tl.bfloat16).to(tl.float32)  # [heads, entries], rounded as the GEMM's bf16 output
        w = tl.load(w_ptr + b * heads + h, mask=h_ok, other=0.0).to(tl.float32)
        products = (tl.maximum(dots, 0.0) * w[:, None]).to(tl.bfloat16).to(tl.float32)
        s = tl.sum(products, axis=0)
        s = tl.where(s == 0.0, 0.0, s)  # +0 for an all-zero sum, as torch's reduction from +0
        off = tl.load(masked + entries, mask=present, other=1) != 0
        tl.store(out + b * n + entries, tl.where(off, float("-inf"), s).to(tl.bfloat16), mask=present)


def fused_index_scores(q: torch.Tensor, w: torch.Tensor, keys: torch.Tensor, masked: torch.Tensor) -> torch.Tensor | None:
    """bf16 scores [B, n] for queries q [B, heads, dim], head weights w [B, heads] and keys [B, n, dim] (rows
    contiguous), -inf where `masked` [n]; None where the torch form must run."""
    if not runs_triton(q, "index_scores"):
        return None
    batch, heads, dim = q.shape
    if (q.dtype != torch.bfloat16 or w.dtype != torch.bfloat16 or keys.dtype != torch.bfloat16
            or not q.is_contiguous() or not w.is_contiguous() or keys.stride(2) != 1 or keys.stride(1) != dim
            or masked.dtype != torch.bool or not masked.is_contiguous() or dim & (dim - 1) or dim < 16):
        return None
    n = keys.shape[1]
    out = q.new_empty((batch, n))  # graphready: ignore[GR301] inside a capture the graph pool serves it
    _index_scores[(batch, triton.cdiv(n, BLOCK_N))](
        q, w, keys, masked.view(torch.uint8), out, heads, n, keys.stride(0), DIM=dim,
        HEADS_PAD=max(16, triton.next_power_of_2(heads)), BLOCK_N=BLOCK_N, BF16_DOT=not INTERPRET, num_warps=4,
        **pdl_options())
    return out
