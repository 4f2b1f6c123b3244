"""RMSNorm and RoPE on a row, as one Triton kernel on CUDA.

At batch 1 every RMSNorm in torch ops is six kernels (cast, square, mean, add, rsqrt, multiply, cast back)
and every RoPE on a head's tail about ten (cast, four products, two sums, stack, cast, concatenation);
a layer runs five norms and five rotations, so together they were a third of its launches. The kernel does
one row per program: an optional norm (fp32 with an optional weight, or the per-head norm whose every op
rounds to bf16 like the official ``q *= rsqrt(mean(q^2)+eps)``), the result rounded to the row's dtype,
then an optional rotation of the last `rope_dim` channels, each interleaved pair (2i, 2i+1) in fp32. That
is the torch form's arithmetic in the same order; only the norm's sum of squares adds in another order, so
results agree to the last bit of the row's dtype, not bit for bit. Other devices use the torch form.
"""

from __future__ import annotations

import torch

from dsv4.layers.kernels import pdl_options, runs_triton, tl, triton, wait_for_previous_kernel

NORM_NONE, NORM_FP32, NORM_BF16 = 0, 1, 2

if triton is not None:

    @triton.jit
    def _bf16(v):
        """Round fp32 values to bf16 and back (what a bf16 torch op stores)."""
        return v.to(tl.bfloat16).to(tl.float32)

    @triton.jit
    def _norm_rope(x, weight, cos_sin, out, n, rows_per_cos, eps,
                   NORM: tl.constexpr, HAS_WEIGHT: tl.constexpr, ROPE: tl.constexpr, INVERSE: tl.constexpr,
                   BLOCK: tl.constexpr, PDL: tl.constexpr):
        wait_for_previous_kernel(PDL)
        row = tl.program_id(0)
        base = row.to(tl.int64) * n
        cols = tl.arange(0, BLOCK)
        ok = cols < n
        v = tl.load(x + base + cols, mask=ok, other=0.0).to(tl.float32)
        r = 1.0
        if NORM == 1:
            r = tl.math.rsqrt(tl.sum(v * v, axis=0) / n + eps)
        elif NORM == 2:
            r = _bf16(tl.math.rsqrt(_bf16(_bf16(tl.sum(_bf16(v * v), axis=0) / n) + eps)))
        y = v * r
        if NORM == 2:
            y = _bf16(y)
        if HAS_WEIGHT:
            y = y * tl.load(weight + cols, mask=ok, other=0.0).to(tl.float32)
        if ROPE == 0:
            tl.store(out + base + cols, y.to(out.dtype.element_ty), mask=ok)
        else:
            head = n - ROPE
            tl.store(out + base + cols, y.to(out.dtype.element_ty), mask=cols < head)
            # the tail again as pairs [ROPE/2, 2], normed and rounded exactly as above
            pair = tl.arange(0, ROPE // 2)
            offsets = head + pair[:, None] * 2 + tl.arange(0, 2)[None, :]
            t = tl.load(x + base + offsets).to(tl.float32) * r
            if NORM == 2:
                t = _bf16(t)
            if HAS_WEIGHT:
                t = t * tl.load(weight + offsets).to(tl.float32)
            t = t.to(out.dtype.element_ty).to(tl.float32)
            even, odd = tl.split(t)
            cs = cos_sin + (row // rows_per_cos) * ROPE
            cos = tl.load(cs + pair)
            sin = tl.load(cs + ROPE // 2 + pair)
            if INVERSE:
                sin = -sin
            rotated = tl.join(even * cos - odd * sin, even * sin + odd * cos)
            tl.store(out + base + offsets, rotated.to(out.dtype.element_ty))


def fused_norm_rope(x: torch.Tensor, norm: int, weight: torch.Tensor | None, eps: float,
                    rope_dim: int = 0, cos_sin: torch.Tensor | None = None, inverse: bool = False,
                    out: torch.Tensor | None = None):
    """The kernel's result for rows of `x`'s last dim (written to `out` when given: a contiguous tensor of x's
    shape and dtype), or None where the torch form must run."""
    if not runs_triton(x) or not x.is_contiguous() or x.numel() == 0:
        return None
    if out is not None and (out.shape != x.shape or out.dtype != x.dtype or not out.is_contiguous()):
        return None
    n = x.shape[-1]
    if weight is not None and (not weight.is_contiguous() or weight.numel() != n):
        return None
    rows = x.numel() // n
    rows_per_cos = 1
    if rope_dim:
        if (cos_sin is None or not cos_sin.is_contiguous() or cos_sin.dtype != torch.float32
                or rope_dim & (rope_dim - 1) or rope_dim > n or rows % cos_sin.shape[0]):
            return None
        rows_per_cos = rows // cos_sin.shape[0]
    if out is None:
        out = torch.empty_like(x)  # graphready: ignore[GR301] inside a capture the graph pool serves it
    _norm_rope[(rows,)](x, weight if weight is not None else x, cos_sin if rope_dim else x, out, n, rows_per_cos,
                        eps, NORM=norm, HAS_WEIGHT=weight is not None, ROPE=rope_dim, INVERSE=inverse,
                        BLOCK=triton.next_power_of_2(n), **pdl_options())
    return out
