"""RMSNorm and RoPE on a row, as one Triton kernel on CUDA.

At batch 1 every RMSNorm in torch ops is six kernels (cast, square, mean, add, rsqrt, multiply, cast back)
and every RoPE on a head's tail about ten (cast, four products, two sums, stack, cast, concatenation);
a layer runs five norms and five rotations, so together they were a third of its launches. The kernel does
one row per program: an optional norm (fp32 with an optional weight, or the per-head norm whose every op
rounds to bf16 like the official ``q *= rsqrt(mean(q^2)+eps)``), the result rounded to the row's dtype,
then an optional rotation of the last `rope_dim` channels, each interleaved pair (2i, 2i+1) in fp32, and an
optional e4m3 round trip of the other channels (the KV entries: one launch where a quantisation kernel followed;
bit-identical to it, the same code on the same rounded values). That
is the torch form's arithmetic in the same order; only the norm's sum of squares adds in another order, so
results agree to the last bit of the row's dtype, not bit for bit. Other devices use the torch form.
"""

from __future__ import annotations

import torch

from dsv4.layers.kernels import pdl_options, runs_triton, tl, triton, wait_for_previous_kernel

NORM_NONE, NORM_FP32, NORM_BF16 = 0, 1, 2

if triton is not None:
    from dsv4.layers.fp8_quant import fp8_round_trip

    @triton.jit
    def _bf16(v):
        """Round fp32 values to bf16 and back (what a bf16 torch op stores)."""
        return v.to(tl.bfloat16).to(tl.float32)

    @triton.jit
    def _fp8_blocks(y, BLOCK: tl.constexpr, QB: tl.constexpr, QMAX: tl.constexpr, FLOOR: tl.constexpr):
        """A row of BLOCK values through e4m3, one scale per QB of them (`fp8_quant`'s code), fp32."""
        return tl.reshape(fp8_round_trip(tl.reshape(y.to(tl.float32), (BLOCK // QB, QB)), QMAX, FLOOR), (BLOCK,))

    @triton.jit
    def store_for_gemm(y, cols, ok, out, out_q, out_f, at, base, QUANT_OUT: tl.constexpr, F32_OUT: tl.constexpr,
                       BLOCK: tl.constexpr, QMAX: tl.constexpr, FLOOR: tl.constexpr):
        """Store a normed row (`out` at `at`) and, as asked, its e4m3 round trip per QUANT_OUT channels (a GEMM
        input, `fp8_quant`'s code) and its stored values widened to fp32 (an fp32 GEMM's input), at `base`."""
        y = y.to(out.dtype.element_ty)
        tl.store(out + at + cols, y, mask=ok)
        if QUANT_OUT:
            q = _fp8_blocks(y, BLOCK, QUANT_OUT, QMAX, FLOOR)
            tl.store(out_q + base + cols, q.to(out_q.dtype.element_ty), mask=ok)
        if F32_OUT:
            tl.store(out_f + base + cols, y.to(tl.float32), mask=ok)

    @triton.jit
    def _norm_rope(x, weight, cos_sin, out, out_q, out_f, slots, n, rows_per_cos, eps, steps, s_batch, s_slot,
                   SCATTER: tl.constexpr, NORM: tl.constexpr, HAS_WEIGHT: tl.constexpr, ROPE: tl.constexpr,
                   INVERSE: tl.constexpr,
                   ROUND_INPUT: tl.constexpr, QUANT: tl.constexpr, QMAX: tl.constexpr, FLOOR: tl.constexpr,
                   QUANT_OUT: tl.constexpr, F32_OUT: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):
        wait_for_previous_kernel(PDL)
        row = tl.program_id(0)
        base = row.to(tl.int64) * n
        at = base  # where the row's result goes in `out`: with SCATTER, row (b, t) at out[b, slots[t]]
        if SCATTER:
            at = (row // steps).to(tl.int64) * s_batch + tl.load(slots + row % steps).to(tl.int64) * s_slot
        cols = tl.arange(0, BLOCK)
        ok = cols < n
        v = tl.load(x + base + cols, mask=ok, other=0.0).to(tl.float32)
        if ROUND_INPUT:  # an fp32 input taken as its bf16 rounding (the torch form's `.to(bfloat16)` first)
            v = _bf16(v)
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
            store_for_gemm(y, cols, ok, out, out_q, out_f, at, base, QUANT_OUT, F32_OUT, BLOCK, QMAX, FLOOR)
        else:
            head = n - ROPE
            y = y.to(out.dtype.element_ty)
            if QUANT:  # the head's e4m3 round trip per QUANT channels (`fp8_quant`'s code) on the stored values
                y = _fp8_blocks(y, BLOCK, QUANT, QMAX, FLOOR).to(out.dtype.element_ty)
            tl.store(out + at + cols, y, mask=cols < head)
            # the tail again as pairs [ROPE/2, 2], normed and rounded exactly as above
            pair = tl.arange(0, ROPE // 2)
            offsets = head + pair[:, None] * 2 + tl.arange(0, 2)[None, :]
            t = tl.load(x + base + offsets).to(tl.float32)
            if ROUND_INPUT:
                t = _bf16(t)
            t = t * r
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
            tl.store(out + at + offsets, rotated.to(out.dtype.element_ty))


def fused_norm_rope(x: torch.Tensor, norm: int, weight: torch.Tensor | None, eps: float,
                    rope_dim: int = 0, cos_sin: torch.Tensor | None = None, inverse: bool = False,
                    out: torch.Tensor | None = None, dtype: torch.dtype | None = None, quant_block: int = 0,
                    qmax: float = 0.0, floor: float = 0.0, quant_out: int = 0, fp32_out: bool = False,
                    scatter: tuple[torch.Tensor, torch.Tensor] | None = None):
    """The kernel's result for rows of `x`'s last dim (written to `out` when given: a contiguous tensor of x's
    shape), or None where the torch form must run. `dtype`: the result's (default x's; an fp32 x for a bf16
    result is rounded to bf16 first). `quant_block`: with RoPE, the channels before the rotated ones go through
    e4m3 per that many channels (`qmax`, `floor` as `fp8_quant`). Without RoPE, `quant_out` and `fp32_out` add
    outputs: (result, its e4m3 round trip per `quant_out` channels or None, the result in fp32 or None).
    `scatter` (dest [B, S, n], slots [T] int64), instead of `out`: x's rows are B x T (batch-major) and row (b, t)
    goes to dest[b, slots[t]] (what ``dest.index_copy_(1, slots, result.unflatten(0, (B, T)))`` does, without
    its launch: a cache write whose slot lives on the device); returns dest."""
    dtype = dtype or (out.dtype if out is not None else x.dtype)
    if scatter is not None:
        dest, slots = scatter
        dtype = dest.dtype
        if (out is not None or quant_out or fp32_out or dest.dim() != 3 or dest.stride(2) != 1
                or dest.shape[2] != x.shape[-1] or slots.dim() != 1 or not slots.is_contiguous()
                or slots.dtype != torch.int64 or dest.shape[0] * slots.numel() * x.shape[-1] != x.numel()):
            return None
    if not runs_triton(x) or not x.is_contiguous() or x.numel() == 0:
        return None
    if dtype != x.dtype and (x.dtype, dtype) != (torch.float32, torch.bfloat16):
        return None
    if out is not None and (out.shape != x.shape or out.dtype != dtype or not out.is_contiguous()):
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
    block = triton.next_power_of_2(n)
    if quant_block and (not rope_dim or (n - rope_dim) % quant_block or block % quant_block):
        return None
    if (quant_out or fp32_out) and (rope_dim or (quant_out and n % quant_out)):
        return None
    if scatter is not None:
        out = scatter[0]
    elif out is None:
        out = torch.empty(x.shape, dtype=dtype, device=x.device)  # graphready: ignore[GR301] the graph pool serves it
    out_q, out_f = [torch.empty(x.shape, dtype=t, device=x.device) if on else None  # graphready: ignore[GR301] pool
                    for t, on in ((dtype, quant_out), (torch.float32, fp32_out))]
    slots = scatter[1] if scatter is not None else x
    steps = slots.numel() if scatter is not None else 1
    _norm_rope[(rows,)](x, weight if weight is not None else x, cos_sin if rope_dim else x, out,
                        out if out_q is None else out_q, out if out_f is None else out_f, slots, n, rows_per_cos,
                        eps, steps, *(out.stride()[:2] if scatter is not None else (0, 0)),
                        SCATTER=scatter is not None, NORM=norm, HAS_WEIGHT=weight is not None, ROPE=rope_dim,
                        INVERSE=inverse, ROUND_INPUT=dtype != x.dtype, QUANT=quant_block, QMAX=qmax, FLOOR=floor,
                        QUANT_OUT=quant_out, F32_OUT=fp32_out, BLOCK=block, **pdl_options())
    return (out, out_q, out_f) if quant_out or fp32_out else out
