"""Numerics shared by every layer: RMSNorm, interleaved RoPE with YaRN, FP8/FP4 fake-quant, Hadamard.

Everything here is allocation-free apart from op intermediates, so it can run inside a CUDA graph.
Constant tables (RoPE, FP4 grid) are built once by the `make_*` functions at model init. The rules follow
the official DeepSeek-V4 inference code (see docs/dsv4-numerics.md).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from dsv4.layers.fp8_quant import fused_fp8_fake_quant
from dsv4.layers.fp32_matvec import fp32_matvec
from dsv4.layers.hadamard_fp4 import fused_hadamard_fp4
from dsv4.layers.norm_rope import NORM_BF16, NORM_FP32, NORM_NONE, fused_norm_rope

FP8_MAX = 448.0
FP4_MAX = 6.0
FP8_BLOCK = 64  # KV cache entries
ACT_BLOCK = 128  # GEMM inputs
FP4_BLOCK = 32
AMAX_FLOOR = 1e-4
FP4_AMAX_FLOOR = 6 * 2.0**-126
FP4_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """RMSNorm over the last dim, computed in fp32, returned in the input dtype."""
    fused = fused_norm_rope(x, NORM_FP32, weight, eps)  # one kernel on CUDA
    if fused is not None:
        return fused
    xf = x.float()
    y = xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight
    return y.to(x.dtype)


def rms_norm_for_gemm(x: torch.Tensor, weight: torch.Tensor, eps: float, fp32: bool = False):
    """(`rms_norm(x)`, its `act_quant` (the input of an FP8/FP4 GEMM), and with `fp32` the normed values in fp32 (an
    fp32 GEMM's input) or None): one kernel on CUDA, where these were three."""
    fused = fused_norm_rope(x, NORM_FP32, weight, eps, quant_out=ACT_BLOCK, fp32_out=fp32, qmax=FP8_MAX,
                            floor=AMAX_FLOOR)
    if fused is not None:
        return fused
    normed = rms_norm(x, weight, eps)
    return normed, act_quant(normed), normed.float() if fp32 else None


def rope_frequencies(config, compressed: bool, device=None) -> torch.Tensor:
    """The rope_dim/2 rotation frequencies in fp32 on `device`, as the official code computes them (same ops in
    the same order, on the model's device): ``1.0 / theta ** (arange(0, dim, 2) / dim)``; plain theta for window
    layers, YaRN-scaled compress theta otherwise."""
    dim = config.qk_rope_head_dim
    theta = config.compress_rope_theta if compressed else config.rope_theta
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float32, device=device) / dim))
    scaling = config.rope_scaling or {}
    if not compressed or scaling.get("type", scaling.get("rope_type")) != "yarn":
        return freqs
    factor = float(scaling["factor"])
    original = float(scaling["original_max_position_embeddings"])

    def correction_dim(rotations: float) -> float:
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low = max(math.floor(correction_dim(float(scaling.get("beta_fast", 32)))), 0)
    high = min(math.ceil(correction_dim(float(scaling.get("beta_slow", 1)))), dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(dim // 2, dtype=torch.float32, device=device) - low) / (high - low)).clamp(0, 1)
    smooth = 1 - ramp
    return freqs / factor * (1 - smooth) + freqs * smooth


def make_rope_table(config, compressed: bool, length: int, device) -> torch.Tensor:
    """cos/sin for positions 0..length-1 as one fp32 tensor [length, 2, rope_dim/2], built on `device`.

    The official recipe: fp32 angles ``outer(arange(length), freqs)`` (at position 10^6 an angle carries an
    error of about 0.06 rad), then ``torch.polar(1, angles)``. The official code builds it on the GPU; CUDA's
    ``pow``, ``cos`` and ``sin`` round differently from the CPU's, so the table is built where the model runs.
    """
    angles = torch.outer(torch.arange(length, device=device), rope_frequencies(config, compressed, device))
    cis = torch.polar(torch.ones_like(angles), angles)
    return torch.stack([cis.real, cis.imag], dim=1)


def apply_rope(x: torch.Tensor, cos_sin: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """Rotate interleaved pairs (2i, 2i+1) of the trailing rope dims of `x` ([..., rope_dim]).

    `cos_sin` is [B, 2, rope_dim/2] (one row per batch entry) and broadcasts over the middle dims of `x`.
    """
    xf = x.float().unflatten(-1, (-1, 2))
    shape = (cos_sin.shape[0],) + (1,) * (x.dim() - 2) + (cos_sin.shape[-1],)
    cos = cos_sin[:, 0].reshape(shape)
    sin = cos_sin[:, 1].reshape(shape)
    if inverse:
        sin = -sin
    even, odd = xf[..., 0], xf[..., 1]
    out = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
    return out.flatten(-2).to(x.dtype)


def rope_tail(x: torch.Tensor, rope_dim: int, cos_sin: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    """Apply RoPE to the last `rope_dim` channels of `x`, leaving the others untouched."""
    fused = fused_norm_rope(x, NORM_NONE, None, 0.0, rope_dim, cos_sin, inverse)
    if fused is not None:
        return fused
    head, tail = x[..., :-rope_dim], x[..., -rope_dim:]
    return torch.cat([head, apply_rope(tail, cos_sin, inverse)], dim=-1)


def head_rms_norm(q: torch.Tensor, eps: float) -> torch.Tensor:
    """Per-head RMSNorm without weight, every op in q's dtype (bf16), as the official ``q *= rsqrt(mean(q^2)+eps)``."""
    return q * torch.rsqrt(q.square().mean(-1, keepdim=True) + eps)


def norm_rope_tail(x: torch.Tensor, weight: torch.Tensor | None, eps: float, rope_dim: int,
                   cos_sin: torch.Tensor, out: torch.Tensor | None = None, dtype: torch.dtype | None = None,
                   quant_block: int = 0, scatter: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """``rope_tail(rms_norm(x, weight, eps), ...)``, or with `weight` None ``rope_tail(head_rms_norm(x, eps), ...)``,
    on x cast to `dtype` first when given; with `quant_block` the channels before the rotated ones then go through
    `fp8_fake_quant` per that many (a KV entry). One kernel on CUDA, which writes straight into `out` when given
    (the torch form copies its result there). `scatter` (a cache [B, S, n], slots [T] on the device): x's B x T rows
    go to the cache at the slots instead, as ``index_copy_`` along dim 1 would put them; returns the cache."""
    fused = fused_norm_rope(x, NORM_BF16 if weight is None else NORM_FP32, weight, eps, rope_dim, cos_sin, out=out,
                            dtype=dtype, quant_block=quant_block, qmax=FP8_MAX, floor=AMAX_FLOOR, scatter=scatter)
    if fused is not None:
        return fused
    x = x if dtype is None else x.to(dtype)
    normed = head_rms_norm(x, eps) if weight is None else rms_norm(x, weight, eps)
    result = rope_tail(normed, rope_dim, cos_sin)
    if quant_block:
        nope = x.shape[-1] - rope_dim
        fp8_fake_quant(result[..., :nope], quant_block, out=result[..., :nope])  # in place: RoPE channels stay bf16
    if scatter is not None:
        cache, slots = scatter
        return cache.index_copy_(1, slots, result.unflatten(0, (cache.shape[0], -1)))
    return result if out is None else out.copy_(result)


def pow2_round_scale(amax: torch.Tensor, qmax: float, floor: float) -> torch.Tensor:
    """The official power-of-two (ue8m0) block scale: ``2^ceil(log2(max(amax, floor) * (1/qmax)))``, fp32.

    The product is rounded to fp32 first and the ceiling is read from its bits (exponent, plus one when any
    mantissa bit is set), as the official kernels do, so no transcendental function is involved.
    """
    y = amax.float().clamp(min=floor) * (1.0 / qmax)  # a Python scalar: multiplied as fp32, no device copy
    bits = y.view(torch.int32)
    exponent = ((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0).to(torch.int32)
    return (exponent << 23).view(torch.float32)


def _blocks(x: torch.Tensor, block: int) -> torch.Tensor:
    """fp32 view [..., n_blocks, block] of the last dim, zero-padded when it is not a multiple of `block`."""
    xf = x.float()
    pad = -xf.shape[-1] % block
    if pad:
        xf = F.pad(xf, (0, pad))
    return xf.unflatten(-1, (-1, block))


def fp8_fake_quant(x: torch.Tensor, block: int = FP8_BLOCK, out: torch.Tensor | None = None) -> torch.Tensor:
    """Round-trip through e4m3 with one power-of-two scale per `block` channels; returns the input dtype.

    Official rule (``act_quant`` with a ue8m0 scale): amax floored at 1e-4, scale from `pow2_round_scale`,
    ``x / scale`` clamped to +-448 and cast to e4m3 (round to nearest even), then multiplied back. A final
    partial block (only in test configs whose widths are not multiples of the block) gets its own scale.
    Written to `out` when given (x itself allowed).
    """
    fused = fused_fp8_fake_quant(x, block, FP8_MAX, AMAX_FLOOR, out=out)  # one kernel on CUDA, bit-identical
    if fused is not None:
        return fused
    result = fp8_fake_quant_torch(x, block)
    return result if out is None else out.copy_(result)


def fp8_fake_quant_torch(x: torch.Tensor, block: int = FP8_BLOCK) -> torch.Tensor:
    """`fp8_fake_quant` in torch ops: any device, any width (the kernel's specification)."""
    blocks = _blocks(x, block)
    scale = pow2_round_scale(blocks.abs().amax(-1, keepdim=True), FP8_MAX, AMAX_FLOOR)
    q = (blocks / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn).float() * scale
    return q.flatten(-2)[..., : x.shape[-1]].to(x.dtype)


def act_quant(x: torch.Tensor) -> torch.Tensor:
    """The input of an FP8/FP4-weight GEMM as the official `linear()` feeds it: e4m3, one ue8m0 scale per 128.

    Returned dequantized in the input dtype (exact in bf16: 3 mantissa bits times a power of two), so a bf16
    GEMM with fp32 accumulation over it computes what the official scaled FP8 GEMM computes.
    """
    return fp8_fake_quant(x, ACT_BLOCK)


def make_fp4_tables(device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The e2m1 magnitudes, the midpoints between them, and which midpoints round up (ties to even)."""
    grid = torch.tensor(FP4_GRID, dtype=torch.float32, device=device)
    mids = (grid[1:] + grid[:-1]) / 2
    # A tie goes to the neighbour with an even mantissa: 0, 1, 2, 4 (odd-indexed midpoints round up).
    ties_up = torch.arange(mids.numel(), device=device) % 2 == 1
    return grid, mids, ties_up


def fp4_fake_quant(x: torch.Tensor, tables: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Round-trip through e2m1 with one power-of-two scale per 32 channels (round to nearest, ties to even)."""
    grid, mids, ties_up = tables
    blocks = x.float().unflatten(-1, (-1, FP4_BLOCK))
    scale = pow2_round_scale(blocks.abs().amax(-1, keepdim=True), FP4_MAX, FP4_AMAX_FLOOR)
    mag = (blocks / scale).clamp(-FP4_MAX, FP4_MAX).abs().unsqueeze(-1)
    index = ((mag > mids) | ((mag == mids) & ties_up)).sum(-1)
    q = grid[index] * torch.sign(blocks) * scale
    return q.flatten(-2).to(x.dtype)


def hadamard(x: torch.Tensor) -> torch.Tensor:
    """Walsh-Hadamard transform of the last dim (a power of two) times n^-1/2: fp32 butterflies, input dtype out.

    Butterflies pair (i, i+h) inside blocks of 2h for h = 1, 2, 4, ..., like the official fast transform,
    and the scale multiplies once at the end.
    """
    n = x.shape[-1]
    if n & (n - 1):
        raise ValueError(f"Hadamard size must be a power of two, got {n}")
    y = x.float()
    h = 1
    while h < n:
        pairs = y.unflatten(-1, (n // (2 * h), 2, h))
        a, b = pairs[..., 0, :], pairs[..., 1, :]
        y = torch.stack((a + b, a - b), dim=-2).flatten(-3)
        h *= 2
    return (y * n**-0.5).to(x.dtype)


def hadamard_fp4(x: torch.Tensor, tables: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
                 out: torch.Tensor | None = None) -> torch.Tensor:
    """``fp4_fake_quant(hadamard(x), tables)``, the indexer's queries and keys: one kernel on CUDA, which writes
    straight into `out` when given (the torch form copies its result there)."""
    fused = fused_hadamard_fp4(x, FP4_BLOCK, FP4_AMAX_FLOOR, out=out)
    if fused is not None:
        return fused
    result = fp4_fake_quant(hadamard(x), tables)
    return result if out is None else out.copy_(result)


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """y = x W^T in the weight's dtype."""
    return F.linear(x.to(weight.dtype), weight)


def vocab_logits(x: torch.Tensor, norm: torch.Tensor, head: torch.Tensor, eps: float,
                 out: torch.Tensor | None = None) -> torch.Tensor:
    """fp32 logits of the collapsed streams: final RMSNorm, then the head's fp32 GEMM (`fp32_matvec`); written
    into `out` when given."""
    return fp32_matvec(rms_norm(x, norm, eps), head, out)
