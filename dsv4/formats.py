"""In-memory quantized weight formats of the DeepSeek-V4 checkpoints, torch ops only.

Every object holds a (possibly expert-stacked) linear weight of logical shape ``(..., out, in)`` in the form it
is stored on disk, and dequantizes it with fixed-shape device ops (a gather from a 16-entry e2m1 table, block
scales broadcast by expand/reshape), so ``w.index_select(ids).dequantize()`` can run inside a CUDA graph: no host
sync, no data-dependent shape, no host-to-device copy after construction.

* ``NVFP4Weight``: packed e2m1 uint8 ``[..., out, in/2]`` (low nibble = even k), float8_e4m3fn block scales
  ``[..., out, in/16]``, f32 per-matrix ``global_scale`` (``weight_scale_2``), optional f32 ``input_scale``
  (the activation calibration scale; not part of the weight's value).
  ``w = e2m1[nibble] * scale * global_scale``.
* ``FP8BlockWeight``: float8_e4m3fn ``[..., out, in]`` with one scale per 128x128 block,
  ``[..., ceil(out/128), ceil(in/128)]``, either E8M0 bytes (uint8 or float8_e8m0fnu) or f32.
* ``MXFP4Weight``: packed e2m1 (int8 as in the official release, or uint8) ``[..., out, in/2]`` with E8M0
  scales per 32 elements ``[..., out, in/32]``.
* ``BF16Weight``: a plain tensor.

E8M0 scales are always reinterpreted (the byte becomes a float32 exponent field, ``2^(byte-127)``), never cast
numerically: a numeric cast of float8_e8m0fnu would be a different, slower code path with its own rounding.
Quantizers round to nearest, ties to even, and saturate at the format's maximum (6 for e2m1, 448 for e4m3).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
FP4_MAX = 6.0
FP8_MAX = 448.0
NVFP4_BLOCK = 16
MXFP4_BLOCK = 32
FP8_BLOCK = 128
E8M0_DTYPES = (torch.uint8, torch.float8_e8m0fnu)


class FormatError(ValueError):
    """Tensors that do not form a valid weight of the requested format."""


@runtime_checkable
class QuantizedWeight(Protocol):
    format: str
    shape: tuple[int, ...]
    nbytes: int

    def dequantize(self, dtype: torch.dtype = torch.bfloat16) -> Tensor: ...

    def parts(self) -> dict[str, Tensor]: ...

    def index_select(self, idx: Tensor) -> QuantizedWeight: ...

    def to(self, device) -> QuantizedWeight: ...


def e2m1_lut(device=None) -> Tensor:
    """The 16 e2m1 values indexed by nibble (bit 3 = sign): 0, 0.5, 1, 1.5, 2, 3, 4, 6, then their negatives."""
    return torch.tensor(E2M1_VALUES + tuple(-v for v in E2M1_VALUES), dtype=torch.float32, device=device)


def e8m0_to_float32(scale: Tensor) -> Tensor:
    """``2^(byte-127)`` by placing the byte in a float32 exponent field (byte 0 -> 2^-127 subnormal, 255 -> NaN)."""
    b = scale.view(torch.uint8)
    bits = b.to(torch.int32) << 23
    bits = torch.where(b == 0, 0x00400000, bits)
    bits = torch.where(b == 255, 0x7FC00000, bits)
    return bits.view(torch.float32)


def pow2_ceil_exponent(x: Tensor) -> Tensor:
    """Exact ``ceil(log2(x))`` for x > 0 (0 for x == 0), from the float's own exponent, as int32."""
    mant, exp = torch.frexp(x.float())
    return exp - (mant == 0.5).to(torch.int32)


def e8m0_from_exponent(exp: Tensor) -> Tensor:
    """E8M0 bytes (as float8_e8m0fnu) for scales ``2^exp``; exponents are clamped to the finite range."""
    return (exp.clamp(-127, 127) + 127).to(torch.uint8).view(torch.float8_e8m0fnu)


def round_to_e2m1(x: Tensor) -> Tensor:
    """e2m1 codes (uint8, sign in bit 3) of ``x``: nearest value, ties to even mantissa, saturating at +-6."""
    a = x.abs()
    code = ((a > 0.25).to(torch.uint8) + (a >= 0.75) + (a > 1.25) + (a >= 1.75)
            + (a > 2.5) + (a >= 3.5) + (a > 5.0))
    sign = ((x < 0) & (code > 0)).to(torch.uint8) << 3
    return code | sign


