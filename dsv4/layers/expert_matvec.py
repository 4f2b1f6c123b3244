"""y[n] = W[ids[n]] @ x[n] for stacked expert weights, reading only the selected experts.

On CUDA with an NVFP4 weight, a Triton kernel decodes the packed e2m1 nibbles on the fly (one pass over the
FP4 bytes, no dequantized copy). At batch 1 the decode, not the memory, bounds such a kernel: a lookup or a
per-nibble select costs ~10 integer instructions per weight. Here the packed bytes are read as 32-bit words
and two nibbles (bits 0-3 and 16-19 after a shift) become two fp16 bit patterns at once: magnitude bits to
fp16 bits 9-11, sign to bit 15. That fp16 is the e2m1 value times 2^-14 (e2m1's subnormal code 1 lands on
fp16's subnormal 2^-15), so a nibble costs ~3 integer instructions and one conversion; the 2^14 joins the
global scale. Products and sums are fp32, block scales apply per 16 weights, the result rounds to bf16: the
fallback's math (`index_select(ids).dequantize()`, then a bf16 batched matmul) except that the weights are
never rounded to bf16, so results agree to bf16 precision, not bit for bit; on a GPU every path uses the kernel.

One launch serves gate and up (same input, same shape) and, where the shared expert is stored in NVFP4 too, its
rows: at batch 1 the shared expert's two cuBLAS GEMVs over bf16 copies, its quantisation and its SwiGLU were five
launches per layer reading 3.6x the bytes. The in-feature count is a compile-time constant (one per matrix shape),
which also lets Triton's interpreter run the loop.
"""

from __future__ import annotations

import torch

from dsv4.formats import NVFP4_BLOCK, NVFP4Weight
from dsv4.layers.kernels import INTERPRET, pdl_options, runs_triton, tl, triton, wait_for_previous_kernel

BLOCK_OUT = 32  # rows per program: on an H200, 4-6 % faster than 16 at three of the Flash and Pro shapes, 1 % slower at one
BLOCK_WORDS = 128  # 32-bit words per row per iteration = 1024 weights (swept on an H100: 2x the old kernel)
FP16_OFFSET = 16384.0  # 2^14: the e2m1 value of a nibble placed in fp16 bits 9-11 and 15, divided by this


def _decode_asm() -> str:
    """PTX for `_word_weights`: per pair two shifts, two LOP3 (ptxas merges the masks and the or) and two half ->
    float conversions that read the halves in place (Triton's own lowering repacked the halves first: a PRMT per
    pair)."""
    lines = ["{", ".reg .b32 m, s, h;", ".reg .b16 l, u;"]
    for j in range(4):
        shift = 9 - 4 * j  # magnitude bits 4j..4j+2 to 9..11, sign bit 4j+3 to 15 (and 16 bits up)
        lines += [f"shl.b32 m, $8, {shift};" if shift >= 0 else f"shr.b32 m, $8, {-shift};",
                  f"shl.b32 s, $8, {shift + 3};", "and.b32 m, m, 0x0E000E00;", "and.b32 s, s, 0x80008000;",
                  "or.b32 h, m, s;", "mov.b32 {l, u}, h;", f"cvt.f32.f16 ${2 * j}, l;", f"cvt.f32.f16 ${2 * j + 1}, u;"]
    return "\n".join(lines + ["}"])


