"""Sparse attention with sink over cache slots, as two Triton kernels on CUDA.

In torch ops one token's attention is ~20 kernels per layer: gathering the keys (an index_select for the
window, a gather for the indexer's picks, two concatenations), the fp32 casts, the score product, the mask,
the block loop of the online softmax and the divide. Here one kernel writes the scores (tiles of heads x keys)
and one the output (tiles of heads x head dims), so that enough SMs share the work at batch 1; both read the
keys straight from the cache through the slot list. The second follows `Attention.attend` (the official
kernel's online softmax over blocks of `KEY_BLOCK` keys): per block the running max, the rescale
exp(old - new) of the denominator and of the accumulator, the block's exponentials (libdevice `expf`, as
torch) summed in fp64 and rounded once, their bf16 copies times the keys; the sink joins the denominator at
the end, then a correctly rounded divide. The denominator's rescale and add round separately, as torch's two
ops. Only the products add in another order (tensor-core tiles accumulating into the rescaled output, where
the torch form adds a separate block product): a score that moves by an fp32 rounding can flip the bf16
rounding of its probability, so outputs agree with the torch form to within a few units in the last place of
bf16, not bit for bit. Where the head's RoPE channels are exactly the sums kernel's last tile of head dims (Flash,
Pro: 64 of 512), that tile also rotates them back (the inverse RoPE after attention), bit for bit as the RoPE
kernel would. Other devices use the torch form.
"""

from __future__ import annotations

import torch

from dsv4.layers.kernels import libdevice, pdl_options, runs_triton, tl, triton, wait_for_previous_kernel

BLOCK_H = 16  # heads per program: the smallest tensor-core tile
BLOCK_S = 32  # keys per program of the score kernel
KEY_BLOCK = 64  # keys per step of the online softmax, as the official kernel's blocks
BLOCK_D = 64  # head dims per program of the sums kernel

