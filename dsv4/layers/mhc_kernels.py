"""mHC's pre and post mixing as four Triton kernels on CUDA (about 30 in torch ops).

`pre` reads the four residual streams twice: once for the mixing GEMV (24 outputs over hc*D inputs, fp32
weights, plus the sum of squares of the same inputs for the RMS factor), once for the weighted sum that
feeds the block. At batch 1 cuBLAS runs that skinny fp32 GEMV at a third of the memory bandwidth, and the
rest (norm factor, sigmoids, softmax, Sinkhorn, weighted sum) is two dozen tiny kernels. Here:

* `_mix_partials`: split-K GEMV, each program one slice of the inputs, writing its partial dot products
  and sum of squares (no atomics: the result does not depend on scheduling, so replay equals eager);
* `_pre_tail`: every program sums the partials in a fixed order, applies the RMS factor and the gates, and
  writes its slice of the block input; or, with the block's RMSNorm (`BlockNorm`), one program per row
  writes the normed row and its GEMM inputs (`store_for_gemm`), where a norm kernel followed;
* `_comb`: the combine matrix (softmax, then Sinkhorn with the tile code of `sinkhorn.py`). Its 20 dependent
  iterations take ~16 us on one SM whatever the launch shape, so it runs on a side stream while the block's
  GEMVs run, and only `post` waits for it;
* `_post`: ``X'_k = post_k * y + sum_j comb[j,k] X_j`` in fp32, the streams mixed first (official order); after
  the MoE, y is the experts' outputs, combined in the kernel as the combine kernel does (`combined_row`).

The arithmetic is the torch form's in fp32; sums run in another order, so results agree to fp32 rounding
before the final bf16 cast, not bit for bit. Other devices, and hc other than 4, use the torch form.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dsv4.layers.kernels import pdl_options, runs_triton, tl, triton, wait_for_previous_kernel
from dsv4.layers.routing import ACCUMULATORS, ExpertOutputs

if triton is not None:
    from dsv4.layers.norm_rope import store_for_gemm
    from dsv4.layers.routing import combined_row
    from dsv4.layers.sinkhorn import sinkhorn_tile

    @triton.jit
    def _mix_partials(streams, fn, dots, squares, k_total, n_mix, n_splits,
                      NPAD: tl.constexpr, CHUNK: tl.constexpr, BLOCK_K: tl.constexpr, PDL: tl.constexpr):
        wait_for_previous_kernel(PDL)
        b = tl.program_id(0)
        split = tl.program_id(1)
        outs = tl.arange(0, NPAD)
        out_ok = outs < n_mix
        acc = tl.zeros([NPAD], dtype=tl.float32)
        sq = tl.zeros([BLOCK_K], dtype=tl.float32)
        for start in range(0, CHUNK, BLOCK_K):
            k = split * CHUNK + start + tl.arange(0, BLOCK_K)
            k_ok = k < k_total
            v = tl.load(streams + b * k_total + k, mask=k_ok, other=0.0).to(tl.float32)
            w = tl.load(fn + outs[:, None] * k_total + k[None, :], mask=out_ok[:, None] & k_ok[None, :], other=0.0)
            acc += tl.sum(w * v[None, :], axis=1)
            sq += v * v
        row = b * n_splits + split
        tl.store(dots + row * NPAD + outs, acc)
        tl.store(squares + row, tl.sum(sq, axis=0))

    @triton.jit
    def _mixed(dots, rows, split_ok, offsets):
        """Sum over the splits (`rows`: their offsets [BLOCK_S]) of the partial dot products at `offsets` [HC]."""
        return tl.sum(tl.load(dots + rows[:, None] + offsets[None, :], mask=split_ok[:, None], other=0.0), axis=0)

    @triton.jit
    def _split_rows(squares, b, n_splits, d, norm_eps, HC: tl.constexpr, NPAD: tl.constexpr,
                    BLOCK_S: tl.constexpr):
        """The partials' row offsets of token b, which splits exist, and the RMS factor of its streams."""
        splits = tl.arange(0, BLOCK_S)
        split_ok = splits < n_splits
        sq = tl.sum(tl.load(squares + b * n_splits + splits, mask=split_ok, other=0.0), axis=0)
        return (b * n_splits + splits) * NPAD, split_ok, tl.math.rsqrt(sq / (HC * d) + norm_eps)

    @triton.jit
    def _pre_tail(streams, dots, squares, scale, base, x_out, post_out, weight, out_q, out_f, n_splits, d, hc_eps,
                  norm_eps, block_eps, HC: tl.constexpr, HEAD: tl.constexpr, NPAD: tl.constexpr, BLOCK_S: tl.constexpr,
                  BLOCK_D: tl.constexpr, NORM: tl.constexpr, QUANT_OUT: tl.constexpr, F32_OUT: tl.constexpr,
                  QMAX: tl.constexpr, FLOOR: tl.constexpr, PDL: tl.constexpr):
        """Block input x = sum_i pre_i X_i for a slice of columns; with NORM (one program per row, BLOCK_D >= d)
        x rounded as stored, then the block's RMSNorm with `weight` and `store_for_gemm`'s outputs instead."""
        wait_for_previous_kernel(PDL)
        b = tl.program_id(0)
        rows, split_ok, r = _split_rows(squares, b, n_splits, d, norm_eps, HC, NPAD, BLOCK_S)
        lanes = tl.arange(0, HC)
        pre = tl.sigmoid(_mixed(dots, rows, split_ok, lanes) * r * tl.load(scale)
                         + tl.load(base + lanes)) + hc_eps
        if not HEAD:
            if tl.program_id(1) == 0:
                post = 2 * tl.sigmoid(_mixed(dots, rows, split_ok, HC + lanes) * r * tl.load(scale + 1)
                                      + tl.load(base + HC + lanes))
                tl.store(post_out + b * HC + lanes, post)
        cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
        ok = cols < d
        s = tl.load(streams + b * HC * d + lanes[:, None] * d + cols[None, :], mask=ok[None, :], other=0.0)
        x = tl.sum(pre[:, None] * s.to(tl.float32), axis=0).to(x_out.dtype.element_ty)
        if NORM:
            v = x.to(tl.float32)
            r = tl.math.rsqrt(tl.sum(v * v, axis=0) / d + block_eps)
            y = v * r * tl.load(weight + cols, mask=ok, other=0.0).to(tl.float32)
            store_for_gemm(y, cols, ok, x_out, out_q, out_f, b * d, b * d, QUANT_OUT, F32_OUT, BLOCK_D, QMAX, FLOOR)
        else:
            tl.store(x_out + b * d + cols, x, mask=ok)

    @triton.jit
    def _comb(dots, squares, scale, base, comb_out, n_splits, d, iters, hc_eps, norm_eps,
              HC: tl.constexpr, NPAD: tl.constexpr, BLOCK_S: tl.constexpr, PDL: tl.constexpr):
        """The combine matrix: softmax of the mixed logits, then Sinkhorn (latency-bound: one program)."""
        wait_for_previous_kernel(PDL)
        b = tl.program_id(0)
        rows, split_ok, r = _split_rows(squares, b, n_splits, d, norm_eps, HC, NPAD, BLOCK_S)
        lanes = tl.arange(0, HC)
        tile = lanes[:, None] * HC + lanes[None, :]
        parts = tl.load(dots + rows[:, None, None] + 2 * HC + tile[None, :, :], mask=split_ok[:, None, None],
                        other=0.0)
        logits = tl.sum(parts, axis=0) * r * tl.load(scale + 2) + tl.load(base + 2 * HC + tile)
        e = tl.exp(logits - tl.max(logits, axis=1)[:, None])
        soft = e / tl.sum(e, axis=1)[:, None] + hc_eps
        tl.store(comb_out + b * HC * HC + tile, sinkhorn_tile(soft, iters, hc_eps, HC))

    @triton.jit
    def _post(y, streams, post, comb, out, shared, d, HC: tl.constexpr, BLOCK_D: tl.constexpr, K: tl.constexpr,
              HAS_SHARED: tl.constexpr, ACC: tl.constexpr, PDL: tl.constexpr):
        """With K > 0, y is the experts' outputs [B*K, D] (and `shared`'s), combined here as `_combine` does."""
        wait_for_previous_kernel(PDL)
        b = tl.program_id(0)
        lanes = tl.arange(0, HC)
        cols = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
        ok = cols < d
        s = tl.load(streams + b * HC * d + lanes[:, None] * d + cols[None, :], mask=ok[None, :], other=0.0)
        c = tl.load(comb + b * HC * HC + lanes[:, None] * HC + lanes[None, :])  # [j, k]
        mixed = tl.sum(c[:, :, None] * s.to(tl.float32)[:, None, :], axis=0)  # [k, D]: sum over j
        if K:
            yv = combined_row(y, shared, b, cols, ok, d, K, HAS_SHARED, ACC).to(tl.bfloat16).to(tl.float32)
        else:
            yv = tl.load(y + b * d + cols, mask=ok, other=0.0).to(tl.float32)
        p = tl.load(post + b * HC + lanes)
        result = p[:, None] * yv[None, :] + mixed
        tl.store(out + b * HC * d + lanes[:, None] * d + cols[None, :], result.to(out.dtype.element_ty),
                 mask=ok[None, :])