def pack_nibbles(codes: Tensor) -> Tensor:
    """Pack e2m1 codes along the last dim, even k in the low nibble."""
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def _decode_nibbles(packed: Tensor, lut: Tensor) -> Tensor:
    p = packed.view(torch.uint8).to(torch.int32)
    pairs = torch.stack((lut[p & 15], lut[p >> 4]), dim=-1)
    return pairs.flatten(-2)


def _expand_last(scale: Tensor, block: int) -> Tensor:
    """Repeat each element of the last dim ``block`` times (fixed-shape expand, no repeat_interleave)."""
    return scale.unsqueeze(-1).expand(*scale.shape, block).flatten(-2)


def tensor_bytes(*tensors: Tensor | None) -> int:
    """The bytes the tensors hold (None counts nothing)."""
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise FormatError(msg)


class NVFP4Weight:
    format = "nvfp4"

    def __init__(self, packed: Tensor, scale: Tensor, global_scale: Tensor, input_scale: Tensor | None = None,
                 lut: Tensor | None = None):
        _check(packed.dim() >= 2 and packed.dtype == torch.uint8,
               f"nvfp4 packed weight must be uint8 [..., out, in/2], got {packed.dtype} {list(packed.shape)}")
        lead, out, half = tuple(packed.shape[:-2]), packed.shape[-2], packed.shape[-1]
        _check((2 * half) % NVFP4_BLOCK == 0, f"nvfp4 in-features {2 * half} is not a multiple of {NVFP4_BLOCK}")
        want = [*lead, out, 2 * half // NVFP4_BLOCK]
        _check(scale.dtype == torch.float8_e4m3fn and list(scale.shape) == want,
               f"nvfp4 weight_scale must be float8_e4m3fn {want}, got {scale.dtype} {list(scale.shape)}")
        _check(global_scale.dtype == torch.float32 and list(global_scale.shape) == list(lead),
               f"nvfp4 weight_scale_2 must be float32 {list(lead)}, got {global_scale.dtype} "
               f"{list(global_scale.shape)}")
        _check(input_scale is None or (input_scale.dtype == torch.float32
                                       and list(input_scale.shape) == list(lead)),
               f"nvfp4 input_scale must be float32 {list(lead)}")
        self.packed, self.scale, self.global_scale, self.input_scale = packed, scale, global_scale, input_scale
        self.shape = (*lead, out, 2 * half)
        self.nbytes = tensor_bytes(packed, scale, global_scale, input_scale)
        self.lut = lut
        if lut is None:  # built once at load time; index_select/to pass it on, so no copy happens in a graph
            self.lut = e2m1_lut(packed.device)

    def parts(self) -> dict[str, Tensor]:
        """The stored tensors, keyed by constructor argument."""
        p = {"packed": self.packed, "scale": self.scale, "global_scale": self.global_scale}
        if self.input_scale is not None:
            p["input_scale"] = self.input_scale
        return p

    def dequantize(self, dtype: torch.dtype = torch.bfloat16) -> Tensor:
        vals = _decode_nibbles(self.packed, self.lut)
        scale = _expand_last(self.scale.float(), NVFP4_BLOCK) * self.global_scale[..., None, None]
        return (vals * scale).to(dtype)

    def index_select(self, idx: Tensor) -> NVFP4Weight:
        isc = None if self.input_scale is None else self.input_scale.index_select(0, idx)
        return NVFP4Weight(self.packed.index_select(0, idx), self.scale.index_select(0, idx),
                           self.global_scale.index_select(0, idx), isc, self.lut)

    def to(self, device) -> NVFP4Weight:
        isc = None if self.input_scale is None else self.input_scale.to(device)
        return NVFP4Weight(self.packed.to(device), self.scale.to(device), self.global_scale.to(device), isc,
                           self.lut.to(device))

    def __repr__(self) -> str:
        return f"NVFP4Weight(shape={self.shape}, device={self.packed.device})"


class FP8BlockWeight:
    format = "fp8"

    def __init__(self, weight: Tensor, scale: Tensor):
        _check(weight.dim() >= 2 and weight.dtype == torch.float8_e4m3fn,
               f"fp8 weight must be float8_e4m3fn [..., out, in], got {weight.dtype} {list(weight.shape)}")
        out, inp = weight.shape[-2:]
        want = [*weight.shape[:-2], -(-out // FP8_BLOCK), -(-inp // FP8_BLOCK)]
        _check((scale.dtype == torch.float32 or scale.dtype in E8M0_DTYPES) and list(scale.shape) == want,
               f"fp8 block scale must be E8M0 or float32 {want}, got {scale.dtype} {list(scale.shape)}")
        self.weight, self.scale = weight, scale
        self.shape = tuple(weight.shape)
        self.nbytes = tensor_bytes(weight, scale)

    def parts(self) -> dict[str, Tensor]:
        return {"weight": self.weight, "scale": self.scale}

    @property
    def scale_format(self) -> str:
        return "f32" if self.scale.dtype == torch.float32 else "e8m0"

    def dequantize(self, dtype: torch.dtype = torch.bfloat16) -> Tensor:
        s = self.scale if self.scale.dtype == torch.float32 else e8m0_to_float32(self.scale)
        s = _expand_last(_expand_last(s, FP8_BLOCK).transpose(-1, -2), FP8_BLOCK).transpose(-1, -2)
        out, inp = self.shape[-2:]
        return (self.weight.float() * s[..., :out, :inp]).to(dtype)

    def index_select(self, idx: Tensor) -> FP8BlockWeight:
        return FP8BlockWeight(self.weight.index_select(0, idx), self.scale.index_select(0, idx))

    def to(self, device) -> FP8BlockWeight:
        return FP8BlockWeight(self.weight.to(device), self.scale.to(device))

    def __repr__(self) -> str:
        return f"FP8BlockWeight(shape={self.shape}, scale={self.scale_format}, device={self.weight.device})"


class MXFP4Weight:
    format = "mxfp4"

    def __init__(self, packed: Tensor, scale: Tensor, lut: Tensor | None = None):
        _check(packed.dim() >= 2 and packed.dtype in (torch.int8, torch.uint8),
               f"mxfp4 packed weight must be int8/uint8 [..., out, in/2], got {packed.dtype} {list(packed.shape)}")
        inp = 2 * packed.shape[-1]
        _check(inp % MXFP4_BLOCK == 0, f"mxfp4 in-features {inp} is not a multiple of {MXFP4_BLOCK}")
        want = [*packed.shape[:-1], inp // MXFP4_BLOCK]
        _check(scale.dtype in E8M0_DTYPES and list(scale.shape) == want,
               f"mxfp4 scale must be E8M0 {want}, got {scale.dtype} {list(scale.shape)}")
        self.packed, self.scale = packed, scale
        self.shape = (*packed.shape[:-1], inp)
        self.nbytes = tensor_bytes(packed, scale)
        self.lut = lut
        if lut is None:  # built once at load time; index_select/to pass it on, so no copy happens in a graph
            self.lut = e2m1_lut(packed.device)

    def parts(self) -> dict[str, Tensor]:
        return {"packed": self.packed, "scale": self.scale}

    def dequantize(self, dtype: torch.dtype = torch.bfloat16) -> Tensor:
        vals = _decode_nibbles(self.packed, self.lut)
        return (vals * _expand_last(e8m0_to_float32(self.scale), MXFP4_BLOCK)).to(dtype)

    def index_select(self, idx: Tensor) -> MXFP4Weight:
        return MXFP4Weight(self.packed.index_select(0, idx), self.scale.index_select(0, idx), self.lut)

    def to(self, device) -> MXFP4Weight:
        return MXFP4Weight(self.packed.to(device), self.scale.to(device), self.lut.to(device))

    def __repr__(self) -> str:
        return f"MXFP4Weight(shape={self.shape}, device={self.packed.device})"


class BF16Weight:
    format = "bf16"

    def __init__(self, weight: Tensor):
        _check(weight.dim() >= 2 and weight.is_floating_point(),
               f"bf16 weight must be a floating tensor [..., out, in], got {weight.dtype} {list(weight.shape)}")
        self.weight = weight
        self.shape = tuple(weight.shape)
        self.nbytes = tensor_bytes(weight)

    def parts(self) -> dict[str, Tensor]:
        return {"weight": self.weight}

    def dequantize(self, dtype: torch.dtype = torch.bfloat16) -> Tensor:
        return self.weight.to(dtype)

    def index_select(self, idx: Tensor) -> BF16Weight:
        return BF16Weight(self.weight.index_select(0, idx))

    def to(self, device) -> BF16Weight:
        return BF16Weight(self.weight.to(device))

    def __repr__(self) -> str:
        return f"BF16Weight(shape={self.shape}, dtype={self.weight.dtype}, device={self.weight.device})"


def quantize_nvfp4(w: Tensor, input_scale: Tensor | None = None) -> NVFP4Weight:
    """NVFP4 with a per-matrix global scale ``amax / (6 * 448)`` so the e4m3 block scales use their full range."""
    _check(w.dim() >= 2 and w.shape[-1] % NVFP4_BLOCK == 0,
           f"nvfp4 needs [..., out, in] with in a multiple of {NVFP4_BLOCK}, got {list(w.shape)}")
    w = w.float()
    amax = w.abs().amax(dim=(-2, -1))
    gs = amax / (FP4_MAX * FP8_MAX)
    gs = torch.where(gs > 0, gs, 1.0)
    blocks = w.unflatten(-1, (-1, NVFP4_BLOCK))
    bscale = (blocks.abs().amax(-1) / FP4_MAX / gs[..., None, None]).clamp(max=FP8_MAX).to(torch.float8_e4m3fn)
    eff = bscale.float() * gs[..., None, None]
    q = blocks / torch.where(eff > 0, eff, 1.0)[..., None]
    codes = round_to_e2m1(q).flatten(-2)
    return NVFP4Weight(pack_nibbles(codes), bscale, gs, input_scale)


def quantize_fp8_block(w: Tensor, scale_format: str = "e8m0") -> FP8BlockWeight:
    """FP8 e4m3 with one scale per 128x128 block (partial edge blocks use their own amax).

    ``e8m0`` scales are the power of two ``2^ceil(log2(amax/448))`` (no clipping); ``f32`` scales are amax/448.
    """
    _check(w.dim() >= 2, f"fp8 needs [..., out, in], got {list(w.shape)}")
    _check(scale_format in ("e8m0", "f32"), f"scale_format must be 'e8m0' or 'f32', got {scale_format!r}")
    w = w.float()
    out, inp = w.shape[-2:]
    po, pi = -out % FP8_BLOCK, -inp % FP8_BLOCK
    padded = torch.nn.functional.pad(w, (0, pi, 0, po))
    blocks = padded.unflatten(-1, (-1, FP8_BLOCK)).unflatten(-3, (-1, FP8_BLOCK))  # [..., bo, 128, bi, 128]
    amax = blocks.abs().amax(dim=(-3, -1))  # [..., bo, bi]
    if scale_format == "e8m0":
        exp = pow2_ceil_exponent(amax / FP8_MAX).clamp(-127, 127)
        scale = e8m0_from_exponent(exp)
        s = torch.ldexp(torch.ones_like(amax), exp)
    else:
        scale = torch.where(amax > 0, amax / FP8_MAX, 1.0)
        s = scale
    q = blocks / s[..., :, None, :, None]
    q = q.flatten(-2).flatten(-3, -2)[..., :out, :inp]
    return FP8BlockWeight(q.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn), scale)


def quantize_mxfp4(w: Tensor) -> MXFP4Weight:
    """MXFP4 (block 32) with power-of-two E8M0 scales ``2^ceil(log2(amax/6))``, packed as int8 like the release."""
    _check(w.dim() >= 2 and w.shape[-1] % MXFP4_BLOCK == 0,
           f"mxfp4 needs [..., out, in] with in a multiple of {MXFP4_BLOCK}, got {list(w.shape)}")
    blocks = w.float().unflatten(-1, (-1, MXFP4_BLOCK))
    exp = pow2_ceil_exponent(blocks.abs().amax(-1) / FP4_MAX).clamp(-127, 127)
    codes = round_to_e2m1(torch.ldexp(blocks, -exp[..., None])).flatten(-2)
    return MXFP4Weight(pack_nibbles(codes).view(torch.int8), e8m0_from_exponent(exp))


def as_bf16(w: Tensor) -> BF16Weight:
    return BF16Weight(w.to(torch.bfloat16))