if triton is not None:
    DECODE_ASM = tl.constexpr(_decode_asm())

    @triton.jit
    def _nibble_pairs(q, shift: tl.constexpr):
        """fp32 (value / 2^14) of the nibbles at bits shift..shift+3 and shift+16..shift+19 of each word."""
        v = q >> shift
        h = ((v << 9) & 0x0E000E00) | ((v << 12) & 0x80008000)
        lo = h.to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)
        hi = (h >> 16).to(tl.uint16).to(tl.float16, bitcast=True).to(tl.float32)
        return lo, hi

    @triton.jit
    def _word_weights(q, ASM: tl.constexpr):
        """The eight weights of each word as fp32 (value / 2^14), in the order weight 8w+j, 8w+4+j for j = 0..3."""
        if ASM:
            return tl.inline_asm_elementwise(DECODE_ASM, "=r,=r,=r,=r,=r,=r,=r,=r,r", [q], dtype=(tl.float32,) * 8,
                                             is_pure=True, pack=1)
        else:
            lo0, hi0 = _nibble_pairs(q, 0)
            lo1, hi1 = _nibble_pairs(q, 4)
            lo2, hi2 = _nibble_pairs(q, 8)
            lo3, hi3 = _nibble_pairs(q, 12)
            return lo0, hi0, lo1, hi1, lo2, hi2, lo3, hi3

    @triton.jit
    def _nvfp4_matvec(words, scale, global_scale, words2, scale2, global_scale2,
                      s_words, s_scale, s_global_scale, s_words2, s_scale2, s_global_scale2,
                      ids, x, out, out2, n_out, n_routed, repeat, shared_x0,
                      sw_e, sw_o, ss_e, ss_o, sx_n, so_n, N_WORDS: tl.constexpr,
                      BLOCK_O: tl.constexpr, BLOCK_W: tl.constexpr, OFFSET: tl.constexpr, ASM: tl.constexpr,
                      PDL: tl.constexpr):
        wait_for_previous_kernel(PDL)
        slot = tl.program_id(1)
        second = tl.program_id(2) == 1  # the second matrix of the pair (up next to gate)
        routed = slot < n_routed
        expert = tl.load(ids + slot, mask=routed, other=0)
        # a routed row reads its expert of the stack and x row slot // repeat; a shared row the shared matrix and
        # x row shared_x0 + (slot - n_routed)
        w_rows = tl.where(routed, tl.where(second, words2, words) + expert * sw_e, tl.where(second, s_words2, s_words))
        s_rows = tl.where(routed, tl.where(second, scale2, scale) + expert * ss_e, tl.where(second, s_scale2, s_scale))
        g = tl.where(routed, tl.where(second, global_scale2, global_scale) + expert,
                     tl.where(second, s_global_scale2, s_global_scale))
        x_row = tl.where(routed, slot // repeat, shared_x0 + slot - n_routed)
        rows = tl.program_id(0) * BLOCK_O + tl.arange(0, BLOCK_O)
        row_ok = rows < n_out
        acc = tl.zeros([BLOCK_O, BLOCK_W // 2], dtype=tl.float32)
        for start in range(0, N_WORDS, BLOCK_W):
            cols = start + tl.arange(0, BLOCK_W)
            col_ok = cols < N_WORDS
            q = tl.load(w_rows + rows[:, None] * sw_o + cols[None, :],
                        mask=row_ok[:, None] & col_ok[None, :], other=0).to(tl.uint32, bitcast=True)
            # word w holds weights 8w..8w+7 (low nibble first); a pair at shift 4j is weights 8w+j and 8w+4+j
            xw = x + x_row * sx_n + 8 * cols
            weights = _word_weights(q, ASM)
            part = tl.zeros([BLOCK_O, BLOCK_W], dtype=tl.float32)
            for j in tl.static_range(4):  # one multiply-add per weight: the products and sums are fp32
                part += weights[2 * j] * tl.load(xw + j, mask=col_ok, other=0.0).to(tl.float32)[None, :]
                part += weights[2 * j + 1] * tl.load(xw + 4 + j, mask=col_ok, other=0.0).to(tl.float32)[None, :]
            # two words = one 16-weight scale block: sum inside blocks, then apply the block scales
            partial = tl.sum(tl.reshape(part, (BLOCK_O, BLOCK_W // 2, 2)), axis=2)
            blocks = start // 2 + tl.arange(0, BLOCK_W // 2)
            s = tl.load(s_rows + rows[:, None] * ss_o + blocks[None, :],
                        mask=row_ok[:, None] & (blocks[None, :] < N_WORDS // 2), other=0.0).to(tl.float32)
            acc += partial * s
        y = tl.sum(acc, axis=1) * (tl.load(g) * OFFSET)
        tl.store(tl.where(second, out2, out) + slot * so_n + rows, y.to(tl.bfloat16), mask=row_ok)


def _kernel_ready(weight) -> bool:
    return isinstance(weight, NVFP4Weight) and NVFP4_BLOCK == 16 and weight.packed.stride(-1) == 1


def fused_available(weight, x: torch.Tensor, shared=None) -> bool:
    """Whether the kernel runs: NVFP4 weights on a Triton device; `shared` (2-D, the stack's matrix shape, the
    same row strides) may join the launch."""
    if not (runs_triton(x) and _kernel_ready(weight)):
        return False
    if shared is None:
        return True
    return (_kernel_ready(shared) and shared.packed.dim() == 2 and shared.shape == weight.shape[1:]
            and shared.packed.stride(0) == weight.packed.stride(1) and shared.scale.stride(0) == weight.scale.stride(1))


def expert_matvecs(weights: list, ids: torch.Tensor, x: torch.Tensor, outs: list[torch.Tensor],
                   shared: list | None = None) -> list[torch.Tensor]:
    """One launch for one or two stacked expert matrices of one shape (gate and up read the same input), and
    optionally the shared expert's matching matrices as extra rows.

    `ids` [N] picks the routed rows' experts. `outs[i]` [N + S, out] bf16 gets the routed rows, then the S
    shared rows (S = 0 without `shared`). `x` has either one row per output row, or one row per token: each
    serves its N / tokens consecutive routed rows and its shared row (S = tokens). Returns `outs`.
    """
    n_routed = ids.numel()
    n_shared = outs[0].shape[0] - n_routed if shared else 0
    per_row = x.shape[0] == n_routed + n_shared
    repeat, shared_x0 = (1, n_routed) if per_row else (n_routed // x.shape[0], 0)
    if not all(fused_available(w, x, s) for w, s in zip(weights, shared or [None] * len(weights))):
        for i, (weight, out) in enumerate(zip(weights, outs)):
            xs = x[:n_routed] if per_row else x.repeat_interleave(repeat, dim=0)
            w = weight.index_select(ids).dequantize(dtype=torch.bfloat16)
            out[:n_routed].copy_(torch.bmm(w, xs.unsqueeze(-1)).squeeze(-1))
            if n_shared:
                out[n_routed:].copy_(x[shared_x0:] @ shared[i].dequantize(dtype=torch.bfloat16).T)
        return outs
    sh = shared or weights  # without shared rows the routed matrices stand in (no row reads them)
    w1, w2 = _pair([w.packed.view(torch.int32) for w in weights])  # in-features are a multiple of 16: 8 bytes
    s1, s2 = _pair([w.scale for w in weights])
    g1, g2 = _pair([w.global_scale for w in weights])
    sw1, sw2 = _pair([w.packed.view(torch.int32) for w in sh])
    ss1, ss2 = _pair([w.scale for w in sh])
    sg1, sg2 = _pair([w.global_scale for w in sh])
    o1, o2 = _pair(list(outs))
    n_out, n_words = w1.shape[-2], w1.shape[-1]
    grid = (triton.cdiv(n_out, BLOCK_OUT), n_routed + n_shared, len(weights))
    # Triton launches on the current device's current stream: callers make x.device current
    _nvfp4_matvec[grid](w1, s1, g1, w2, s2, g2, sw1, ss1, sg1, sw2, ss2, sg2, ids, x, o1, o2, n_out,
                        n_routed, repeat, shared_x0, w1.stride(0), w1.stride(1), s1.stride(0),
                        s1.stride(1), x.stride(0), o1.stride(0), N_WORDS=n_words, BLOCK_O=BLOCK_OUT,
                        BLOCK_W=BLOCK_WORDS, OFFSET=FP16_OFFSET, ASM=not INTERPRET, **pdl_options())
    return outs


def _pair(parts: list) -> list:
    """The kernel's two matrix slots: a single matrix fills both (the grid runs only the first)."""
    return parts * 2 if len(parts) == 1 else parts