# Swept on an H200 (mix partials + pre tail with the block norm, graph-timed): 128 inputs per split of the mixing
# GEMV (Flash 128 programs per token, Pro 224) and 16 warps for the one program per row that also runs the norm:
# Flash 6.28 -> 5.19 us, Pro 7.69 -> 6.95 us a call against 512 inputs and 8 warps
CHUNK = 128
BLOCK_K = 128
BLOCK_D = 1024
NORM_WARPS = 16
POST_BLOCK_D = 128  # post is a copy-like pass over 4 x D: at 1024 columns per program Flash ran it on 4 SMs (~10 us)


@dataclass(frozen=True)
class BlockNorm:
    """The RMSNorm that follows mHC pre (weight, eps), with `rms_norm_for_gemm`'s outputs: the e4m3 round trip per
    `quant_block` channels (`qmax`, `floor` as `fp8_quant`) and, with `fp32`, the normed values in fp32."""

    weight: torch.Tensor
    eps: float
    quant_block: int
    qmax: float
    floor: float
    fp32: bool


def _usable(streams: torch.Tensor, *tensors: torch.Tensor) -> bool:
    return (runs_triton(streams) and streams.dim() == 3 and streams.shape[1] == 4
            and streams.numel() > 0 and all(t.is_contiguous() for t in (streams, *tensors)))