if triton is not None:

    @triton.jit
    def _sink_scores(q_ptr, cache, slots, valid, scores, heads, n_keys, cache_len, tokens, token_stride,
                     slots_stride, scale, HD: tl.constexpr, HD_PAD: tl.constexpr, BLOCK_H: tl.constexpr,
                     BLOCK_S: tl.constexpr, PDL: tl.constexpr):
        """fp32 scores [rows, H, S] of one tile of heads x keys; masked keys at -inf."""
        wait_for_previous_kernel(PDL)
        r = tl.program_id(0)  # the query row: sequence b's token t
        b, t = r // tokens, r % tokens
        key_list = t * token_stride + b * slots_stride
        h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
        keys = tl.program_id(2) * BLOCK_S + tl.arange(0, BLOCK_S)
        dims = tl.arange(0, HD_PAD)
        h_ok, present, d_ok = h < heads, keys < n_keys, dims < HD
        q = tl.load(q_ptr + (r.to(tl.int64) * heads + h)[:, None] * HD + dims[None, :],
                    mask=h_ok[:, None] & d_ok[None, :], other=0.0)
        slot = tl.load(slots + key_list + keys, mask=present, other=0)
        ok = tl.load(valid + key_list + keys, mask=present, other=0) != 0
        k = tl.load(cache + (b.to(tl.int64) * cache_len + slot)[:, None] * HD + dims[None, :],
                    mask=present[:, None] & d_ok[None, :], other=0.0)
        s = tl.where(ok[None, :], tl.dot(q, tl.trans(k)) * scale, float("-inf"))
        tl.store(scores + (r.to(tl.int64) * heads + h)[:, None] * n_keys + keys[None, :], s,
                 mask=h_ok[:, None] & present[None, :])

    @triton.jit
    def _sink_sums(scores, cache, slots, sink, out, cos_sin, heads, n_keys, cache_len, tokens, token_stride,
                   slots_stride, rows_per_cos, HD: tl.constexpr, BLOCK_H: tl.constexpr, KEY_BLOCK: tl.constexpr,
                   BLOCK_D: tl.constexpr, ROPE: tl.constexpr, PDL: tl.constexpr):
        """o for one tile of heads x head dims: the online softmax over the keys in blocks of KEY_BLOCK. With ROPE
        (= BLOCK_D), the last tile's channels are rotated back (inverse RoPE) after the bf16 rounding, as
        `rope_tail(o, ROPE, cos_sin, inverse=True)` does in its own kernel."""
        wait_for_previous_kernel(PDL)
        r = tl.program_id(0)
        b, t = r // tokens, r % tokens
        key_list = t * token_stride + b * slots_stride
        h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
        dims = tl.program_id(2) * BLOCK_D + tl.arange(0, BLOCK_D)
        h_ok, d_ok = h < heads, dims < HD
        rows = scores + (r.to(tl.int64) * heads + h)[:, None] * n_keys
        top = tl.full([BLOCK_H], float("-inf"), tl.float32)
        total = tl.zeros([BLOCK_H], tl.float32)
        acc = tl.zeros([BLOCK_H, BLOCK_D], tl.float32)
        for start in range(0, n_keys, KEY_BLOCK):
            keys = start + tl.arange(0, KEY_BLOCK)
            present = keys < n_keys
            s = tl.load(rows + keys[None, :], mask=h_ok[:, None] & present[None, :], other=float("-inf"))
            new_top = tl.maximum(top, tl.max(s, axis=1))
            rescale = libdevice.exp(top - new_top)  # expf, as torch's CUDA exp (tl.exp is an approximation)
            e = libdevice.exp(s - new_top[:, None])
            block_sum = tl.sum(e.to(tl.float64), axis=1).to(tl.float32)  # as the torch form's fp64 sum
            total = libdevice.add_rn(libdevice.mul_rn(total, rescale), block_sum)
            slot = tl.load(slots + key_list + keys, mask=present, other=0)
            k = tl.load(cache + (b.to(tl.int64) * cache_len + slot)[:, None] * HD + dims[None, :],
                        mask=present[:, None] & d_ok[None, :], other=0.0)
            acc = tl.dot(e.to(tl.bfloat16), k, acc * rescale[:, None])
            top = new_top
        total = libdevice.add_rn(total, libdevice.exp(tl.load(sink + h, mask=h_ok, other=0.0) - top))
        o = tl.math.div_rn(acc, total[:, None]).to(tl.bfloat16)
        if ROPE:
            if tl.program_id(2) == HD // BLOCK_D - 1:
                even, odd = tl.split(tl.reshape(o.to(tl.float32), (BLOCK_H, BLOCK_D // 2, 2)))
                pair = tl.arange(0, BLOCK_D // 2)
                cs = cos_sin + (r // rows_per_cos) * BLOCK_D
                cos = tl.load(cs + pair)[None, :]
                sin = -tl.load(cs + BLOCK_D // 2 + pair)[None, :]
                rotated = tl.join(even * cos - odd * sin, even * sin + odd * cos)
                o = tl.reshape(rotated, (BLOCK_H, BLOCK_D)).to(tl.bfloat16)
        tl.store(out + (r.to(tl.int64) * heads + h)[:, None] * HD + dims[None, :], o,
                 mask=h_ok[:, None] & d_ok[None, :])


def rope_in_attention(q: torch.Tensor, rope_dim: int, cos_sin: torch.Tensor) -> bool:
    """Whether `fused_sink_attention` can rotate the output's last `rope_dim` channels back itself: they must be
    exactly the sums kernel's last tile of head dims, and `cos_sin` [C, 2, rope_dim / 2] fp32 rows one per
    q.shape[0] / C query rows."""
    return (runs_triton(q) and rope_dim == BLOCK_D and q.shape[-1] % BLOCK_D == 0 and cos_sin.dtype == torch.float32
            and cos_sin.is_contiguous() and cos_sin.numel() == cos_sin.shape[0] * rope_dim
            and q.shape[0] % cos_sin.shape[0] == 0)


def fused_sink_attention(q: torch.Tensor, cache: torch.Tensor, slots: torch.Tensor, valid: torch.Tensor,
                         sink: torch.Tensor, scale: float, out: torch.Tensor | None = None,
                         inverse_rope: torch.Tensor | None = None) -> torch.Tensor | None:
    """o [rows,H,hd] bf16 for queries q [rows,H,hd] over the cache rows `slots` of `cache` [B,L,hd] where `valid`,
    written to `out` when given (contiguous, q's shape), or None where the torch form must run. `inverse_rope`: the
    cos_sin rows to rotate o's RoPE channels back with, where `rope_in_attention` said the kernel can.

    One token per sequence: q [B,H,hd], `slots` and `valid` [B or 1, S]. T tokens (a speculative step): q rows in
    (sequence, token) order, `slots` and `valid` [T, B or 1, S], token t's list in row t: one launch for all.
    The first slot of every list is valid."""
    if not runs_triton(q) or (out is not None and (out.shape != q.shape or out.dtype != q.dtype
                                                   or not out.is_contiguous())):
        return None
    if slots.dim() == 2:
        slots, valid = slots.unsqueeze(0), valid.unsqueeze(0)
    rows, heads, head_dim = q.shape
    tokens, batch = slots.shape[0], cache.shape[0]
    if (q.dtype != torch.bfloat16 or cache.dtype != torch.bfloat16 or not q.is_contiguous()
            or not cache.is_contiguous() or rows != batch * tokens or cache.shape[2] != head_dim
            or sink.dtype != torch.float32 or not sink.is_contiguous()):
        return None
    if slots.shape != valid.shape or slots.dim() != 3 or slots.shape[1] not in (1, batch):
        return None
    if inverse_rope is not None and not rope_in_attention(q, BLOCK_D, inverse_rope):
        raise ValueError("fused_sink_attention: inverse_rope given where rope_in_attention is False")
    slots, valid = slots.contiguous(), valid.contiguous().view(torch.uint8)  # views and no-ops on the decode path
    n_keys, hd_pad = slots.shape[2], triton.next_power_of_2(head_dim)
    token_stride, stride = slots.shape[1] * n_keys, 0 if slots.shape[1] == 1 else n_keys
    scores = q.new_empty((rows, heads, n_keys), dtype=torch.float32)  # graphready: ignore[GR301] graph pool
    if out is None:
        out = torch.empty_like(q)  # graphready: ignore[GR301] inside a capture the graph pool serves it
    head_tiles = triton.cdiv(heads, BLOCK_H)
    _sink_scores[(rows, head_tiles, triton.cdiv(n_keys, BLOCK_S))](
        q, cache, slots, valid, scores, heads, n_keys, cache.shape[1], tokens, token_stride, stride, scale,
        HD=head_dim, HD_PAD=hd_pad, BLOCK_H=BLOCK_H, BLOCK_S=BLOCK_S, num_warps=4, **pdl_options())
    rope = inverse_rope is not None
    _sink_sums[(rows, head_tiles, triton.cdiv(head_dim, BLOCK_D))](
        scores, cache, slots, sink, out, inverse_rope if rope else sink, heads, n_keys, cache.shape[1], tokens,
        token_stride, stride, rows // inverse_rope.shape[0] if rope else 1, HD=head_dim, BLOCK_H=BLOCK_H,
        KEY_BLOCK=KEY_BLOCK, BLOCK_D=BLOCK_D, ROPE=BLOCK_D if rope else 0, num_warps=4, **pdl_options())
    return out