def fused_pre(streams: torch.Tensor, fn: torch.Tensor, scale: torch.Tensor, base: torch.Tensor, iters: int,
              hc_eps: float, norm_eps: float, head: bool = False, side: torch.cuda.Stream | None = None,
              post_out: torch.Tensor | None = None, comb_out: torch.Tensor | None = None,
              block_norm: BlockNorm | None = None):
    """mHC pre on CUDA, or None where the torch form must run. With `head` (hc_head): the collapsed streams
    [B,D]. Otherwise (block input [B,D], post [B,hc], comb [B,hc,hc], comb's inputs): with a `side` stream the
    combine matrix is computed there, overlapping the block, and the caller must keep comb's inputs alive and
    make its stream wait for `side` before it reads comb. `post_out`, `comb_out`: contiguous fp32 buffers the
    kernels write post and comb to (else new ones). `block_norm`: the block's RMSNorm runs in the last kernel
    too, and the block input is `rms_norm_for_gemm`'s (normed, act_quant, fp32 copy or None) of it."""
    if not _usable(streams, fn, scale, base) or fn.dtype != torch.float32:
        return None
    if any(t is not None and (t.dtype != torch.float32 or not t.is_contiguous()) for t in (post_out, comb_out)):
        return None
    batch, hc, d = streams.shape
    if block_norm is not None and (head or not block_norm.weight.is_contiguous() or block_norm.weight.numel() != d
                                   or d % block_norm.quant_block):
        return None
    n_mix, k_total = fn.shape
    splits = triton.cdiv(k_total, CHUNK)
    npad = triton.next_power_of_2(n_mix)
    block_s = triton.next_power_of_2(splits)
    # inside a capture the graph pool serves these buffers, at the same address each replay
    dots = torch.empty(batch, splits, npad, dtype=torch.float32, device=streams.device)  # graphready: ignore[GR301]
    squares = torch.empty(batch, splits, dtype=torch.float32, device=streams.device)  # graphready: ignore[GR301]
    _mix_partials[(batch, splits)](streams, fn, dots, squares, k_total, n_mix, splits,
                                   NPAD=npad, CHUNK=CHUNK, BLOCK_K=BLOCK_K, **pdl_options())
    x = torch.empty(batch, d, dtype=streams.dtype, device=streams.device)  # graphready: ignore[GR301]
    post = x
    if not head:
        post = post_out if post_out is not None else \
            torch.empty(batch, hc, dtype=torch.float32, device=streams.device)  # graphready: ignore[GR301]
        comb = comb_out if comb_out is not None else \
            torch.empty(batch, hc, hc, dtype=torch.float32, device=streams.device)  # graphready: ignore[GR301]
        if side is not None:
            side.wait_stream(torch.cuda.current_stream(streams.device))
        with torch.cuda.stream(side):  # None: the current stream
            _comb[(batch,)](dots, squares, scale, base, comb, splits, d, iters, hc_eps, norm_eps,
                            HC=hc, NPAD=npad, BLOCK_S=block_s, num_warps=1, **pdl_options())
    norm = block_norm is not None
    wide = norm and block_norm.fp32
    out_q = torch.empty_like(x) if norm else x  # graphready: ignore[GR301] the graph pool serves it
    out_f = torch.empty(batch, d, dtype=torch.float32, device=x.device) if wide else x  # graphready: ignore[GR301]
    block_d = triton.next_power_of_2(d) if norm else BLOCK_D
    _pre_tail[(batch, triton.cdiv(d, block_d))](
        streams, dots, squares, scale, base, x, post, block_norm.weight if norm else x, out_q, out_f, splits, d,
        hc_eps, norm_eps, block_norm.eps if norm else 0.0, HC=hc, HEAD=head, NPAD=npad, BLOCK_S=block_s,
        BLOCK_D=block_d, NORM=norm, QUANT_OUT=block_norm.quant_block if norm else 0,
        F32_OUT=wide, QMAX=block_norm.qmax if norm else 0.0,
        FLOOR=block_norm.floor if norm else 0.0, num_warps=NORM_WARPS if norm else 4, **pdl_options())
    if norm:
        x = (x, out_q, out_f if wide else None)
    return x if head else (x, post, comb, (dots, squares))


def fused_post(y: torch.Tensor | ExpertOutputs, streams: torch.Tensor, post: torch.Tensor, comb: torch.Tensor,
               out: torch.Tensor | None = None):
    """mHC post ([B,hc,D] in the streams' dtype, into `out` when given: a contiguous tensor like `streams`, which
    may be `streams` itself, since a program reads its columns before it writes them), or None where the torch
    form must run. `y`: the block output, or the MoE's expert outputs, which the kernel combines itself where
    `combine_kernel_reads` (one launch fewer than combining first)."""
    experts = y if isinstance(y, ExpertOutputs) else None
    if experts is not None:
        if not experts.combine_kernel_reads():
            return None
        y = experts.routed
    if not _usable(streams, y, post, comb) or post.dtype != torch.float32 or comb.dtype != torch.float32:
        return None
    if out is not None and (out.shape != streams.shape or out.dtype != streams.dtype or not out.is_contiguous()):
        return None
    batch, hc, d = streams.shape
    if out is None:
        out = torch.empty_like(streams)  # graphready: ignore[GR301] inside a capture the graph pool serves it
    k = experts.k if experts is not None else 0
    shared = experts.shared[0] if experts is not None and experts.shared else y
    _post[(batch, triton.cdiv(d, POST_BLOCK_D))](y, streams, post, comb, out, shared, d, HC=hc, BLOCK_D=POST_BLOCK_D,
                                                 K=k, HAS_SHARED=experts is not None and bool(experts.shared),
                                                 ACC=min(ACCUMULATORS, k), **pdl_options())
    return out
